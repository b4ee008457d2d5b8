package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A denial reaches the agent in what its client prints, whatever the
// client: a refused CONNECT shows only its status line to most of them
// (curl -v, Python, Node, Go), and git shows only a text/plain body, as
// "remote:" lines. Each client here is the real one, and the test reads
// its own output.
func TestDenialsClientsShow(t *testing.T) {
	w := newWorld(t)
	// Rule "anywhere" takes any host on other ports: deny.test on this one
	// is refused port_not_allowed, the closest rule named.
	denied := fmt.Sprintf("https://deny.test:%d/", w.tlsPort)
	want := fmt.Sprintf(`403 airlock: port_not_allowed: port %d is not allowed for deny.test (closest rule "anywhere")`, w.tlsPort)

	t.Run("curl -v", func(t *testing.T) {
		cmd := exec.Command(w.curl, "-v", "-sS", "-x", w.proxy.url, "--cacert", w.proxy.caFile, denied)
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "< HTTP/1.1 "+want) {
			t.Fatalf("curl -v: %v\n%s", err, out)
		}
	})

	t.Run("python3 urllib", func(t *testing.T) {
		script := `import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1])
except Exception as e:
    print(e)
`
		cmd := exec.Command(w.python, "-c", script, denied)
		cmd.Env = cleanEnv("HTTPS_PROXY="+w.proxy.url, "SSL_CERT_FILE="+w.proxy.caFile)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Tunnel connection failed: "+want) {
			t.Fatalf("python3: %v\n%s", err, out)
		}
	})

	t.Run("node http CONNECT", func(t *testing.T) {
		// What an agent (https-proxy-agent and the like) reads of a
		// refused CONNECT: the response's status code and message.
		script := `const http = require("http");
const [host, port] = process.argv[1].split(":");
const req = http.request({host, port: Number(port), method: "CONNECT", path: process.argv[2]});
req.on("connect", (res, socket) => { console.log(res.statusCode + " " + res.statusMessage); socket.destroy(); });
req.on("error", (e) => { console.log("error " + e.message); process.exit(1); });
req.end();
`
		cmd := exec.Command(w.node, "-e", script, w.proxy.addr, strings.TrimSuffix(strings.TrimPrefix(denied, "https://"), "/"))
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), want) {
			t.Fatalf("node: %v\n%s", err, out)
		}
	})

	t.Run("Go net/http", func(t *testing.T) {
		_, err := w.goClient(t).Get(denied)
		if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(want, "403 ")) {
			t.Fatalf("Go client: %v", err)
		}
	})

	t.Run("git push", func(t *testing.T) {
		git := w.gitThrough(t)
		dest := filepath.Join(t.TempDir(), "clone")
		if out, err := git(w.dir, "clone", "-q", fmt.Sprintf("https://git.test:%d/repo.git", w.tlsPort), dest); err != nil {
			t.Fatalf("git clone: %v\n%s", err, out)
		}
		os.WriteFile(filepath.Join(dest, "NEW"), []byte("x"), 0o644)
		git(dest, "add", "NEW")
		git(dest, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
		out, err := git(dest, "push", "origin", "main")
		port := fmt.Sprintf("%d", w.tlsPort)
		for _, line := range []string{
			`remote: airlock: push to git.test is not allowed by preset "itest": deny rule "no-push-discovery" matches GET git.test:` + port + `/repo.git/info/refs?service=git-receive-pack; deny rules win over allow rules`,
			`remote: airlock: reason=denied_by_rule rule="no-push-discovery" binary=` + w.gitRemote + ` sandbox=`,
		} {
			if err == nil || !strings.Contains(string(out), line) {
				t.Fatalf("git push: %v\n%s\nwant a line %q", err, out, line)
			}
		}
	})

	t.Run("git clone of a path no rule allows", func(t *testing.T) {
		out, err := w.gitThrough(t)(t.TempDir(), "clone", fmt.Sprintf("https://git.test:%d/o/repo.git", w.tlsPort), "x")
		if line := `remote: airlock: clone or fetch from git.test is not allowed by preset "itest": path /o/repo.git/info/refs is not allowed on git.test`; err == nil || !strings.Contains(string(out), line) {
			t.Fatalf("git clone: %v\n%s\nwant a line %q", err, out, line)
		}
	})

	t.Run("curl -v of the proxy itself", func(t *testing.T) {
		// Not a proxy request (origin-form): refused 400 with the reason
		// in the status line too, and the JSON body.
		cmd := exec.Command(w.curl, "-v", "-sS", w.proxy.url+"/x")
		cmd.Env = cleanEnv()
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), "< HTTP/1.1 400 airlock: invalid_request: the request cannot be read unambiguously: origin-form request: ") ||
			!strings.Contains(string(out), `"reason":"invalid_request"`) {
			t.Fatalf("curl -v: %s", out)
		}
	})

	t.Run("other clients keep the JSON body", func(t *testing.T) {
		status, body := w.curlCmd(t, w.curl, fmt.Sprintf("https://api.test:%d/v2/x", w.tlsPort))
		if d := parseDenial(t, body); status != 403 || d.Reason != "path_not_allowed" {
			t.Fatalf("GET /v2/x = %d %+v", status, d)
		}
	})
}
