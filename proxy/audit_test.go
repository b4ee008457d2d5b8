package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// auditDecision is a decision whose every string comes from the sandbox
// side and tries to break the line: quotes, backslashes, newlines, control
// characters, line separators, invalid UTF-8.
func auditDecision(allow bool) *decision {
	dc := &decision{start: time.Now()}
	dc.in.Sandbox = policies.Sandbox{ID: "coder-1", Kind: "coder", Preset: "coder"}
	dc.in.Process = policies.Process{PID: 4242, Exe: "/tmp/we\"ird\\bin\n", SHA256: strings.Repeat("ab", 32)}
	dc.in.Request = policies.Request{Phase: policies.PhaseRequest, Host: "evil.test\r\n{\"decision\":\"allow\"}", Port: 443,
		Method: "GET\x00\x1f\x7f", Path: "/caf\xc3\xa9/\xff\xfe/<a&b>/\u2028\u2029/🚀"}
	dc.d = policies.Decision{Allow: allow, Reason: policies.ReasonPathNotAllowed, Rule: "r\"1", Policy: "sha256:00"}
	dc.detail = "tab\there"
	return dc
}

// The audit line is exactly what slog's JSON handler wrote for the same
// fields before the encoder replaced it (time and duration aside), so
// consumers see no change, and strings a sandbox controls can neither split
// a line nor forge a field.
func TestAuditLineMatchesSlog(t *testing.T) {
	volatile := regexp.MustCompile(`"time":"[^"]*",|,"duration_ms":[0-9.e+-]+`)
	for _, allow := range []bool{true, false} {
		dc := auditDecision(allow)
		var got bytes.Buffer
		(&Proxy{audit: newAuditLog(&got, nil)}).record(dc, 403, 12, 34)
		var fields map[string]any
		if err := json.Unmarshal(got.Bytes(), &fields); err != nil {
			t.Fatal(err)
		}
		id, _ := fields["id"].(string)

		var want bytes.Buffer
		level, verdict := slog.LevelWarn, "deny"
		if allow {
			level, verdict = slog.LevelInfo, "allow"
		}
		r := &dc.in.Request
		slog.New(slog.NewJSONHandler(&want, nil)).LogAttrs(context.Background(), level, AuditMessage, slog.String("id", id),
			slog.String("sandbox", dc.in.Sandbox.ID), slog.String("kind", dc.in.Sandbox.Kind), slog.String("preset", dc.in.Sandbox.Preset),
			slog.Int("pid", dc.in.Process.PID), slog.String("binary", dc.in.Process.Exe), slog.String("sha256", dc.in.Process.SHA256),
			slog.String("phase", string(r.Phase)), slog.String("host", r.Host), slog.Int("port", r.Port),
			slog.String("method", r.Method), slog.String("path", r.Path), slog.String("decision", verdict),
			slog.String("reason", string(dc.d.Reason)), slog.String("rule", dc.d.Rule), slog.Bool("inspect", dc.d.Inspect),
			slog.Int("status", 403), slog.Int64("bytes_up", 12), slog.Int64("bytes_down", 34),
			slog.Float64("duration_ms", 0), slog.String("policy", dc.d.Policy), slog.String("detail", dc.detail))

		g, w := volatile.ReplaceAllString(got.String(), ""), volatile.ReplaceAllString(want.String(), "")
		if g != w {
			t.Fatalf("audit line\n got %s\nwant %s", g, w)
		}
		if strings.Count(got.String(), "\n") != 1 {
			t.Fatalf("audit line is not one line: %q", got.String())
		}
		if fields["host"] != r.Host || fields["decision"] != verdict || fields["msg"] != AuditMessage {
			t.Fatalf("decoded fields %v", fields)
		}
		if _, err := time.Parse(time.RFC3339Nano, fields["time"].(string)); err != nil {
			t.Fatalf("time: %v", err)
		}
	}
}

func BenchmarkAuditLine(b *testing.B) {
	p := &Proxy{audit: newAuditLog(io.Discard, nil)}
	dc := auditDecision(true)
	b.ReportAllocs()
	for b.Loop() {
		p.record(dc, 200, 1000, 2000)
	}
}

// auditLines decodes every line of raw, failing on one that is not a whole
// JSON object.
func auditLines(t *testing.T, raw []byte) []map[string]any {
	t.Helper()
	if len(raw) > 0 && raw[len(raw)-1] != '\n' {
		t.Fatalf("audit log ends inside a line: %q", raw[max(0, len(raw)-80):])
	}
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// An allowed decision is on record before anything is dialled for it, and
// its outcome follows on a close line with the same id; a denial is one
// decision line.
func TestAdmitThenClose(t *testing.T) {
	var buf bytes.Buffer
	p := &Proxy{audit: newAuditLog(&buf, nil), log: slog.New(slog.DiscardHandler)}
	allowed := auditDecision(true)
	if !p.admit(allowed) {
		t.Fatalf("admit refused: %s", allowed.detail)
	}
	if n := len(auditLines(t, buf.Bytes())); n != 1 {
		t.Fatalf("after admit: %d lines, want the decision line", n)
	}
	p.record(allowed, 200, 5, 7)
	denied := auditDecision(false)
	if p.admit(denied) {
		t.Fatal("admit let a denial through")
	}
	p.record(denied, 403, 0, 0)

	lines := auditLines(t, buf.Bytes())
	want := []struct {
		msg, decision string
		status, down  float64
	}{{AuditMessage, "allow", 0, 0}, {AuditCloseMessage, "allow", 200, 7}, {AuditMessage, "deny", 403, 0}}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		l := lines[i]
		if l["msg"] != w.msg || l["decision"] != w.decision || l["status"] != w.status || l["bytes_down"] != w.down {
			t.Errorf("line %d = %v; want msg %s decision %s status %v bytes_down %v", i, l, w.msg, w.decision, w.status, w.down)
		}
	}
	if lines[0]["id"] != lines[1]["id"] || lines[0]["id"] == lines[2]["id"] || lines[0]["id"] == "" {
		t.Errorf("ids %v %v %v: want the decision and its close line to share one, the denial its own", lines[0]["id"], lines[1]["id"], lines[2]["id"])
	}
}

// A decision whose line cannot be written is refused with
// audit_unavailable, naming the error but not the log's path, whether the
// disk is full or the reader of a pipe has gone (EPIPE is an error like
// any other); --audit-failure=warn serves it.
func TestAdmitFailsClosed(t *testing.T) {
	full := devFull(t)
	r, closedPipe, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	defer closedPipe.Close()
	for _, tc := range []struct {
		name  string
		w     io.Writer
		errno string
	}{{"disk full", full, "no space left on device"}, {"reader gone", closedPipe, "broken pipe"}} {
		for _, failOpen := range []bool{false, true} {
			var logs bytes.Buffer
			p := &Proxy{audit: newAuditLog(tc.w, nil), log: slog.New(slog.NewTextHandler(&logs, nil)), cfg: Config{AuditFailOpen: failOpen}}
			dc := auditDecision(true)
			if got := p.admit(dc); got != failOpen {
				t.Fatalf("%s, fail open %v: admit = %v", tc.name, failOpen, got)
			}
			if !strings.Contains(logs.String(), "audit log write failed") || !strings.Contains(logs.String(), tc.errno) {
				t.Errorf("%s: stderr log %q does not say the audit write failed with %q", tc.name, logs.String(), tc.errno)
			}
			if failOpen {
				continue
			}
			if dc.d.Allow || dc.d.Reason != policies.ReasonAuditUnavailable || dc.status() != 503 || dc.detail != "audit log write failed: "+tc.errno {
				t.Errorf("%s: decision %+v detail %q status %d; want 503 audit_unavailable naming %q", tc.name, dc.d, dc.detail, dc.status(), tc.errno)
			}
		}
	}
}

// On a filesystem that fills up, a line is written whole or not at all: the
// part of a line the disk had room for is removed, so once there is room
// again the next line starts on a line of its own.
func TestAuditLineWholeOrNothing(t *testing.T) {
	f, freeRoom := fullAuditFile(t)
	p := &Proxy{audit: newAuditLog(f, nil), log: slog.New(slog.DiscardHandler)}
	dc := auditDecision(true)
	written := 0
	for ; written < 1000; written++ {
		if p.writeLine(dc, AuditMessage, 200, 0, 0) != nil {
			break
		}
	}
	if written == 1000 {
		t.Fatal("a 32 KiB tmpfs took 1000 lines")
	}
	raw, _ := os.ReadFile(f.Name())
	if n := len(auditLines(t, raw)); n != written {
		t.Fatalf("%d lines in the log, %d written", n, written)
	}
	freeRoom()
	if err := p.writeLine(dc, AuditCloseMessage, 200, 0, 0); err != nil {
		t.Fatalf("with room again: %v", err)
	}
	raw, _ = os.ReadFile(f.Name())
	lines := auditLines(t, raw)
	if len(lines) != written+1 || lines[written]["msg"] != AuditCloseMessage {
		t.Fatalf("after the disk had room again: %d lines, last %v; want %d, the last the close line", len(lines), lines[len(lines)-1], written+1)
	}
}

// A decision's line goes to the tee with its sandbox after the log took
// it, and a tee that cannot take it fails the decision as the log would.
func TestAuditTee(t *testing.T) {
	var log bytes.Buffer
	teed := map[string]string{}
	var teeErr error
	tee := func(sandbox string, line []byte) error {
		teed[sandbox] += string(line)
		return teeErr
	}
	p := &Proxy{audit: newAuditLog(&log, tee), log: slog.New(slog.DiscardHandler)}
	dc := auditDecision(true)
	if !p.admit(dc) {
		t.Fatalf("admit = false with a tee that takes the line; detail %q", dc.detail)
	}
	if got := teed[dc.in.Sandbox.ID]; got == "" || got != log.String() {
		t.Fatalf("tee of sandbox %q got %q, want the log's line %q", dc.in.Sandbox.ID, got, log.String())
	}
	teeErr = syscall.ENOSPC
	dc = auditDecision(true)
	if p.admit(dc) || dc.d.Reason != policies.ReasonAuditUnavailable {
		t.Fatalf("a tee that fails: admit allowed, decision %+v; want audit_unavailable", dc.d)
	}
	// The log took the allow line: the refusal is its close line, not a
	// second decision line of the same id.
	p.record(dc, http.StatusServiceUnavailable, 0, 0)
	var msgs []string
	for _, l := range auditLines(t, log.Bytes()) {
		if l["id"] == p.audit.id(dc) {
			msgs = append(msgs, fmt.Sprint(l["msg"], " ", l["decision"], " ", l["reason"]))
		}
	}
	want := []string{AuditMessage + " allow " + string(auditDecision(true).d.Reason), AuditCloseMessage + " deny audit_unavailable"}
	if !slices.Equal(msgs, want) {
		t.Fatalf("the log's lines of the refused decision: %q; want %q", msgs, want)
	}
}

// A fault (a recovered panic) that ends a connection's serving ends its
// admitted decisions on record: the admit line said a connection was
// made, and a close line says it ended, and why. A decision closed before
// the fault gets no second close line. endOnPanic is what the explicit
// proxy's handler and the transparent listener's serving defer.
func TestFaultEndsAdmittedOnRecord(t *testing.T) {
	fx := newFuzzFixture(t)
	var buf testutil.Buffer
	fx.p.audit = newAuditLog(&buf, nil)
	ctx := context.Background()
	admitted := func() *decision {
		dc := fx.p.decide(ctx, fx.cc, policies.Request{Phase: policies.PhaseConnect, Host: fuzzHost, Port: fx.port})
		fx.p.resolve(ctx, dc)
		if !fx.p.admit(dc) {
			t.Fatalf("CONNECT %s:%d not admitted: %+v", fuzzHost, fx.port, dc.d)
		}
		return dc
	}
	done, open := admitted(), admitted()
	fx.p.record(done, http.StatusOK, 1, 2)
	func() {
		defer func() {
			if r := recover(); r != "a fault for the test" {
				t.Errorf("endOnPanic panicked on with %v; want the fault", r)
			}
		}()
		defer fx.p.endOnPanic(fx.cc)
		panic("a fault for the test")
	}()
	closes := map[any][]string{}
	for _, l := range auditLines(t, []byte(buf.String())) {
		if l["msg"] == AuditCloseMessage {
			detail, _ := l["detail"].(string)
			closes[l["id"]] = append(closes[l["id"]], detail)
		}
	}
	if got := closes[fx.p.audit.id(done)]; len(got) != 1 || got[0] != "" {
		t.Errorf("the decision closed before the fault has close lines %q; want its one", got)
	}
	want := "ended by a fault in the proxy (bytes not counted): a fault for the test"
	if got := closes[fx.p.audit.id(open)]; len(got) != 1 || got[0] != want {
		t.Errorf("the open decision has close lines %q; want one with detail %q", got, want)
	}
	// Without a fault, nothing is written.
	before := buf.String()
	func() { defer fx.p.endOnPanic(fx.cc) }()
	if buf.String() != before {
		t.Errorf("endOnPanic without a panic wrote %q", strings.TrimPrefix(buf.String(), before))
	}
}

// The audit log is never opened through a symbolic link (one planted, or
// swapped in after any check, would have root append where it points), nor
// is a file or FIFO another user made there taken for it; the process's
// own streams are taken by their names without reopening them.
func TestAuditLogOpen(t *testing.T) {
	testutil.RequireRoot(t, "files owned by another user")
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	link := filepath.Join(dir, "link.jsonl")
	os.Symlink(target, link)
	if _, _, err := openAudit(link); err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Fatalf("openAudit(a link) = %v; want it refused", err)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("the link's target was created (%v)", err)
	}
	// A FIFO another user made, with a reader (theirs): not the log.
	fifo := filepath.Join(dir, "fifo.jsonl")
	syscall.Mkfifo(fifo, 0o666)
	os.Chown(fifo, 65534, 65534)
	reader, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if _, _, err := openAudit(fifo); err == nil || !strings.Contains(err.Error(), "neither root nor this user") {
		t.Errorf("openAudit(another user's FIFO) = %v; want it refused", err)
	}
	theirs := filepath.Join(dir, "theirs.jsonl")
	os.WriteFile(theirs, nil, 0o666)
	os.Chown(theirs, 65534, 65534)
	if _, _, err := openAudit(theirs); err == nil || !strings.Contains(err.Error(), "neither root nor this user") {
		t.Errorf("openAudit(another user's file) = %v; want it refused", err)
	}
	w, closeLog, err := openAudit(filepath.Join(dir, "real.jsonl"))
	if err != nil || w == nil {
		t.Fatalf("openAudit(a file) = %v", err)
	}
	closeLog()
}

// The process's own descriptors are taken by any of their names, never
// reopened (through /proc they would be whatever another user's shell made
// them): stdout and stderr, and an inherited one (3>>file, >(...)),
// written to as given.
func TestAuditLogOwnDescriptors(t *testing.T) {
	for path, want := range map[string]*os.File{"/dev/stderr": os.Stderr, "/dev/stdout": os.Stdout, "/proc/self/fd/2": os.Stderr, "/dev/fd/1": os.Stdout} {
		if w, _, err := openAudit(path); err != nil || w != want {
			t.Errorf("openAudit(%s) = %v, %v; want the process's own stream", path, w, err)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for _, path := range []string{fmt.Sprintf("/dev/fd/%d", w.Fd()), fmt.Sprintf("/proc/self/fd/%d", w.Fd())} {
		log, closeLog, err := openAudit(path)
		if err != nil {
			t.Fatalf("openAudit(%s, a pipe's write end) = %v", path, err)
		}
		io.WriteString(log, "line\n")
		closeLog()
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "line\n" {
			t.Errorf("through %s the pipe got %q, %v", path, buf, err)
		}
	}
	if _, _, err := openAudit(fmt.Sprintf("/dev/fd/%d", r.Fd())); err == nil || !strings.Contains(err.Error(), "not open for writing") {
		t.Errorf("openAudit(a read end) = %v; want it refused", err)
	}
}
