package proxy

import (
	"context"
	"log/slog"
	"time"
)

// AuditMessage is the message of the one canonical line written per
// decision, allowed or denied (smokescreen's CANONICAL-PROXY-DECISION).
const AuditMessage = "CANONICAL-PROXY-DECISION"

// record writes dc's audit line and counts it. Query values and secrets
// never appear: the path is the canonical path without its query, and
// injected headers are named by the rule, not shown.
func (p *Proxy) record(dc *decision, status int, up, down int64) {
	r := &dc.in.Request
	verdict := "deny"
	if dc.d.Allow {
		verdict = "allow"
	}
	attrs := []slog.Attr{
		slog.String("sandbox", dc.in.Sandbox.ID),
		slog.String("kind", dc.in.Sandbox.Kind),
		slog.String("preset", dc.in.Sandbox.Preset),
		slog.Int("pid", dc.in.Process.PID),
		slog.String("binary", dc.in.Process.Exe),
		slog.String("sha256", dc.in.Process.SHA256),
		slog.String("phase", string(r.Phase)),
		slog.String("host", r.Host),
		slog.Int("port", r.Port),
		slog.String("method", r.Method),
		slog.String("path", r.Path),
		slog.String("decision", verdict),
		slog.String("reason", string(dc.d.Reason)),
		slog.String("rule", dc.d.Rule),
		slog.Bool("inspect", dc.d.Inspect),
		slog.Int("status", status),
		slog.Int64("bytes_up", up),
		slog.Int64("bytes_down", down),
		slog.Float64("duration_ms", float64(time.Since(dc.start).Microseconds())/1000),
		slog.String("policy", dc.d.Policy),
	}
	if dc.detail != "" {
		attrs = append(attrs, slog.String("detail", dc.detail))
	}
	level := slog.LevelInfo
	if !dc.d.Allow {
		level = slog.LevelWarn
	}
	p.audit.LogAttrs(context.Background(), level, AuditMessage, attrs...)
	p.cfg.Metrics.countDecision(dc.in.Sandbox.ID, verdict, string(dc.d.Reason))
	p.cfg.Metrics.addBytes(dc.in.Sandbox.ID, up, down)
}
