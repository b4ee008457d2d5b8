package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// airlockBin is the binary under test, built once by TestMain.
var airlockBin string

func TestMain(m *testing.M) {
	testutil.ServeClient() // the relay of the decision-table test
	dir, err := os.MkdirTemp("", "airlock-integration-")
	if err != nil {
		panic(err)
	}
	// As `make build` builds it: the tests run what ships.
	if airlockBin, err = stagedAirlock(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// stagedAirlock builds airlock as `make build` does, with the sandbox's
// stage binary embedded (sandbox/stagebin), into dir.
func stagedAirlock(dir string) (string, error) {
	stage := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", "../sandbox/stagebin/airlock-stage", "../sandbox/stagecmd")
	stage.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := stage.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the sandbox's stage: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "airlock")
	build := exec.Command("go", "build", "-tags", "airlock_stage", "-o", bin, "../cmd/airlock")
	build.Env = stage.Env
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build airlock with its stage: %v\n%s", err, out)
	}
	return bin, nil
}

// runningProxy is an `airlock proxy` process.
type runningProxy struct {
	addr     string // host:port
	url      string // http://host:port
	caFile   string // the airlock CA clients must trust for inspected hosts
	auditLog string
	metrics  string
	cmd      *exec.Cmd

	mu     sync.Mutex
	stderr []string // what the proxy logged, line by line
}

// logged reports whether the proxy has logged a line containing all of
// want, waiting for it a while.
func (rp *runningProxy) logged(want ...string) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		rp.mu.Lock()
		for _, l := range rp.stderr {
			found := true
			for _, w := range want {
				found = found && strings.Contains(l, w)
			}
			if found {
				rp.mu.Unlock()
				return true
			}
		}
		rp.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// startProxy runs the real binary with args and waits until it listens.
func startProxy(t *testing.T, dir string, env []string, args ...string) *runningProxy {
	t.Helper()
	return startProxyTo(t, dir, env, nil, args...)
}

// startProxyTo is startProxy with the proxy's stdout on stdout (nil:
// /dev/null).
func startProxyTo(t *testing.T, dir string, env []string, stdout *os.File, args ...string) *runningProxy {
	t.Helper()
	return startProxyIn(t, "", dir, env, stdout, args...)
}

// startProxyIn is startProxyTo in the network namespace at path netns,
// entered with nsenter ("": the test's own).
func startProxyIn(t *testing.T, netns, dir string, env []string, stdout *os.File, args ...string) *runningProxy {
	t.Helper()
	rp := &runningProxy{caFile: filepath.Join(dir, "ca", "ca.pem"), auditLog: filepath.Join(dir, "audit.log")}
	// The metrics on a port the kernel picks, which the proxy names: a
	// port found free here could be taken by another test's process
	// before the proxy binds it.
	args = append([]string{"proxy", "--listen", "127.0.0.1:0", "--ca-dir", filepath.Join(dir, "ca"),
		"--audit-log", rp.auditLog, "--metrics", "127.0.0.1:0", "--log-level", "warn"}, args...)
	cmd := exec.Command(airlockBin, args...)
	if netns != "" {
		// nsenter execs the proxy (no fork for a network namespace):
		// the signals of the cleanup reach it.
		cmd = exec.Command("nsenter", append([]string{"--net=" + netns, "--", airlockBin}, args...)...)
	}
	cmd.Env = env
	if stdout != nil {
		cmd.Stdout = stdout
	}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rp.cmd = cmd
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			t.Error("airlock proxy did not stop within 15s of SIGINT")
		}
	})
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			rp.mu.Lock()
			rp.stderr = append(rp.stderr, sc.Text())
			rp.mu.Unlock()
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("airlock proxy exited before listening")
			}
			if rest, found := strings.CutPrefix(line, "airlock proxy serving metrics on "); found {
				rp.metrics = rest
				continue
			}
			if rest, found := strings.CutPrefix(line, "airlock proxy listening on "); found {
				rp.addr = strings.Fields(rest)[0]
				rp.url = "http://" + rp.addr
				go func() {
					for l := range lines {
						t.Log("proxy: " + l)
					}
				}()
				return rp
			}
			t.Log("proxy: " + line)
		case <-deadline:
			t.Fatal("airlock proxy did not start within 30s")
		}
	}
}

// auditLine is the subset of an audit line the tests check.
type auditLine struct {
	Msg      string `json:"msg"`
	ID       string `json:"id"`
	Binary   string `json:"binary"`
	SHA256   string `json:"sha256"`
	Phase    string `json:"phase"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Method   string `json:"method"`
	Path     string `json:"path"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Rule     string `json:"rule"`
	Inspect  bool   `json:"inspect"`
	Status   int    `json:"status"`
	Up       int64  `json:"bytes_up"`
	Down     int64  `json:"bytes_down"`
	Detail   string `json:"detail"`
	Scrubbed int64  `json:"secret_scrubbed"`
	Count    int    `json:"count"`
	Via      string `json:"via"`
	// A CANONICAL-PROXY-DNS line's: the name asked, its type, the answer.
	Name  string `json:"name"`
	QType string `json:"qtype"`
	RCode string `json:"rcode"`
}

// audit reads the audit log, waiting until pred matches a decision line.
func (rp *runningProxy) audit(t *testing.T, pred func(auditLine) bool) auditLine {
	t.Helper()
	return rp.auditMsg(t, "CANONICAL-PROXY-DECISION", pred)
}

// closed waits until pred matches a close line: the outcome of an allowed
// decision (status, bytes), written when its request or tunnel ends.
func (rp *runningProxy) closed(t *testing.T, pred func(auditLine) bool) auditLine {
	t.Helper()
	return rp.auditMsg(t, "CANONICAL-PROXY-CN-CLOSE", pred)
}

// outcome waits until pred matches the line that says how a request ended:
// the decision line of a denial made up front, or the close line of an
// allowed one that failed later (its body turned out malformed).
func (rp *runningProxy) outcome(t *testing.T, pred func(auditLine) bool) auditLine {
	t.Helper()
	return rp.auditMsg(t, "", pred)
}

// auditMsg waits for a line with message msg ("" for either) matching pred.
func (rp *runningProxy) auditMsg(t *testing.T, msg string, pred func(auditLine) bool) auditLine {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		raw, _ := os.ReadFile(rp.auditLog)
		for _, l := range strings.Split(string(raw), "\n") {
			var a auditLine
			if json.Unmarshal([]byte(l), &a) == nil && (a.Msg == msg || msg == "" && a.Msg != "") && pred(a) {
				return a
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no matching audit line in:\n%s", raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// denial is the JSON body of a 403/421.
type denial struct {
	Error, Reason, Rule, Binary, Host, Method, Path, Hint string
	Port                                                  int
}

func parseDenial(t *testing.T, body string) denial {
	t.Helper()
	var d denial
	if err := json.Unmarshal([]byte(strings.TrimSpace(body)), &d); err != nil {
		t.Fatalf("denial body %q is not JSON: %v", body, err)
	}
	if d.Reason == "" || d.Hint == "" || d.Error == "" {
		t.Fatalf("denial %q lacks reason, hint or error", body)
	}
	return d
}

// caVars point clients at trust stores; the machine's values must not
// decide which CA a test's client trusts.
var caVars = map[string]bool{
	"SSL_CERT_FILE": true, "SSL_CERT_DIR": true, "CURL_CA_BUNDLE": true, "GIT_SSL_CAINFO": true,
	"REQUESTS_CA_BUNDLE": true, "NODE_EXTRA_CA_CERTS": true, "DENO_CERT": true,
}

// gcVars tune the Go runtime's collector: airlock's own setting (gcfloor)
// is what the tests check, not the machine's.
var gcVars = map[string]bool{"GOGC": true, "GOMEMLIMIT": true}

// cleanEnv is a client environment without proxy or CA variables, so each
// test says explicitly how its client reaches the proxy and what it trusts,
// and without the machine's collector settings.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k := strings.ToUpper(strings.SplitN(kv, "=", 2)[0])
		if strings.HasSuffix(k, "_PROXY") || strings.HasPrefix(k, "AIRLOCK_") || caVars[k] || gcVars[k] {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}
