package integration

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// wholeLines decodes every line of an audit log, failing on any that is not
// a whole JSON object.
func wholeLines(t *testing.T, raw []byte) []auditLine {
	t.Helper()
	if len(raw) == 0 {
		return nil
	}
	if raw[len(raw)-1] != '\n' {
		t.Fatalf("the audit log ends inside a line: %q", raw[max(0, len(raw)-120):])
	}
	var out []auditLine
	for _, l := range bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n")) {
		var a auditLine
		if err := json.Unmarshal(l, &a); err != nil || a.Msg == "" {
			t.Fatalf("audit line %q is not whole: %v", l, err)
		}
		out = append(out, a)
	}
	return out
}

// metric reads one unlabelled counter from the proxy's /metrics.
func (rp *runningProxy) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + rp.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// With the audit log's disk full, nothing is served that is not on record:
// every request the upstream saw has its decision line, the others are
// refused 503 audit_unavailable, the failure is on stderr and in a metric,
// and the log holds whole lines only.
func TestAuditDiskFull(t *testing.T) {
	dir := testutil.Tmpfs(t, 64<<10)
	// Leave the log two pages: a dozen lines.
	if err := os.WriteFile(filepath.Join(dir, "filler"), make([]byte, 56<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "audit.log")
	w := newWorld(t, "--audit-log", log)
	w.proxy.auditLog = log

	c := w.goClient(t)
	defer c.CloseIdleConnections()
	served, refused := map[string]bool{}, 0
	for i := range 300 {
		path := fmt.Sprintf("/v1/seen/%d", i)
		resp, body, _ := doTraced(t, c, "GET", fmt.Sprintf("https://api.test:%d%s", w.tlsPort, path), nil)
		switch {
		case resp.StatusCode == 200:
			served[path] = true
		case resp.StatusCode == 503 && parseDenial(t, string(body)).Reason == "audit_unavailable":
			refused++
		default:
			t.Fatalf("GET %s = %s %s", path, resp.Status, body)
		}
	}
	if refused == 0 {
		t.Fatalf("all %d requests were served with the audit log's disk full", len(served))
	}

	raw, _ := os.ReadFile(log)
	onRecord := map[string]bool{}
	for _, a := range wholeLines(t, raw) {
		if a.Msg == "CANONICAL-PROXY-DECISION" && a.Decision == "allow" {
			onRecord[a.Path] = true
		}
	}
	w.seen.Range(func(k, _ any) bool {
		if !onRecord[k.(string)] {
			t.Errorf("the upstream was sent %s, whose decision is not on record", k)
		}
		return true
	})
	for path := range served {
		if !onRecord[path] {
			t.Errorf("%s was served without its decision on record", path)
		}
	}
	if !w.proxy.logged("audit log write failed", "no space left on device") {
		t.Error("the proxy logged no audit write failure on stderr")
	}
	if n := w.proxy.metric(t, "airlock_proxy_audit_write_errors_total"); n == 0 {
		t.Error("airlock_proxy_audit_write_errors_total is 0")
	}
	t.Logf("%d served, %d refused, %d lines on record", len(served), refused, len(onRecord))
}

// With the audit log on a stdout whose reader has gone, a write is an
// error like any other (EPIPE), not the proxy's death by SIGPIPE: requests
// are refused 503 audit_unavailable and the proxy keeps answering.
func TestAuditToClosedStdout(t *testing.T) {
	r, wp, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	w := newWorldTo(t, wp, "--audit-log", "-")
	wp.Close()
	plain := fmt.Sprintf("http://plain.test:%d", w.plainPort)
	for i := range 2 {
		status, body := w.curlCmd(t, w.curl, plain+"/x")
		if d := parseDenial(t, body); status != 503 || d.Reason != "audit_unavailable" || !strings.Contains(d.Hint, "broken pipe") {
			t.Fatalf("request %d with the audit log's reader gone = %d %+v; want 503 audit_unavailable", i, status, d)
		}
	}
	if !w.proxy.logged("audit log write failed", "broken pipe") {
		t.Error("the proxy logged no audit write failure on stderr")
	}
}

// Requests http.Server refuses itself, before the proxy's handler sees them,
// are audited like any refusal, attributed to the client's binary, also
// when one comes pipelined after a request the proxy answered; and so is a
// request that is not for a proxy at all.
func TestRefusalsAudited(t *testing.T) {
	w := newWorld(t)
	self, _ := os.Executable()
	self = realpath(t, self)
	for _, tc := range []struct {
		name, raw string
		status    int
		detail    string
	}{
		{"header too large", "GET http://plain.test/ HTTP/1.1\r\nHost: plain.test\r\nX-Big: " + strings.Repeat("a", 80<<10) + "\r\n\r\n",
			431, "--max-header-bytes"},
		{"malformed request line", "NOT-HTTP\r\n\r\n", 400, "400 Bad Request"},
		{"bad Host", "GET http://plain.test/ HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "malformed Host header"},
		{"unknown transfer coding", "POST http://plain.test/ HTTP/1.1\r\nHost: plain.test\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "501 Not Implemented"},
		{"unknown expectation", "GET http://plain.test/ HTTP/1.1\r\nHost: plain.test\r\nExpect: magic\r\n\r\n", 417, "417"},
		{"origin-form request", "GET /x HTTP/1.1\r\nHost: plain.test\r\n\r\n", 400, "origin-form request"},
		{"CONNECT to a host holding a CR", "CONNECT plain.test\r.x:443 HTTP/1.1\r\nHost: plain.test\r\n\r\n", 400, "400 Bad Request"},
		{"pipelined after an answered request", fmt.Sprintf("GET http://plain.test:%d/pipelined HTTP/1.1\r\nHost: plain.test:%[1]d\r\n\r\nNOT-HTTP-EITHER\r\n\r\n", w.plainPort),
			400, "400 Bad Request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := countLines(w.proxy.auditLog, tc.status)
			c, err := net.Dial("tcp", w.proxy.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			go io.WriteString(c, tc.raw)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err == nil && resp.StatusCode != tc.status {
				io.Copy(io.Discard, resp.Body)
				resp, err = http.ReadResponse(br, nil) // the pipelined one
			}
			if err != nil || resp.StatusCode != tc.status {
				t.Fatalf("answer = %v %v; want %d", resp, err, tc.status)
			}
			// Answered as any denial: the reason in the status line, which
			// is what curl -v and Python show, and in the JSON body.
			var d struct{ Reason, Hint string }
			raw, _ := io.ReadAll(resp.Body)
			if !strings.HasPrefix(resp.Status, fmt.Sprintf("%d airlock: invalid_request: ", tc.status)) || json.Unmarshal(raw, &d) != nil ||
				d.Reason != "invalid_request" || !strings.Contains(d.Hint, tc.detail) {
				t.Errorf("answer %q %s; want the reason in its status line and a JSON denial naming %q", resp.Status, raw, tc.detail)
			}
			a := w.proxy.audit(t, func(a auditLine) bool {
				return a.Status == tc.status && strings.Contains(a.Detail, tc.detail)
			})
			if a.Decision != "deny" || a.Reason != "invalid_request" || a.Binary != self {
				t.Fatalf("audit line = %+v; want invalid_request denied to %s", a, self)
			}
			if n := countLines(w.proxy.auditLog, tc.status); n != before+1 {
				t.Fatalf("%d new audit lines with status %d; want one", n-before, tc.status)
			}
		})
	}
}

// countLines counts the decision lines of status in an audit log.
func countLines(file string, status int) int {
	raw, _ := os.ReadFile(file)
	n := 0
	for _, l := range strings.Split(string(raw), "\n") {
		var a auditLine
		if json.Unmarshal([]byte(l), &a) == nil && a.Msg == "CANONICAL-PROXY-DECISION" && a.Status == status {
			n++
		}
	}
	return n
}

// Connections refused past the flood budget, closed unanswered, are
// audited too: summed up in one line per interval whose count, with the
// lines of the refusals answered, accounts for every connection refused.
func TestFloodRefusalsAudited(t *testing.T) {
	w := newWorld(t, "--max-conns", "1")
	held := connectThrough(t, w.proxy.addr, fmt.Sprintf("tunnel.test:%d", w.tlsPort))
	defer held.Close()
	const flood = 200
	for range flood {
		c, err := net.Dial("tcp", w.proxy.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close() // held open: each answered refusal lingers for it
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		raw, _ := os.ReadFile(w.proxy.auditLog)
		// Read while the proxy writes: a line being written (one
		// write(2), which a reader may see part of where it crosses a
		// page) is read whole at the next look.
		raw = raw[:bytes.LastIndexByte(raw, '\n')+1]
		total, summaries := 0, 0
		for _, a := range wholeLines(t, raw) {
			if a.Reason != "connection_limit" {
				continue
			}
			if a.Count > 0 {
				summaries++
				total += a.Count
			} else {
				total++
			}
		}
		if total == flood && summaries > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections refused; the audit log accounts for %d, in %d summary lines", flood, total, summaries)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// SIGHUP reloads the policy: an edited bundle takes effect (the directory
// is not watched here, so only the signal can have loaded it), while a
// tunnel open across the signal keeps working and the proxy keeps serving.
func TestSIGHUPReloadsPolicy(t *testing.T) {
	w := newWorld(t, "--policy-watch=false")
	tunnel := fmt.Sprintf("tunnel.test:%d", w.tlsPort)
	tc := tls.Client(connectThrough(t, w.proxy.addr, tunnel), &tls.Config{ServerName: "tunnel.test", RootCAs: poolOf(t, w.upstreamCA.File)})
	defer tc.Close()
	br := bufio.NewReader(tc)
	get := func() {
		t.Helper()
		io.WriteString(tc, "GET / HTTP/1.1\r\nHost: tunnel.test\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request in the open tunnel: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		if string(body) != "tunnel-ok" {
			t.Fatalf("request in the open tunnel = %s %q", resp.Status, body)
		}
	}
	connectStatus := func() int {
		c, err := net.Dial("tcp", w.proxy.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", tunnel, tunnel)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatalf("CONNECT %s: %v", tunnel, err)
		}
		return resp.StatusCode
	}
	get()

	// The edit: tunnel.test is no longer allowed.
	rego := filepath.Join(w.dir, "bundle", "itest.rego")
	src, _ := os.ReadFile(rego)
	edited := strings.Replace(string(src), `"hosts": ["tunnel.test"]`, `"hosts": ["tunnel-gone.test"]`, 1)
	if edited == string(src) {
		t.Fatal("the preset has no tunnel.test rule to edit")
	}
	os.WriteFile(rego, []byte(edited), 0o644)
	if s := connectStatus(); s != 200 {
		t.Fatalf("CONNECT after the edit, before SIGHUP = %d; want 200 (the old policy)", s)
	}

	if err := w.proxy.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for connectStatus() != 403 {
		if time.Now().After(deadline) {
			t.Fatal("the edited policy did not take effect after SIGHUP")
		}
		time.Sleep(50 * time.Millisecond)
	}
	get() // the tunnel opened before the reload was not cut
	if status, body := w.curlCmd(t, w.curl, fmt.Sprintf("http://plain.test:%d/x", w.plainPort)); status != 200 {
		t.Fatalf("after SIGHUP: %d %q", status, body)
	}
}

// --audit-failure=warn is the operator's choice to serve what cannot be
// recorded: the request goes through, and the failure is still logged.
func TestAuditFailureWarnServes(t *testing.T) {
	w := newWorld(t, "--audit-log", "/dev/full", "--audit-failure", "warn")
	if status, body := w.curlCmd(t, w.curl, fmt.Sprintf("http://plain.test:%d/x", w.plainPort)); status != 200 || body != "plain GET /x" {
		t.Fatalf("with --audit-failure=warn and the audit log full = %d %q; want it served", status, body)
	}
	if !w.proxy.logged("audit log write failed", "no space left on device") {
		t.Error("the proxy logged no audit write failure on stderr")
	}
}
