package demo

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testca"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/presets"
)

// TestShimThroughProxy runs the shim behind the real `airlock proxy`
// deciding with the embedded demo preset (its port changed to the test
// upstream's): the model API is reached through an inspected tunnel, and
// both kinds of denial (the CONNECT, and a request inside the tunnel) reach
// the shim's caller as a 502 carrying the proxy's JSON reason.
func TestShimThroughProxy(t *testing.T) {
	dir := extract(t)
	bin := filepath.Join(t.TempDir(), "airlock")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/airlock-sandbox/airlock/cmd/airlock").CombinedOutput(); err != nil {
		t.Fatalf("go build airlock: %v\n%s", err, out)
	}

	// The stand-in model API, with a certificate for its name from a CA
	// the proxy trusts upstream.
	ca, err := testca.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ca.ServerConfig(ModelHost, "node.model.test")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: ModelAPI()}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	node, _ := filepath.EvalSymlinks(testutil.RequireTool(t, "node"))
	bundle := t.TempDir()
	for _, f := range []string{"common.rego", "demo.rego"} {
		src, err := presets.FS.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if f == "demo.rego" {
			pinned := fmt.Sprintf(`"ports": [%d]`, ModelPort)
			if !bytes.Contains(src, []byte(pinned)) {
				t.Fatalf("demo.rego has no %s to move to the test's port", pinned)
			}
			src = bytes.ReplaceAll(src, []byte(pinned), fmt.Appendf(nil, `"ports": [%d]`, port))
			// And one rule for node, on another name, so that the
			// gateway's own path through the proxy is seen allowed too.
			rule := fmt.Sprintf("rules := [\n\t{\"name\": \"test-node\", \"binaries\": [{\"path\": %q}], \"hosts\": [\"node.model.test\"], \"ports\": [%d], \"methods\": [\"GET\"], \"paths\": [\"/v1/models\"]},", node, port)
			if !bytes.Contains(src, []byte("rules := [\n")) {
				t.Fatal("demo.rego has no `rules := [` (then a line break) to add a rule to")
			}
			src = bytes.Replace(src, []byte("rules := [\n"), []byte(rule), 1)
		}
		os.WriteFile(filepath.Join(bundle, f), src, 0o644)
	}

	state := t.TempDir()
	proxyAddr := startProxy(t, bin, "--listen", "127.0.0.1:0", "--ca-dir", filepath.Join(state, "ca"),
		"--audit-log", filepath.Join(state, "audit.jsonl"), "--policy", bundle, "--policy-watch=false", "--preset", "demo",
		"--pid", strconv.Itoa(os.Getpid()), "--allow-range", "127.0.0.1/32", "--upstream-ca", ca.File,
		"--resolve", fmt.Sprintf("%s:%d:127.0.0.1", ModelHost, port), "--resolve", fmt.Sprintf("other.model.test:%d:127.0.0.1", port),
		"--resolve", fmt.Sprintf("node.model.test:%d:127.0.0.1", port))

	shim := func(api string) string {
		return "http://" + start(t, dir, "shim", "SHIM_PORT=0", "MODEL_API="+api,
			"HTTPS_PROXY=http://"+proxyAddr, "NO_PROXY=localhost,127.0.0.1",
			"SSL_CERT_FILE="+filepath.Join(state, "ca", "ca.pem"))
	}

	allowed := shim(fmt.Sprintf("https://%s:%d", ModelHost, port))
	var m models
	if code := call(t, "GET", allowed+"/v1/models", nil, "", &m); code != 200 || len(m.Data) != 1 || m.Data[0].ID != ModelID {
		t.Errorf("models through the proxy = %d %+v, want 200 and the model API's list", code, m)
	}
	var c struct {
		Choices []struct {
			Message struct{ Content string }
		}
	}
	if code := call(t, "POST", allowed+"/v1/chat/completions", nil, `{"model":"m","messages":[{"role":"user","content":"ping"}]}`, &c); code != 200 ||
		len(c.Choices) != 1 || c.Choices[0].Message.Content != "echo: ping" {
		t.Errorf("chat through the proxy = %d %+v, want 200 and the echo", code, c)
	}

	// The same request from the gateway, as its own egress: node is not a
	// binary the demo preset lets reach the model API.
	gateway := func(api string) string {
		return "http://" + start(t, dir, "gateway", "GATEWAY_PORT=0", "SHIM_URL="+allowed, "MODEL_API="+api,
			"HTTPS_PROXY=http://"+proxyAddr, "NODE_EXTRA_CA_CERTS="+filepath.Join(state, "ca", "ca.pem"))
	}
	gw := gateway(fmt.Sprintf("https://%s:%d", ModelHost, port))
	if code := call(t, "GET", gw+"/models", nil, "", &m); code != 200 || len(m.Data) != 1 || m.Data[0].ID != ModelID {
		t.Errorf("gateway models, from the shim = %d %+v, want 200 and the model API's list", code, m)
	}
	var d struct {
		Error, Reason string
		Airlock       struct{ Reason, Binary string }
	}
	if code := call(t, "GET", gw+"/models/direct", nil, "", &d); code != 502 || d.Reason != "binary_not_allowed" ||
		d.Airlock.Reason != "binary_not_allowed" || d.Airlock.Binary != node {
		t.Errorf("gateway models, directly = %d %+v, want 502 carrying the proxy's binary_not_allowed for %s", code, d, node)
	}
	m = models{}
	if code := call(t, "GET", gateway(fmt.Sprintf("https://node.model.test:%d", port))+"/models/direct", nil, "", &m); code != 200 ||
		len(m.Data) != 1 || m.Data[0].ID != ModelID {
		t.Errorf("gateway models, directly where a rule allows node = %d %+v, want 200 and the list", code, m)
	}
	d.Reason, d.Airlock.Reason = "", ""
	if code := call(t, "GET", gateway(fmt.Sprintf("https://node.model.test:%d/admin", port))+"/models/direct", nil, "", &d); code != 502 ||
		d.Reason != "path_not_allowed" || d.Airlock.Reason != "path_not_allowed" {
		t.Errorf("gateway models, directly on a path no rule allows = %d %+v, want 502 carrying path_not_allowed", code, d)
	}

	for _, tc := range []struct {
		name, api, reason string
	}{
		// Refused inside the inspected tunnel: the preset allows the
		// host, not this path.
		{"request", fmt.Sprintf("https://%s:%d/admin", ModelHost, port), "path_not_allowed"},
		// Refused at CONNECT: a host the preset does not name.
		{"connect", fmt.Sprintf("https://other.model.test:%d", port), "host_not_allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e apiError
			code := call(t, "GET", shim(tc.api)+"/v1/models", nil, "", &e)
			if code != 502 || e.Error.Type != "egress_denied" || e.Error.Code != tc.reason || e.Error.Airlock.Reason != tc.reason ||
				!strings.Contains(e.Error.Message, tc.reason) || e.Error.Airlock.Hint == "" {
				t.Errorf("denied models = %d %+v, want 502 egress_denied carrying the proxy's %s with its hint", code, e, tc.reason)
			}
		})
	}
}

// startProxy runs `airlock proxy` and returns the address it listens on.
func startProxy(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"proxy"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	logged := make(chan struct{})
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		<-logged // Wait closes the pipe: read it to the end first
		cmd.Wait()
	})
	go func() {
		defer close(logged)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "airlock proxy listening on "); ok {
				addr <- strings.Fields(rest)[0]
			}
			t.Log("proxy: " + sc.Text())
		}
		close(addr)
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatal("airlock proxy exited before listening")
		}
		return a
	case <-time.After(60 * time.Second):
		t.Fatal("airlock proxy did not listen within 60s")
	}
	return ""
}
