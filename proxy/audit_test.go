package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

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
		(&Proxy{audit: newAuditLog(&got)}).record(dc, 403, 12, 34)

		var want bytes.Buffer
		level, verdict := slog.LevelWarn, "deny"
		if allow {
			level, verdict = slog.LevelInfo, "allow"
		}
		r := &dc.in.Request
		slog.New(slog.NewJSONHandler(&want, nil)).LogAttrs(context.Background(), level, AuditMessage,
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
		var fields map[string]any
		if err := json.Unmarshal(got.Bytes(), &fields); err != nil {
			t.Fatal(err)
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
	p := &Proxy{audit: newAuditLog(io.Discard)}
	dc := auditDecision(true)
	b.ReportAllocs()
	for b.Loop() {
		p.record(dc, 200, 1000, 2000)
	}
}
