package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/decisiontable"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// tableUpstream is where the table's hosts are pinned: a loopback address
// of its own, since the table's ports (80, 443, 8080) are fixed.
const tableUpstream = "127.0.0.12"

// evalAnswer is what `airlock policy eval` prints.
type evalAnswer struct {
	policies.Decision
	Hint string `json:"hint"`
}

// Every row of the decision table gets the same answer from `airlock policy
// eval` and from a running proxy: allow or deny, reason, rule, inspection
// and hint. The proxy is asked by a real process whose executable is the
// row's (the relay, bind-mounted at that path in a mount namespace of its
// own), with the bytes a client would send: a CONNECT for a connect row,
// an absolute-form request (decided as inside an inspected tunnel) for a
// request row.
func TestDecisionTableProxyMatchesEval(t *testing.T) {
	testutil.RequireRoot(t, "mount namespaces, to run the relay as each row's executable")
	cases, err := decisiontable.Load("../policies/testdata/decisions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	clientSHA := fileSHA(t, self)

	ports := map[int]bool{}
	var pins []string
	for _, c := range cases {
		in := c.Input()
		ports[in.Request.Port] = true
		if h, err := policies.CanonicalHost(in.Request.Host); err == nil {
			pins = append(pins, "--resolve", fmt.Sprintf("%s:%d:%s", h, in.Request.Port, tableUpstream))
		}
	}
	for port := range ports {
		serveTable(t, port)
	}

	presets := map[string][]decisiontable.Case{}
	var order []string
	for _, c := range cases {
		if presets[c.Preset] == nil {
			order = append(order, c.Preset)
		}
		presets[c.Preset] = append(presets[c.Preset], c)
	}
	for _, preset := range order {
		t.Run(preset, func(t *testing.T) {
			pdir := filepath.Join(dir, preset)
			args := append([]string{"--preset", preset, "--pid", strconv.Itoa(os.Getpid()), "--allow-range", tableUpstream + "/32"}, pins...)
			if !knownPreset(t, preset) {
				// Neither allows: policy eval refuses the input (usage,
				// exit 2, naming the preset), and a proxy for a preset
				// the bundle lacks never starts. (The engine itself
				// answers policy_error: policies' own table test.)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				out, err := exec.CommandContext(ctx, airlockBin, append([]string{"proxy", "--listen", "127.0.0.1:0", "--ca-dir", filepath.Join(pdir, "ca")}, args...)...).CombinedOutput()
				if err == nil || !strings.Contains(string(out), preset) {
					t.Fatalf("airlock proxy --preset %s = %v\n%s; want a refusal naming the preset", preset, err, out)
				}
				for _, c := range presets[preset] {
					doc, _ := json.Marshal(c.Input())
					cmd := exec.Command(airlockBin, "policy", "eval", "--input", "-")
					cmd.Stdin = bytes.NewReader(doc)
					out, err := cmd.CombinedOutput()
					if exitCode(err) != 2 || !strings.Contains(string(out), preset) {
						t.Errorf("%s: policy eval = %v\n%s; want exit 2 naming the preset", c.Note, err, out)
					}
				}
				return
			}
			os.MkdirAll(pdir, 0o755)
			rp := startProxy(t, pdir, cleanEnv(), args...)
			for _, c := range presets[preset] {
				want := eval(t, c, clientSHA)
				if !c.Matches(want.Decision) {
					t.Errorf("%s: policy eval = %+v; the table wants %+v", c.Note, want, c.Want)
				}
				seen := len(rp.decisions(t))
				resp, body := ask(t, rp, c, dir)
				lines := rp.decisionsAfter(t, seen)
				got := lines[len(lines)-1]
				if (got.Decision == "allow") != want.Allow || policies.Reason(got.Reason) != want.Reason || got.Rule != want.Rule ||
					(c.Input().Request.Phase == policies.PhaseConnect && got.Inspect != want.Inspect) {
					t.Errorf("%s: the proxy decided %s %s rule %q inspect %v; policy eval %+v", c.Note, got.Decision, got.Reason, got.Rule, got.Inspect, want)
					continue
				}
				if got.Binary != c.Exe || got.SHA256 != clientSHA {
					t.Errorf("%s: the proxy saw binary %s sha256 %s; want %s %s", c.Note, got.Binary, got.SHA256, c.Exe, clientSHA)
				}
				if want.Allow {
					if resp.StatusCode != http.StatusOK {
						t.Errorf("%s: allowed, but the client got %s %q", c.Note, resp.Status, body)
					}
					continue
				}
				checkDenial(t, c, want, resp, body)
			}
		})
	}
}

// checkDenial checks that the client was told the reason policy eval gives,
// and its hint, in the JSON body or git's text lines.
func checkDenial(t *testing.T, c decisiontable.Case, want evalAnswer, resp *http.Response, body []byte) {
	t.Helper()
	header := resp.Header.Get("X-Airlock-Reason")
	switch {
	case header == string(want.Reason) && resp.StatusCode == http.StatusBadRequest && want.Reason == policies.ReasonInvalidRequest &&
		bytes.Contains(body, []byte("refused by the proxy's HTTP server before the request was read")):
		// net/http refuses a request line it cannot parse itself, before
		// any handler runs: the proxy's answer has the reason but cannot
		// name what the server never read, the hint policy eval gives;
		// the audit line, compared already, is the proxy's decision.
	case header != string(want.Reason):
		t.Errorf("%s: the client got %s with %s %q; want %s", c.Note, resp.Status, "X-Airlock-Reason", header, want.Reason)
	case strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json"):
		var d denial
		if err := json.Unmarshal(body, &d); err != nil || d.Reason != string(want.Reason) || d.Hint != want.Hint {
			t.Errorf("%s: the client got %s %q (%v); want reason %s, hint %q", c.Note, resp.Status, body, err, want.Reason, want.Hint)
		}
	case strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain"):
		// git's lines: the hint on one line, then the fields.
		hint := "airlock: " + strings.NewReplacer("\n", " ", "…", "...").Replace(want.Hint) + "\n"
		if !bytes.Contains(body, []byte(hint)) || !bytes.Contains(body, []byte("reason="+string(want.Reason)+" ")) {
			t.Errorf("%s: the client got %s %q; want reason %s, hint %q", c.Note, resp.Status, body, want.Reason, want.Hint)
		}
	default:
		t.Errorf("%s: the denial came as %q, neither JSON nor git's text", c.Note, resp.Header.Get("Content-Type"))
	}
}

// knownPreset reports whether the embedded bundle has preset.
func knownPreset(t *testing.T, preset string) bool {
	out, err := exec.Command(airlockBin, "policy", "verify").Output()
	if err != nil {
		t.Fatalf("airlock policy verify: %v", err)
	}
	_, names, _ := strings.Cut(strings.TrimSpace(string(out)), "presets=")
	return slices.Contains(strings.Split(names, ","), preset)
}

// eval asks `airlock policy eval` the row's question, with the hash the
// proxy sees for the relay.
func eval(t *testing.T, c decisiontable.Case, sha string) evalAnswer {
	t.Helper()
	in := c.Input()
	in.Process.SHA256 = sha
	doc, _ := json.Marshal(in)
	cmd := exec.Command(airlockBin, "policy", "eval", "--input", "-")
	cmd.Stdin = bytes.NewReader(doc)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: airlock policy eval: %v\n%s", c.Note, err, stderr.String())
	}
	var a evalAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		t.Fatalf("%s: policy eval printed %q: %v", c.Note, out, err)
	}
	return a
}

// ask sends the row's request to the proxy from a relay running as the
// row's executable, and returns the proxy's answer.
func ask(t *testing.T, rp *runningProxy, c decisiontable.Case, dir string) (*http.Response, []byte) {
	t.Helper()
	r := c.Input().Request
	target := net.JoinHostPort(r.Host, strconv.Itoa(r.Port))
	var raw string
	method := http.MethodConnect
	if r.Phase == policies.PhaseConnect {
		raw = fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	} else {
		method = r.Method
		uri := "http://" + target + r.Path
		if len(r.Query) > 0 {
			uri += "?" + url.Values(r.Query).Encode()
		}
		raw = fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n", r.Method, uri, target)
		if r.Upgrade != "" {
			raw += "Connection: Upgrade\r\nUpgrade: " + r.Upgrade + "\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
		} else {
			raw += "Connection: close\r\n"
		}
		raw += "\r\n"
	}
	cmd := relayAs(t, c.Exe, dir, rp.addr)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close() // the relay ends with its stdin
	io.WriteString(stdin, raw)
	resp, err := http.ReadResponse(bufio.NewReader(stdout), &http.Request{Method: method})
	if err != nil {
		stdin.Close()
		cmd.Wait()
		t.Fatalf("%s: no answer from the proxy to %q: %v (relay: %s)", c.Note, raw, err, stderr.String())
	}
	var body []byte
	if resp.StatusCode != http.StatusOK || method != http.MethodConnect {
		body, _ = io.ReadAll(resp.Body)
	}
	return resp, body
}

// relayAs is the test binary as a relay (testutil.ServeClient) to addr,
// executed as exe: in a mount namespace of its own, a directory holding a
// link to the test binary under exe's name is bind-mounted over exe's
// directory, so /proc/<pid>/exe, which the proxy reads, names exe.
func relayAs(t *testing.T, exe, dir, addr string) *exec.Cmd {
	t.Helper()
	stage := filepath.Join(dir, "as", filepath.Dir(exe))
	if _, err := os.Stat(filepath.Join(stage, filepath.Base(exe))); err != nil {
		self, _ := os.Executable()
		os.MkdirAll(stage, 0o755)
		if err := os.Link(self, filepath.Join(stage, filepath.Base(exe))); err != nil {
			copyFile(t, self, filepath.Join(stage, filepath.Base(exe)), 0o755)
		}
	}
	// Go makes the new namespace's mounts private before the shell runs,
	// so the bind mount is seen by the relay alone.
	cmd := exec.Command("/bin/sh", "-c", `mount --bind "$0" "$1" && exec "$2"`, stage, filepath.Dir(exe), exe)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	cmd.Env = cleanEnv(testutil.RelayEnv + "=" + addr)
	return cmd
}

// serveTable answers every request on tableUpstream:port with 200, as the
// upstream of whatever the table allows.
func serveTable(t *testing.T, port int) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(tableUpstream, strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("upstream for the decision table: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// decisions are the proxy's decision lines so far.
func (rp *runningProxy) decisions(t *testing.T) []auditLine {
	t.Helper()
	raw, _ := os.ReadFile(rp.auditLog)
	var out []auditLine
	for _, l := range strings.Split(string(raw), "\n") {
		var a auditLine
		if json.Unmarshal([]byte(l), &a) == nil && a.Msg == "CANONICAL-PROXY-DECISION" {
			out = append(out, a)
		}
	}
	return out
}

// decisionsAfter waits for a decision line after the first seen ones and
// returns those after them.
func (rp *runningProxy) decisionsAfter(t *testing.T, seen int) []auditLine {
	t.Helper()
	rp.auditMsg(t, "CANONICAL-PROXY-DECISION", func(auditLine) bool { return len(rp.decisions(t)) > seen })
	return rp.decisions(t)[seen:]
}
