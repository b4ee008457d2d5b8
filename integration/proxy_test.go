package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptrace"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testca"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"
	"golang.org/x/net/websocket"
)

const secretValue = "s3cr3t-token-value-7f1e"

// world is the fixture: upstream servers on 127.0.0.2, a policy bundle
// written for their ports, and a running `airlock proxy` for it.
type world struct {
	dir          string
	tlsPort      int
	plainPort    int
	upstreamCA   *testca.CA
	proxy        *runningProxy
	curl         string
	pinnedCurl   string
	git          string
	gitRemote    string
	python, node string
	// streamGo releases the second event of api.test/v1/stream, plainGo
	// the second line of plain.test/stream.
	streamGo, plainGo chan struct{}
	// quietPort is an upstream that reads what it is sent and never
	// answers or closes.
	quietPort int
	// abandoned receives what api.test/v1/hold made of a request it held:
	// "cancelled" when the proxy gave it up, else "held to the end".
	abandoned chan string
	// seen holds the paths api.test/v1/seen/ was asked for.
	seen sync.Map
}

// newWorld builds the fixture; extra are more `airlock proxy` flags.
func newWorld(t *testing.T, extra ...string) *world {
	return newWorldTo(t, nil, extra...)
}

// newWorldTo is newWorld with the proxy's stdout on stdout.
func newWorldTo(t *testing.T, stdout *os.File, extra ...string) *world {
	w := &world{dir: t.TempDir(), streamGo: make(chan struct{}), plainGo: make(chan struct{}), abandoned: make(chan string, 4)}
	w.curl = testutil.RequireTool(t, "curl")
	w.git = testutil.RequireTool(t, "git")
	py := testutil.RequireTool(t, "python3")
	w.node = realpath(t, testutil.RequireTool(t, "node"))
	out, err := exec.Command(py, "-c", "import os,sys; print(os.path.realpath(sys.executable))").Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	w.python = strings.TrimSpace(string(out))
	w.curl = realpath(t, w.curl)
	gitExec, _ := exec.Command(w.git, "--exec-path").Output()
	w.gitRemote = realpath(t, filepath.Join(strings.TrimSpace(string(gitExec)), "git-remote-https"))
	self, _ := os.Executable()
	self = realpath(t, self)

	// A copy of curl whose hash the policy pins.
	w.pinnedCurl = filepath.Join(w.dir, "pinned-curl")
	copyFile(t, w.curl, w.pinnedCurl, 0o755)

	if w.upstreamCA, err = testca.New(w.dir); err != nil {
		t.Fatal(err)
	}
	w.tlsPort = w.serveTLS(t)
	w.plainPort = w.servePlain(t)
	w.quietPort = serveQuiet(t)

	bundle := filepath.Join(w.dir, "bundle")
	os.MkdirAll(bundle, 0o755)
	os.WriteFile(filepath.Join(bundle, "itest.rego"), []byte(w.preset(self)), 0o644)
	os.WriteFile(w.goneSecret(), []byte("not for long\n"), 0o600)

	var resolve []string
	for _, name := range []string{"api.test", "tunnel.test", "git.test", "ws.test", "secret.test", "plain.test", "nosecret.test", "upload.test"} {
		for _, port := range []int{w.tlsPort, w.plainPort} {
			resolve = append(resolve, "--resolve", fmt.Sprintf("%s:%d:127.0.0.2", name, port))
		}
	}
	resolve = append(resolve, "--resolve", fmt.Sprintf("internal.test:%d:10.0.0.1", w.plainPort),
		"--resolve", fmt.Sprintf("quiet.test:%d:127.0.0.2", w.quietPort))
	args := append([]string{"--policy", bundle, "--preset", "itest", "--pid", strconv.Itoa(os.Getpid()),
		"--allow-range", "127.0.0.2/32", "--upstream-ca", w.upstreamCA.File}, append(resolve, extra...)...)
	// The proxy's own environment points at a proxy that does not exist:
	// its upstream dials must ignore HTTP(S)_PROXY, or every test fails.
	w.proxy = startProxyTo(t, w.dir, cleanEnv("ITEST_TOKEN="+secretValue,
		"HTTP_PROXY=http://127.0.0.1:9", "HTTPS_PROXY=http://127.0.0.1:9", "ALL_PROXY=http://127.0.0.1:9"), stdout, args...)
	return w
}

func (w *world) preset(self string) string {
	q := strconv.Quote
	clients := fmt.Sprintf(`[{"path": %s}, {"path": %s}, {"path": %s}, {"path": %s}]`, q(w.curl), q(w.python), q(w.node), q(self))
	return fmt.Sprintf(`package airlock.presets.itest

import data.airlock.lib

rules := [
	{"name": "plain", "binaries": [{"path": %[1]s}], "hosts": ["plain.test"], "ports": [%[3]d]},
	{"name": "pinned", "binaries": [{"path": %[4]s, "sha256": %[5]s}], "hosts": ["plain.test"], "ports": [%[3]d]},
	{"name": "api-read", "binaries": %[6]s, "hosts": ["api.test"], "ports": [%[2]d], "methods": "read-only", "paths": ["/v1/**"]},
	{"name": "tunnel", "binaries": %[6]s, "hosts": ["tunnel.test"], "ports": [%[2]d]},
	{"name": "quiet", "binaries": %[6]s, "hosts": ["quiet.test"], "ports": [%[8]d]},
	{"name": "secret", "binaries": [{"path": %[1]s}], "hosts": ["secret.test"], "ports": [%[2]d],
	 "inject": {"authorization": {"env": "ITEST_TOKEN", "format": "Bearer %%s"}}},
	{"name": "upload", "binaries": [{"path": %[1]s}], "hosts": ["upload.test"], "ports": [%[2]d], "methods": ["POST"], "paths": ["/upload"]},
	{"name": "stall", "binaries": %[6]s, "hosts": ["upload.test", "plain.test", "closed.test"], "ports": [%[2]d, %[3]d, 1], "methods": ["POST"], "paths": ["/stall", "/answer"]},
	{"name": "early", "binaries": %[6]s, "hosts": ["upload.test"], "ports": [%[2]d], "methods": ["POST"], "paths": ["/early"]},
	{"name": "nosecret", "binaries": [{"path": %[1]s}], "hosts": ["nosecret.test"], "ports": [%[2]d],
	 "inject": {"authorization": {"file": %[9]s}}},
	{"name": "ws", "binaries": %[6]s, "hosts": ["ws.test"], "ports": [%[2]d], "methods": ["GET"], "paths": ["/echo"], "websocket": true},
	{"name": "plain-upgrade", "binaries": %[6]s, "hosts": ["plain.test"], "ports": [%[3]d], "methods": ["GET"], "paths": ["/upgrade"], "websocket": true},
	{"name": "plain-stream", "binaries": %[6]s, "hosts": ["plain.test"], "ports": [%[3]d], "methods": ["GET"], "paths": ["/stream"]},
	{"name": "git-refs", "binaries": [{"path": %[7]s}], "hosts": ["git.test"], "ports": [%[2]d], "methods": ["GET"],
	 "paths": ["/*/info/refs"], "query": {"service": ["git-upload-pack"]}},
	{"name": "git-fetch", "binaries": [{"path": %[7]s}], "hosts": ["git.test"], "ports": [%[2]d], "methods": ["POST"],
	 "paths": ["/*/git-upload-pack"]},
	{"name": "anywhere", "binaries": [{"path": %[1]s}], "hosts": ["*"], "ports": [80, %[3]d]},
]

denies := [
	{"name": "no-push", "hosts": ["git.test"], "paths": ["/**/git-receive-pack"]},
	{"name": "no-push-discovery", "hosts": ["git.test"], "paths": ["/**/info/refs"], "query": {"service": ["git-receive-pack"]}},
]

decision := lib.decide(rules, denies)
`, q(w.curl), w.tlsPort, w.plainPort, q(w.pinnedCurl), q(fileSHA(t0{}, w.pinnedCurl)), clients, q(w.gitRemote), w.quietPort, q(w.goneSecret()))
}

// goneSecret is the file of the nosecret rule's secret: there when the
// proxy starts, which refuses to start without it, and removed by the test
// that shows a request is refused when its secret has gone missing since.
func (w *world) goneSecret() string { return filepath.Join(w.dir, "gone-secret") }

// t0 lets fileSHA be called where no *testing.T is at hand.
type t0 struct{}

func (t0) Fatal(...any) { panic("fileSHA") }

func fileSHA(t interface{ Fatal(...any) }, p string) string {
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

func realpath(t *testing.T, p string) string {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	raw, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, raw, mode); err != nil {
		t.Fatal(err)
	}
}

// answerEarly answers at once, reading none of the body (net/http's server
// would read some of it first), and keeps the connection a while. Its
// answer is "early", or ?size= bytes of it, the second half sent ?pause=
// after the first; or, with ?switch, a 101 nobody asked for.
func answerEarly(rw http.ResponseWriter, r *http.Request) {
	conn, brw, err := http.NewResponseController(rw).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	q := r.URL.Query()
	if q.Has("switch") {
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
		brw.Flush()
		time.Sleep(5 * time.Second)
		return
	}
	body := "early"
	if n, err := strconv.Atoi(q.Get("size")); err == nil {
		body = strings.Repeat("e", n)
	}
	pause, _ := time.ParseDuration(q.Get("pause"))
	fmt.Fprintf(brw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:len(body)/2])
	brw.Flush()
	time.Sleep(pause)
	brw.WriteString(body[len(body)/2:])
	brw.Flush()
	time.Sleep(5 * time.Second)
}

// readBody reads the whole request body, then says how long it was.
func readBody(rw http.ResponseWriter, r *http.Request) {
	n, _ := io.Copy(io.Discard, r.Body)
	fmt.Fprintf(rw, "received %d bytes", n)
}

// serveTLS runs one HTTPS server for every TLS upstream name, routed by
// Host: api.test, tunnel.test, secret.test, ws.test and git.test.
func (w *world) serveTLS(t *testing.T) int {
	mux := http.NewServeMux()
	mux.HandleFunc("api.test/v1/hello", func(rw http.ResponseWriter, r *http.Request) { io.WriteString(rw, "hello from api.test") })
	mux.HandleFunc("api.test/", func(rw http.ResponseWriter, r *http.Request) { io.WriteString(rw, "api.test other path") })
	mux.HandleFunc("api.test/v1/stream", heldStream("text/event-stream", "data: one\n\n", "data: two\n\n", w.streamGo))
	// Holds the request, as a slow upstream or a quiet stream would, and
	// tells whether the proxy gave it up.
	mux.HandleFunc("api.test/v1/hold", func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("stream") != "" {
			io.WriteString(rw, "data: first\n\n")
			rw.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
			w.abandoned <- "cancelled"
		case <-time.After(20 * time.Second):
			w.abandoned <- "held to the end"
		}
	})
	mux.HandleFunc("api.test/v1/seen/", func(rw http.ResponseWriter, r *http.Request) {
		w.seen.Store(r.URL.Path, true)
		io.WriteString(rw, "seen")
	})
	for path, h := range framing {
		mux.HandleFunc("api.test/v1/framing"+path, h)
	}
	mux.HandleFunc("tunnel.test/", func(rw http.ResponseWriter, r *http.Request) { io.WriteString(rw, "tunnel-ok") })
	check := func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer "+secretValue {
			io.WriteString(rw, "credential injected")
			return
		}
		rw.WriteHeader(http.StatusUnauthorized)
		io.WriteString(rw, "credential missing")
	}
	mux.HandleFunc("upload.test/upload", readBody)
	mux.HandleFunc("upload.test/stall", readBody)
	// Answers at once, reading none of the body, and keeps the connection.
	mux.HandleFunc("upload.test/early", answerEarly)
	mux.HandleFunc("secret.test/", check)
	mux.HandleFunc("nosecret.test/", check)
	mux.Handle("ws.test/echo", websocket.Handler(func(ws *websocket.Conn) {
		for {
			var msg string
			if websocket.Message.Receive(ws, &msg) != nil || websocket.Message.Send(ws, msg) != nil {
				return
			}
		}
	}))
	mux.Handle("git.test/", w.gitBackend(t))
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := w.upstreamCA.ServerConfig("api.test", "tunnel.test", "secret.test", "nosecret.test", "ws.test", "git.test", "upload.test")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h2c.NewHandler(hostRouter(mux), &http2.Server{}), TLSConfig: tlsConfig}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// framing are upstream answers whose framing a proxy must pass on as it
// is: a known length, a body cut short of its length or of its last chunk,
// a body of unknown length, and hop-by-hop headers of the upstream's own
// connection.
var framing = map[string]http.HandlerFunc{
	"/big": func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Length", strconv.Itoa(len(bigBody)))
		rw.Write(bigBody)
	},
	"/trunc":         rawAnswer("HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + string(bigBody[:50000])),
	"/trunc-chunked": rawAnswer("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000\r\n" + string(bigBody[:4096]) + "\r\n10\r\nabc"),
	"/flushed": func(rw http.ResponseWriter, r *http.Request) {
		io.WriteString(rw, "streamed body")
		rw.(http.Flusher).Flush()
		io.WriteString(rw, " more")
	},
	"/connclose": func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Connection", "close")
		io.WriteString(rw, "bye")
	},
	// A body without end, for a client that stops reading it.
	"/endless": func(rw http.ResponseWriter, r *http.Request) {
		for {
			if _, err := rw.Write(bigBody); err != nil {
				return
			}
		}
	},
	"/hop": func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Connection", "keep-alive, X-Hop")
		rw.Header().Set("Keep-Alive", "timeout=5, max=1")
		rw.Header().Set("X-Hop", "the upstream's connection only")
		io.WriteString(rw, "ok")
	},
}

var bigBody = bytes.Repeat([]byte("0123456789"), 10000)

// rawAnswer writes raw as the whole answer, then closes the connection.
func rawAnswer(raw string) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(rw).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString(raw)
		brw.Flush()
	}
}

// heldStream sends first, then holds second until release is closed (the
// test closes it once it has read first): a proxy that kept first in a
// buffer would hang the client waiting for it.
func heldStream(contentType, first, second string, release <-chan struct{}) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", contentType)
		io.WriteString(rw, first)
		rw.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		io.WriteString(rw, second)
	}
}

// hostRouter strips the port from Host so the mux can route by name.
func hostRouter(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if h, _, err := net.SplitHostPort(r.Host); err == nil {
			r.Host = h
		}
		mux.ServeHTTP(rw, r)
	})
}

func (w *world) servePlain(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h2c.NewHandler(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/upgrade" && r.Header.Get("Upgrade") == "websocket" {
			// A WebSocket switch that then echoes raw bytes (frames, to
			// the proxy, which must relay them untouched after the 101).
			rw.Header().Set("Upgrade", "websocket")
			rw.Header().Set("Connection", "Upgrade")
			rw.WriteHeader(http.StatusSwitchingProtocols)
			conn, brw, err := http.NewResponseController(rw).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			io.Copy(conn, brw)
			return
		}
		if r.URL.Path == "/stall" {
			readBody(rw, r)
			return
		}
		if r.URL.Path == "/answer" {
			answerEarly(rw, r)
			return
		}
		if r.URL.Path == "/stream" { // newline-delimited JSON of unknown length
			heldStream("application/x-ndjson", "{\"n\":1}\n", "{\"n\":2}\n", w.plainGo)(rw, r)
			return
		}
		if h, ok := framing[r.URL.Path]; ok {
			h(rw, r)
			return
		}
		fmt.Fprintf(rw, "plain %s %s", r.Method, r.URL.Path)
	}), &http2.Server{})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// gitBackend serves a bare repository with `git http-backend` (smart HTTP).
func (w *world) gitBackend(t *testing.T) http.Handler {
	root := filepath.Join(w.dir, "git")
	work := filepath.Join(w.dir, "work")
	run := func(dir string, args ...string) {
		cmd := exec.Command(w.git, args...)
		cmd.Dir = dir
		cmd.Env = cleanEnv("HOME="+w.dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	os.MkdirAll(root, 0o755)
	os.MkdirAll(work, 0o755)
	run(root, "init", "-q", "--bare", "repo.git")
	run(filepath.Join(root, "repo.git"), "config", "http.receivepack", "true")
	run(work, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(work, "README"), []byte("cloned through airlock\n"), 0o644)
	run(work, "add", "README")
	run(work, "commit", "-q", "-m", "first")
	run(work, "push", "-q", filepath.Join(root, "repo.git"), "main")
	run(filepath.Join(root, "repo.git"), "symbolic-ref", "HEAD", "refs/heads/main")
	return &cgi.Handler{
		Path: w.git,
		Args: []string{"http-backend"},
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}
}

// gitThrough returns a runner of git through the proxy, trusting its CA,
// with a HOME and config of its own; it returns git's combined output.
func (w *world) gitThrough(t *testing.T) func(dir string, args ...string) ([]byte, error) {
	env := cleanEnv("HOME="+t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0")
	return func(dir string, args ...string) ([]byte, error) {
		cmd := exec.Command(w.git, append([]string{"-c", "http.proxy=" + w.proxy.url, "-c", "http.sslCAInfo=" + w.proxy.caFile}, args...)...)
		cmd.Dir, cmd.Env = dir, env
		return cmd.CombinedOutput()
	}
}

// goClient is a Go net/http client that goes through the proxy and trusts
// its CA.
func (w *world) goClient(t *testing.T) *http.Client {
	pu, _ := url.Parse(w.proxy.url)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy:           http.ProxyURL(pu),
		TLSClientConfig: &tls.Config{RootCAs: poolOf(t, w.proxy.caFile)},
	}}
}

// doTraced sends one request with c and reads its answer whole; reused
// says whether it went over a connection the client already had open.
func doTraced(t *testing.T, c *http.Client, method, url string, body io.Reader) (resp *http.Response, b []byte, reused bool) {
	t.Helper()
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), method, url, body)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b, reused
}

// curlCmd runs curl through the proxy and returns status, body and stderr.
func (w *world) curlCmd(t *testing.T, bin string, args ...string) (status int, body string) {
	t.Helper()
	args = append([]string{"-sS", "-o", "-", "-w", "\n%{http_code}", "-x", w.proxy.url, "--cacert", w.proxy.caFile}, args...)
	cmd := exec.Command(bin, args...)
	cmd.Env = cleanEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, _ := cmd.Output()
	s := string(out)
	i := strings.LastIndexByte(s, '\n')
	if i < 0 {
		t.Fatalf("curl %v: no status (stderr %s)", args, stderr.String())
	}
	status, _ = strconv.Atoi(s[i+1:])
	return status, s[:i]
}

func TestProxy(t *testing.T) {
	w := newWorld(t)
	api := fmt.Sprintf("https://api.test:%d", w.tlsPort)
	plain := fmt.Sprintf("http://plain.test:%d", w.plainPort)

	t.Run("curl plain HTTP allowed", func(t *testing.T) {
		status, body := w.curlCmd(t, w.curl, plain+"/x")
		if status != 200 || body != "plain GET /x" {
			t.Fatalf("GET %s = %d %q", plain, status, body)
		}
		// The decision on record before the request went out, its outcome
		// on a close line with the same id when it ended.
		a := w.proxy.audit(t, func(a auditLine) bool { return a.Host == "plain.test" && a.Path == "/x" })
		if a.Decision != "allow" || a.Binary != w.curl || a.Rule != "plain" || a.Status != 0 || a.ID == "" {
			t.Fatalf("audit = %+v", a)
		}
		c := w.proxy.closed(t, func(c auditLine) bool { return c.ID == a.ID })
		if c.Decision != "allow" || c.Binary != w.curl || c.Path != "/x" || c.Status != 200 || c.Down == 0 {
			t.Fatalf("close line = %+v", c)
		}
	})

	t.Run("curl inspected GET allowed, POST and other paths denied", func(t *testing.T) {
		if status, body := w.curlCmd(t, w.curl, api+"/v1/hello"); status != 200 || body != "hello from api.test" {
			t.Fatalf("GET /v1/hello = %d %q", status, body)
		}
		status, body := w.curlCmd(t, w.curl, "-X", "POST", "-d", "x=1", api+"/v1/hello")
		if d := parseDenial(t, body); status != 403 || d.Reason != "method_not_allowed" || d.Rule != "api-read" || d.Method != "POST" || d.Binary != w.curl {
			t.Fatalf("POST = %d %+v", status, d)
		}
		status, body = w.curlCmd(t, w.curl, api+"/v2/admin")
		if d := parseDenial(t, body); status != 403 || d.Reason != "path_not_allowed" || d.Path != "/v2/admin" {
			t.Fatalf("GET /v2/admin = %d %+v", status, d)
		}
		// A denied request whose body is too large to skip closes the
		// connection: its unread rest must not be read as requests.
		raw := connectThrough(t, w.proxy.addr, fmt.Sprintf("api.test:%d", w.tlsPort))
		defer raw.Close()
		tc := tls.Client(raw, &tls.Config{ServerName: "api.test", RootCAs: poolOf(t, w.proxy.caFile)})
		const size = 2 << 20
		go func() {
			fmt.Fprintf(tc, "POST /v1/hello HTTP/1.1\r\nHost: api.test\r\nContent-Length: %d\r\n\r\n", size)
			tc.Write(bytes.Repeat([]byte("GET /v1/hello HTTP/1.1\r\nHost: api.test\r\n\r\n"), size/43))
		}()
		br := bufio.NewReader(tc)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 403 || !resp.Close {
			t.Fatalf("POST with a 2 MiB body = %v %v; want 403 and Connection: close", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		if next, err := http.ReadResponse(br, nil); err == nil {
			t.Fatalf("the rest of a refused body was served as a request: %s", next.Status)
		}

		// An upstream that answers before reading the whole body leaves
		// the rest to the transport, which may still be reading it from
		// the tunnel: the connection ends with that request, or its next
		// one would be read from the same bytes at the same time.
		early := connectThrough(t, w.proxy.addr, fmt.Sprintf("upload.test:%d", w.tlsPort))
		defer early.Close()
		etc := tls.Client(early, &tls.Config{ServerName: "upload.test", RootCAs: poolOf(t, w.proxy.caFile)})
		io.WriteString(etc, "POST /early HTTP/1.1\r\nHost: upload.test\r\nContent-Length: 44\r\n\r\n0123456789")
		resp, err = http.ReadResponse(bufio.NewReader(etc), nil)
		if err != nil || resp.StatusCode != 200 || !resp.Close {
			t.Fatalf("early answer = %v %v; want 200 and Connection: close", resp, err)
		}

		// A dot-segment however spelled, a ;parameter or an escaped escape
		// is refused: the policy would decide on one path while the
		// upstream reads the path as sent its own way (/v2/..%2Fv1/hello
		// is /v1/hello to the policy, and something else to many servers).
		for _, path := range []string{"/v1/../v2/admin", "/v2/..%2Fv1/hello", "/v2/%2e%2e/v1/hello", "/v2/..;/v1/hello", "/v1;x/hello", "/v1/%252e%252e/v2"} {
			status, body = w.curlCmd(t, w.curl, "--path-as-is", api+path)
			if d := parseDenial(t, body); status != 403 || d.Reason != "invalid_request" || !strings.Contains(d.Hint, "path has") {
				t.Fatalf("GET %s = %d %+v", path, status, d)
			}
		}
	})

	t.Run("opaque tunnel relays TLS end to end", func(t *testing.T) {
		status, body := w.curlCmd(t, w.curl, "--cacert", w.upstreamCA.File, fmt.Sprintf("https://tunnel.test:%d/", w.tlsPort))
		if status != 200 || body != "tunnel-ok" {
			t.Fatalf("tunnel = %d %q", status, body)
		}
		a := w.proxy.closed(t, func(a auditLine) bool { return a.Host == "tunnel.test" && a.Phase == "connect" })
		if a.Inspect || a.Up == 0 || a.Down == 0 {
			t.Fatalf("tunnel audit = %+v; want uninspected with bytes both ways", a)
		}
	})

	t.Run("another binary is denied", func(t *testing.T) {
		other := filepath.Join(t.TempDir(), "curl")
		copyFile(t, w.curl, other, 0o755)
		status, body := w.curlCmd(t, other, plain+"/")
		if d := parseDenial(t, body); status != 403 || d.Reason != "binary_not_allowed" || d.Binary != other || !strings.Contains(d.Hint, other) {
			t.Fatalf("copied curl = %d %+v", status, d)
		}
	})

	t.Run("pinned hash: allowed until the file changes", func(t *testing.T) {
		if status, _ := w.curlCmd(t, w.pinnedCurl, plain+"/"); status != 200 {
			t.Fatalf("pinned curl = %d", status)
		}
		f, _ := os.OpenFile(w.pinnedCurl, os.O_WRONLY|os.O_APPEND, 0)
		f.Write([]byte("tampered"))
		f.Close()
		status, body := w.curlCmd(t, w.pinnedCurl, plain+"/")
		if d := parseDenial(t, body); status != 403 || d.Reason != "hash_mismatch" || d.Rule != "pinned" {
			t.Fatalf("tampered pinned curl = %d %+v", status, d)
		}
	})

	t.Run("Host header mismatch in a tunnel is 421", func(t *testing.T) {
		status, body := w.curlCmd(t, w.curl, "-H", fmt.Sprintf("Host: tunnel.test:%d", w.tlsPort), api+"/v1/hello")
		if d := parseDenial(t, body); status != 421 || d.Reason != "host_mismatch" {
			t.Fatalf("Host mismatch = %d %+v", status, d)
		}
	})

	t.Run("SNI mismatch in a tunnel is 421", func(t *testing.T) {
		conn := connectThrough(t, w.proxy.addr, fmt.Sprintf("api.test:%d", w.tlsPort))
		roots := poolOf(t, w.proxy.caFile)
		tc := tls.Client(conn, &tls.Config{
			ServerName: "tunnel.test",
			// The leaf is for the CONNECT host, so verify against that name.
			InsecureSkipVerify: true,
			VerifyConnection: func(cs tls.ConnectionState) error {
				_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: "api.test", Roots: roots})
				return err
			},
		})
		defer tc.Close()
		fmt.Fprintf(tc, "GET /v1/hello HTTP/1.1\r\nHost: api.test:%d\r\n\r\n", w.tlsPort)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if d := parseDenial(t, string(body)); resp.StatusCode != 421 || d.Reason != "host_mismatch" || !strings.Contains(d.Hint, "tunnel.test") {
			t.Fatalf("SNI mismatch = %d %+v", resp.StatusCode, d)
		}
	})

	t.Run("SSRF guard", func(t *testing.T) {
		for _, tc := range []struct{ url, host string }{
			{"http://169.254.169.254/latest/meta-data/", "169.254.169.254"},
			{fmt.Sprintf("http://127.0.0.1:%d/", w.plainPort), "127.0.0.1"},
			{fmt.Sprintf("http://2130706433:%d/", w.plainPort), "127.0.0.1"},
			{fmt.Sprintf("http://0x7f.1:%d/", w.plainPort), "127.0.0.1"},
			{fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/", w.plainPort), "127.0.0.1"},
			{fmt.Sprintf("http://internal.test:%d/", w.plainPort), "internal.test"},
		} {
			status, body := w.curlCmd(t, w.curl, "--globoff", tc.url)
			d := parseDenial(t, body)
			if status != 403 || d.Reason != "ssrf_blocked" || d.Host != tc.host || d.Rule != "anywhere" {
				t.Errorf("%s = %d %+v; want ssrf_blocked for %s", tc.url, status, d, tc.host)
			}
		}
		// CONNECT to a name that resolves privately is refused before dialing.
		status, _ := w.curlCmd(t, w.curl, fmt.Sprintf("https://internal.test:%d/", w.plainPort))
		a := w.proxy.audit(t, func(a auditLine) bool { return a.Host == "internal.test" && a.Phase == "connect" })
		if status == 200 || a.Reason != "ssrf_blocked" || !strings.Contains(a.Detail, "10.0.0.1") {
			t.Fatalf("CONNECT internal.test = %d, audit %+v", status, a)
		}
	})

	t.Run("credential injected upstream, never shown", func(t *testing.T) {
		status, body := w.curlCmd(t, w.curl, "-v", fmt.Sprintf("https://secret.test:%d/check", w.tlsPort))
		if status != 200 || body != "credential injected" || strings.Contains(body, secretValue) {
			t.Fatalf("secret.test = %d %q", status, body)
		}
		w.proxy.audit(t, func(a auditLine) bool { return a.Host == "secret.test" && a.Phase == "request" })
		raw, _ := os.ReadFile(w.proxy.auditLog)
		if bytes.Contains(raw, []byte(secretValue)) {
			t.Fatal("the injected secret appears in the audit log")
		}
		// A secret gone missing after the start is refused per request.
		os.Remove(w.goneSecret())
		status, body = w.curlCmd(t, w.curl, fmt.Sprintf("https://nosecret.test:%d/check", w.tlsPort))
		if d := parseDenial(t, body); status != 403 || d.Reason != "secret_unavailable" || !strings.Contains(d.Hint, w.goneSecret()) {
			t.Fatalf("missing secret = %d %+v", status, d)
		}
		// The rule names host and port, not scheme: the same request as
		// plain http:// would carry the credential in clear. Refused.
		status, body = w.curlCmd(t, w.curl, fmt.Sprintf("http://secret.test:%d/check", w.tlsPort))
		if d := parseDenial(t, body); status != 403 || d.Reason != "secret_unavailable" || !strings.Contains(d.Hint, "TLS") {
			t.Fatalf("credential over plain http = %d %q", status, body)
		}
	})

	t.Run("h2c upgrade not relayed: requests stay decided one by one", func(t *testing.T) {
		// Both upstreams honour h2c. Relayed, the upgrade would open HTTP/2
		// streams no policy decides; the proxy strips it, so the request
		// is answered as the HTTP/1.1 GET the policy allowed.
		h2c := "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n"
		conn, err := net.Dial("tcp", w.proxy.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		target := fmt.Sprintf("plain.test:%d", w.plainPort)
		fmt.Fprintf(conn, "GET http://%s/upgrade HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, target, h2c)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(b) != "plain GET /upgrade" {
			t.Fatalf("plain h2c upgrade: %s %q; want the HTTP/1.1 answer", resp.Status, b)
		}

		raw := connectThrough(t, w.proxy.addr, fmt.Sprintf("api.test:%d", w.tlsPort))
		defer raw.Close()
		tc := tls.Client(raw, &tls.Config{ServerName: "api.test", RootCAs: poolOf(t, w.proxy.caFile)})
		fmt.Fprintf(tc, "GET /v1/hello HTTP/1.1\r\nHost: api.test\r\n%s\r\n", h2c)
		resp, err = http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(b) != "hello from api.test" {
			t.Fatalf("inspected h2c upgrade: %s %q; want the HTTP/1.1 answer", resp.Status, b)
		}
	})

	t.Run("websocket upgrade decided, frames relayed", func(t *testing.T) {
		conn := connectThrough(t, w.proxy.addr, fmt.Sprintf("ws.test:%d", w.tlsPort))
		tc := tls.Client(conn, &tls.Config{ServerName: "ws.test", RootCAs: poolOf(t, w.proxy.caFile)})
		cfg, _ := websocket.NewConfig(fmt.Sprintf("wss://ws.test:%d/echo", w.tlsPort), fmt.Sprintf("https://ws.test:%d", w.tlsPort))
		ws, err := websocket.NewClient(cfg, tc)
		if err != nil {
			t.Fatalf("websocket handshake through the proxy: %v", err)
		}
		defer ws.Close()
		for _, msg := range []string{"frame one", strings.Repeat("x", 70000), "frame three"} {
			if err := websocket.Message.Send(ws, msg); err != nil {
				t.Fatal(err)
			}
			var got string
			if err := websocket.Message.Receive(ws, &got); err != nil || got != msg {
				t.Fatalf("echo of %d bytes = %d bytes, %v", len(msg), len(got), err)
			}
		}
		ws.Close()
		a := w.proxy.closed(t, func(a auditLine) bool { return a.Host == "ws.test" && a.Status == 101 })
		if a.Rule != "ws" || a.Up < 70000 || a.Down < 70000 {
			t.Fatalf("websocket audit = %+v", a)
		}
		// A rule that allows GET without "websocket": true (api-read) does
		// not allow the upgrade: what follows it goes both ways unseen.
		raw := connectThrough(t, w.proxy.addr, fmt.Sprintf("api.test:%d", w.tlsPort))
		defer raw.Close()
		tc = tls.Client(raw, &tls.Config{ServerName: "api.test", RootCAs: poolOf(t, w.proxy.caFile)})
		io.WriteString(tc, "GET /v1/hello HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		d := parseDenial(t, string(body))
		if resp.StatusCode != 403 || d.Reason != "websocket_not_allowed" || d.Rule != "api-read" || !strings.Contains(d.Hint, `"websocket": true`) {
			t.Fatalf("websocket on a read-only rule = %s %+v", resp.Status, d)
		}
	})

	t.Run("plain-HTTP upgrade decided, bytes relayed both ways", func(t *testing.T) {
		conn, err := net.Dial("tcp", w.proxy.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		target := fmt.Sprintf("plain.test:%d", w.plainPort)
		fmt.Fprintf(conn, "GET http://%s/upgrade HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", target, target)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 101 {
			t.Fatalf("upgrade through the proxy: %v %v", resp, err)
		}
		msg := strings.Repeat("frame", 20000)
		go io.WriteString(conn, msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Fatalf("echo through the upgraded connection: %v", err)
		}
		conn.Close()
		a := w.proxy.closed(t, func(a auditLine) bool { return a.Path == "/upgrade" && a.Status == 101 })
		if a.Rule != "plain-upgrade" || a.Up < int64(len(msg)) || a.Down < int64(len(msg)) {
			t.Fatalf("upgrade audit = %+v", a)
		}
		// The same upgrade on a path the rule does not allow is denied.
		c2, _ := net.Dial("tcp", w.proxy.addr)
		defer c2.Close()
		fmt.Fprintf(c2, "GET http://%s/other HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", target, target)
		resp, err = http.ReadResponse(bufio.NewReader(c2), nil)
		if err != nil || resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Reason") != "path_not_allowed" {
			t.Fatalf("denied upgrade: %v %v", resp, err)
		}
	})

	t.Run("git clone through the MITM; push denied", func(t *testing.T) {
		git := w.gitThrough(t)
		dest := filepath.Join(t.TempDir(), "clone")
		repo := fmt.Sprintf("https://git.test:%d/repo.git", w.tlsPort)
		if out, err := git(w.dir, "clone", "-q", repo, dest); err != nil {
			t.Fatalf("git clone: %v\n%s", err, out)
		}
		if raw, _ := os.ReadFile(filepath.Join(dest, "README")); string(raw) != "cloned through airlock\n" {
			t.Fatalf("cloned README = %q", raw)
		}
		os.WriteFile(filepath.Join(dest, "NEW"), []byte("x"), 0o644)
		git(dest, "add", "NEW")
		git(dest, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
		if out, err := git(dest, "push", "-q", "origin", "main"); err == nil {
			t.Fatalf("git push succeeded through a policy that denies it:\n%s", out)
		}
		a := w.proxy.audit(t, func(a auditLine) bool { return a.Host == "git.test" && a.Decision == "deny" })
		if a.Reason != "denied_by_rule" || a.Binary != w.gitRemote {
			t.Fatalf("push audit = %+v", a)
		}
	})

	t.Run("python3 urllib", func(t *testing.T) {
		script := `import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1] + "/v1/hello").read().decode())
except Exception as e:
    print("error", e)
try:
    urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v1/hello", data=b"x", method="POST"))
except urllib.error.HTTPError as e:
    print(e.code, e.headers["X-Airlock-Reason"])
`
		cmd := exec.Command(w.python, "-c", script, api)
		cmd.Env = cleanEnv("HTTPS_PROXY="+w.proxy.url, "SSL_CERT_FILE="+w.proxy.caFile)
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != "hello from api.test\n403 method_not_allowed\n" {
			t.Fatalf("python3: %v\n%s", err, out)
		}
	})

	t.Run("node https through CONNECT", func(t *testing.T) {
		script := `
const http = require('http'), tls = require('tls'), fs = require('fs');
// node -e puts the arguments after "--" at argv[1...].
const [proxyHost, proxyPort] = process.argv[1].split(':');
const target = process.argv[2];
http.request({host: proxyHost, port: proxyPort, method: 'CONNECT', path: target}).on('connect', (res, socket) => {
  if (res.statusCode !== 200) { console.log('connect', res.statusCode); process.exit(1); }
  const s = tls.connect({socket, servername: 'api.test', ca: fs.readFileSync(process.argv[3])}, () => {
    s.write('GET /v1/hello HTTP/1.1\r\nHost: ' + target + '\r\nConnection: close\r\n\r\n');
  });
  let data = '';
  s.on('data', d => data += d);
  s.on('end', () => console.log(data.split('\r\n\r\n')[1]));
}).end();
`
		cmd := exec.Command(w.node, "-e", script, "--", w.proxy.addr, fmt.Sprintf("api.test:%d", w.tlsPort), w.proxy.caFile)
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "hello from api.test") {
			t.Fatalf("node: %v\n%s", err, out)
		}
	})

	// Every request after the first rides the same inspected tunnel: a
	// client whose keep-alive connection the proxy closes after each
	// answer pays a new CONNECT and TLS handshake per request.
	t.Run("Go net/http client, requests kept alive in one inspected tunnel", func(t *testing.T) {
		c := w.goClient(t)
		send := func(method string, body io.Reader, wantReused bool) (int, string, string) {
			t.Helper()
			resp, b, reused := doTraced(t, c, method, api+"/v1/hello", body)
			if resp.Close {
				t.Errorf("%s answered with Connection: close", method)
			}
			if wantReused && !reused {
				t.Errorf("%s went over a new connection", method)
			}
			return resp.StatusCode, resp.Header.Get("X-Airlock-Reason"), string(b)
		}
		if code, _, body := send(http.MethodGet, nil, false); code != 200 || body != "hello from api.test" {
			t.Fatalf("Go GET = %d %q", code, body)
		}
		if code, _, body := send(http.MethodGet, nil, true); code != 200 || body != "hello from api.test" {
			t.Fatalf("second Go GET = %d %q", code, body)
		}
		if code, reason, _ := send(http.MethodPost, strings.NewReader("x"), true); code != 403 || reason != "method_not_allowed" {
			t.Fatalf("Go POST = %d %s", code, reason)
		}
	})

	t.Run("plain responses keep their length, and a body cut short stays an error", func(t *testing.T) {
		plain := fmt.Sprintf("http://plain.test:%d", w.plainPort)
		head := exec.Command(w.curl, "-sS", "-I", "-x", w.proxy.url, plain+"/big")
		head.Env = cleanEnv()
		if out, err := head.Output(); err != nil || !strings.Contains(strings.ToLower(string(out)), "content-length: 100000") {
			t.Fatalf("HEAD /big through the proxy: %v\n%s", err, out)
		}
		for _, path := range []string{"/trunc", "/trunc-chunked"} {
			get := exec.Command(w.curl, "-sS", "-o", os.DevNull, "-x", w.proxy.url, plain+path)
			get.Env = cleanEnv()
			if err := get.Run(); err == nil {
				t.Errorf("GET %s through the proxy: curl exit 0 for a body the upstream cut short", path)
			}
		}
		w.proxy.closed(t, func(a auditLine) bool {
			return a.Path == "/trunc-chunked" && strings.Contains(a.Detail, "ended early")
		})
	})

	// The client's connection is the proxy's: what the upstream says of
	// its own (Connection: close, keep-alive limits) stays there, and a
	// body of unknown length is chunked instead of ended by a close.
	t.Run("inspected responses are framed for the client's connection", func(t *testing.T) {
		c := w.goClient(t)
		for i, step := range []struct{ method, path, body string }{
			{"GET", "/connclose", "bye"},
			{"GET", "/hop", "ok"},
			{"HEAD", "/flushed", ""},
			{"GET", "/flushed", "streamed body more"},
			{"GET", "/big", string(bigBody)},
		} {
			resp, body, reused := doTraced(t, c, step.method, api+"/v1/framing"+step.path, nil)
			switch {
			case resp.StatusCode != 200 || string(body) != step.body:
				t.Errorf("%s %s = %d, %d bytes", step.method, step.path, resp.StatusCode, len(body))
			case resp.Close:
				t.Errorf("%s %s answered with Connection: close", step.method, step.path)
			case i > 0 && !reused:
				t.Errorf("%s %s went over a new tunnel", step.method, step.path)
			case resp.Header.Get("X-Hop") != "" || resp.Header.Get("Keep-Alive") != "":
				t.Errorf("%s %s passed on the upstream's hop-by-hop headers: %v", step.method, step.path, resp.Header)
			}
		}
	})

	t.Run("HTTP 1.0 clients in an inspected tunnel", func(t *testing.T) {
		if code, body := w.curlCmd(t, w.curl, "-0", api+"/v1/hello"); code != 200 || body != "hello from api.test" {
			t.Fatalf("curl -0 (ALPN http/1.0) = %d %q", code, body)
		}
		get10 := func(path string) (string, error) {
			conn := connectThrough(t, w.proxy.addr, fmt.Sprintf("api.test:%d", w.tlsPort))
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			tc := tls.Client(conn, &tls.Config{ServerName: "api.test", RootCAs: poolOf(t, w.proxy.caFile)})
			io.WriteString(tc, "GET "+path+" HTTP/1.0\r\nHost: api.test\r\n\r\n")
			raw, err := io.ReadAll(tc)
			return string(raw), err
		}
		got, err := get10("/v1/framing/flushed")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(strings.ToLower(got), "chunked") || !strings.HasSuffix(got, "\r\n\r\nstreamed body more") {
			t.Fatalf("answer to an HTTP/1.0 request (chunks are HTTP/1.1 only):\n%s", got)
		}
		// Its body ends with the connection: one the upstream cut short
		// must not end in an orderly close, which would make it whole.
		if got, err := get10("/v1/framing/trunc-chunked"); err == nil {
			t.Fatalf("a body the upstream cut short reached an HTTP/1.0 client as whole:\n%.200s", got)
		}
	})

	// A client still sending a body the proxy refused, or the upstream
	// answered without reading, must get the answer: a close with its
	// bytes unread would be a reset that destroys the answer first.
	t.Run("a refused upload is answered, not reset", func(t *testing.T) {
		payload := filepath.Join(t.TempDir(), "payload")
		os.WriteFile(payload, bytes.Repeat([]byte("x"), 20<<20), 0o644)
		for _, c := range []struct {
			url  string
			want int
		}{
			{api + "/v1/hello", 403}, // POST is not allowed there
			{fmt.Sprintf("https://upload.test:%d/early", w.tlsPort), 200},
		} {
			for i := 0; i < 5; i++ {
				if code, _ := w.curlCmd(t, w.curl, "--max-time", "20", "-H", "Expect:", "--data-binary", "@"+payload, c.url); code != c.want {
					t.Fatalf("20 MB POST to %s, try %d: status %d, want %d", c.url, i+1, code, c.want)
				}
			}
		}
	})

	// curl asks for "100 Continue" before it sends a large body, and waits
	// --expect100-timeout for it; --max-time fails the upload if the proxy
	// holds the body back waiting for a client that is waiting for it.
	t.Run("uploads with Expect: 100-continue go through, and denials come back", func(t *testing.T) {
		payload := filepath.Join(t.TempDir(), "payload")
		os.WriteFile(payload, bytes.Repeat([]byte("x"), 2<<20), 0o644)
		upload := func(path string) (int, string) {
			return w.curlCmd(t, w.curl, "--max-time", "10", "--expect100-timeout", "30", "-H", "Expect: 100-continue",
				"--data-binary", "@"+payload, fmt.Sprintf("https://upload.test:%d%s", w.tlsPort, path))
		}
		if status, body := upload("/upload"); status != 200 || body != "received 2097152 bytes" {
			t.Fatalf("upload = %d %q", status, body)
		}
		status, body := upload("/elsewhere")
		if d := parseDenial(t, body); status != 403 || d.Reason != "path_not_allowed" {
			t.Fatalf("denied upload = %d %+v", status, d)
		}
	})

	// As http.Server caps headers with MaxHeaderBytes, so does the loop
	// that reads requests inside an inspected tunnel.
	t.Run("oversized request header inside an inspected tunnel is refused", func(t *testing.T) {
		conn := connectThrough(t, w.proxy.addr, fmt.Sprintf("api.test:%d", w.tlsPort))
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Client(conn, &tls.Config{ServerName: "api.test", RootCAs: poolOf(t, w.proxy.caFile)})
		var req strings.Builder
		fmt.Fprintf(&req, "GET /v1/hello HTTP/1.1\r\nHost: api.test:%d\r\n", w.tlsPort)
		for i := 0; i < 2000; i++ { // 2000 headers of 100 bytes: past the 64 KiB default
			fmt.Fprintf(&req, "X-Filler-%04d: %s\r\n", i, strings.Repeat("f", 84))
		}
		req.WriteString("\r\n")
		go io.WriteString(tc, req.String()) // the proxy may answer before it has read it all
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if d := parseDenial(t, string(body)); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || d.Reason != "invalid_request" || !resp.Close {
			t.Fatalf("oversized header = %d close=%v %+v", resp.StatusCode, resp.Close, d)
		}
	})

	t.Run("streamed responses arrive as they are sent", func(t *testing.T) {
		for _, c := range []struct {
			name, url, first, rest string
			release                chan struct{}
		}{
			{"server-sent events through the MITM", api + "/v1/stream", "data: one\n", "\ndata: two\n\n", w.streamGo},
			{"NDJSON over plain HTTP", plain + "/stream", "{\"n\":1}\n", "{\"n\":2}\n", w.plainGo},
		} {
			resp, err := w.goClient(t).Get(c.url)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			br := bufio.NewReader(resp.Body)
			first, err := br.ReadString('\n')
			if err != nil || first != c.first {
				t.Fatalf("%s: first part = %q, %v; want it before the upstream sends the rest", c.name, first, err)
			}
			close(c.release)
			rest, _ := io.ReadAll(br)
			resp.Body.Close()
			if string(rest) != c.rest {
				t.Fatalf("%s: rest = %q", c.name, rest)
			}
		}
	})

	// A client that gives up on a slow answer or a quiet stream frees the
	// upstream connection at once: the proxy does not hold it until the
	// upstream next writes.
	t.Run("a client that goes away cancels its inspected request upstream", func(t *testing.T) {
		for _, c := range []struct{ name, query string }{{"waiting for the header", ""}, {"in a quiet stream", "?stream=1"}} {
			conn := connectThrough(t, w.proxy.addr, fmt.Sprintf("api.test:%d", w.tlsPort))
			tc := tls.Client(conn, &tls.Config{ServerName: "api.test", RootCAs: poolOf(t, w.proxy.caFile)})
			fmt.Fprintf(tc, "GET /v1/hold%s HTTP/1.1\r\nHost: api.test\r\n\r\n", c.query)
			if c.query != "" {
				br := bufio.NewReader(tc)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "data: first\n" {
					t.Fatalf("%s: first event = %q, %v", c.name, line, err)
				}
			} else {
				time.Sleep(200 * time.Millisecond) // the request is upstream
			}
			tc.Close()
			select {
			case got := <-w.abandoned:
				if got != "cancelled" {
					t.Fatalf("%s: upstream request %s", c.name, got)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: upstream request still held 10s after the client left", c.name)
			}
		}
		w.proxy.closed(t, func(a auditLine) bool {
			return a.Path == "/v1/hold" && a.Reason == "upstream_error" && strings.Contains(a.Detail, "client closed")
		})
		w.proxy.closed(t, func(a auditLine) bool {
			return a.Path == "/v1/hold" && a.Status == 200 && strings.Contains(a.Detail, "client closed")
		})
	})

	// A client may send its first bytes (the TLS ClientHello) in the same
	// write as the CONNECT, before the 200: they belong to the tunnel.
	t.Run("bytes sent with the CONNECT are relayed", func(t *testing.T) {
		for _, c := range []struct {
			host  string
			roots *x509.CertPool
			path  string
			want  string
		}{
			{"tunnel.test", w.upstreamCA.Pool, "/", "tunnel-ok"},
			{"api.test", poolOf(t, w.proxy.caFile), "/v1/hello", "hello from api.test"},
		} {
			raw, err := net.Dial("tcp", w.proxy.addr)
			if err != nil {
				t.Fatal(err)
			}
			raw.SetDeadline(time.Now().Add(10 * time.Second))
			target := fmt.Sprintf("%s:%d", c.host, w.tlsPort)
			pc := &pipelinedConnect{Conn: raw, head: "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n"}
			tc := tls.Client(pc, &tls.Config{ServerName: c.host, RootCAs: c.roots, NextProtos: []string{"http/1.1"}})
			fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", c.path, c.host)
			resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
			if err != nil {
				t.Fatalf("%s: request sent with the CONNECT: %v", c.host, err)
			}
			body, _ := io.ReadAll(resp.Body)
			raw.Close()
			if resp.StatusCode != 200 || string(body) != c.want {
				t.Fatalf("%s: %d %q; want 200 %q", c.host, resp.StatusCode, body, c.want)
			}
		}
	})

	t.Run("metrics", func(t *testing.T) {
		// A denial and an allowed request's bytes, for the series below;
		// each is counted just after its audit line is written.
		w.curlCmd(t, w.curl, "-X", "POST", "-d", "x=1", api+"/v1/hello")
		w.curlCmd(t, w.curl, plain+"/x")
		// A burst of requests, for the collector's setting under load
		// below: collections come fast enough for the heap floor.
		c := w.goClient(t)
		for range 3000 {
			doTraced(t, c, http.MethodGet, api+"/v1/hello", nil)
		}
		c.CloseIdleConnections()
		scrape := func() []byte {
			resp, err := http.Get("http://" + w.proxy.metrics + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			return raw
		}
		gogc := func(raw []byte) int {
			_, v, _ := bytes.Cut(raw, []byte("\ngo_gc_gogc_percent "))
			v, _, _ = bytes.Cut(v, []byte("\n"))
			pct, _ := strconv.Atoi(string(v))
			return pct
		}
		// Under load the proxy collects at a heap floor (gcfloor), not at
		// Go's default of twice a live heap of a few MiB; read at once,
		// before the floor's rest check (a second on) can see the load
		// gone.
		if pct := gogc(scrape()); pct <= 100 {
			t.Errorf("go_gc_gogc_percent just after a burst: %d, want above 100", pct)
		}
		var lacks []string
		defer func() {
			if t.Failed() {
				t.Logf("/metrics lacks %q", lacks)
			}
		}()
		waitFor(t, 10*time.Second, func() bool {
			raw := scrape()
			lacks = lacks[:0]
			for _, want := range []string{
				`airlock_proxy_decisions_total{decision="deny",reason="method_not_allowed",sandbox="itest"}`,
				"airlock_proxy_identity_lookup_seconds_count", "airlock_proxy_policy_eval_seconds_count",
				"airlock_proxy_cert_cache_hits_total", `airlock_proxy_bytes_total{direction="down",sandbox="itest"}`,
				"\ngo_goroutines ", "\nprocess_resident_memory_bytes ", "\nprocess_open_fds ",
			} {
				if !bytes.Contains(raw, []byte(want)) {
					lacks = append(lacks, want)
				}
			}
			return len(lacks) == 0
		}, "/metrics has every series")
		// At rest Go's default is back, without waiting for a collection
		// the load no longer brings. Scraped seldom: scrapes every few
		// ms are load enough to keep the floor.
		for deadline := time.Now().Add(15 * time.Second); ; {
			time.Sleep(1500 * time.Millisecond)
			pct := gogc(scrape())
			if pct == 100 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("go_gc_gogc_percent at rest: %d after 15s, want Go's default, 100", pct)
				break
			}
		}
	})
}

// Shutdown drains what is in flight, but an inspected tunnel that is only
// waiting for its next request is closed at once: the proxy exits cleanly
// (status 0) rather than at the end of its grace period with an error.
func TestShutdownClosesIdleInspectedTunnels(t *testing.T) {
	w := newWorld(t)
	c := w.goClient(t)
	defer c.CloseIdleConnections()
	resp, err := c.Get(fmt.Sprintf("https://api.test:%d/v1/hello", w.tlsPort))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close() // the tunnel stays open, idle, in the client's pool
	w.proxy.cmd.Process.Signal(os.Interrupt)
	err = w.proxy.cmd.Wait()
	if err != nil {
		t.Fatalf("airlock proxy with an idle inspected tunnel exited with %v; want a clean drain", err)
	}
}

// serveQuiet runs an upstream that reads each connection to its end and
// then holds it open, silent, until the test ends.
func serveQuiet(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close() })
	testutil.ServeConns(ln, func(c net.Conn) {
		io.Copy(io.Discard, c)
		<-done
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// An opaque tunnel to an upstream that never speaks again must not keep the
// proxy from exiting: once the grace period ends its client side is
// closed, and that ends the tunnel, upstream side included.
func TestShutdownEndsTunnelsToQuietUpstreams(t *testing.T) {
	w := newWorld(t)
	conn := connectThrough(t, w.proxy.addr, fmt.Sprintf("quiet.test:%d", w.quietPort))
	defer conn.Close()
	conn.Write([]byte("x"))
	w.proxy.cmd.Process.Signal(os.Interrupt)
	exited := make(chan error, 1)
	go func() { exited <- w.proxy.cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(25 * time.Second):
		t.Fatal("airlock proxy still running 25s after SIGINT (its grace period is 10s) with a tunnel to a silent upstream")
	}
}

// pipelinedConnect sends a CONNECT in the same write as the first bytes
// meant for the tunnel, and strips the proxy's 200 from what it reads.
type pipelinedConnect struct {
	net.Conn
	head string
	sent bool
	br   *bufio.Reader
}

func (c *pipelinedConnect) Write(p []byte) (int, error) {
	if c.sent {
		return c.Conn.Write(p)
	}
	c.sent = true
	if _, err := c.Conn.Write(append([]byte(c.head), p...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *pipelinedConnect) Read(p []byte) (int, error) {
	if c.br == nil {
		c.br = bufio.NewReader(c.Conn)
		resp, err := http.ReadResponse(c.br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("CONNECT: %s (%s)", resp.Status, resp.Header.Get("X-Airlock-Reason"))
		}
	}
	return c.br.Read(p)
}

// connectThrough opens a CONNECT tunnel through the proxy and returns it.
func connectThrough(t *testing.T, proxyAddr, target string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	if br.Buffered() > 0 {
		t.Fatal("proxy sent bytes after 200")
	}
	return conn
}

func poolOf(t *testing.T, pemFile string) *x509.CertPool {
	raw, err := os.ReadFile(pemFile)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(raw) {
		t.Fatalf("%s has no certificates", pemFile)
	}
	return p
}
