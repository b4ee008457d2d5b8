package proxy

import (
	"io"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// AuditMessage is the message of the one canonical line written per
// decision, allowed or denied (smokescreen's CANONICAL-PROXY-DECISION).
const AuditMessage = "CANONICAL-PROXY-DECISION"

// auditLog writes audit lines in the shape slog's JSON handler gives the
// proxy's other logs (time, level, msg, then the fields), encoded straight
// into a pooled buffer: every request and tunnel writes one, and through
// slog the line cost 7 µs, several times its write.
type auditLog struct {
	mu  sync.Mutex // one Write per line, lines never interleaved
	w   io.Writer
	buf sync.Pool
}

func newAuditLog(w io.Writer) *auditLog {
	return &auditLog{w: w, buf: sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}}
}

// record writes dc's audit line and counts it. Query values and secrets
// never appear: the path is the canonical path without its query, and
// injected headers are named by the rule, not shown; secrets masked in the
// response are counted (secret_scrubbed).
func (p *Proxy) record(dc *decision, status int, up, down int64) {
	verdict, level := "deny", "WARN"
	if dc.d.Allow {
		verdict, level = "allow", "INFO"
	}
	p.audit.write(dc, level, verdict, status, up, down)
	p.cfg.Metrics.countDecision(dc.in.Sandbox.ID, verdict, string(dc.d.Reason))
	p.cfg.Metrics.addBytes(dc.in.Sandbox.ID, up, down)
	p.cfg.Metrics.countScrubbed(dc.in.Sandbox.ID, dc.scrub.scrubbed())
}

func (l *auditLog) write(dc *decision, level, verdict string, status int, up, down int64) {
	r := &dc.in.Request
	bp := l.buf.Get().(*[]byte)
	b := append((*bp)[:0], `{"time":"`...)
	b = time.Now().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"`...)
	b = append(b, level...)
	b = append(b, `","msg":"`+AuditMessage+`"`...)
	b = jsonString(b, "sandbox", dc.in.Sandbox.ID)
	b = jsonString(b, "kind", dc.in.Sandbox.Kind)
	b = jsonString(b, "preset", dc.in.Sandbox.Preset)
	b = jsonInt(b, "pid", int64(dc.in.Process.PID))
	b = jsonString(b, "binary", dc.in.Process.Exe)
	b = jsonString(b, "sha256", dc.in.Process.SHA256)
	b = jsonString(b, "phase", string(r.Phase))
	b = jsonString(b, "host", r.Host)
	b = jsonInt(b, "port", int64(r.Port))
	b = jsonString(b, "method", r.Method)
	b = jsonString(b, "path", r.Path)
	b = jsonString(b, "decision", verdict)
	b = jsonString(b, "reason", string(dc.d.Reason))
	b = jsonString(b, "rule", dc.d.Rule)
	b = append(b, `,"inspect":`...)
	b = strconv.AppendBool(b, dc.d.Inspect)
	b = jsonInt(b, "status", int64(status))
	b = jsonInt(b, "bytes_up", up)
	b = jsonInt(b, "bytes_down", down)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendFloat(b, float64(time.Since(dc.start).Microseconds())/1000, 'f', -1, 64)
	b = jsonString(b, "policy", dc.d.Policy)
	if dc.detail != "" {
		b = jsonString(b, "detail", dc.detail)
	}
	if n := dc.scrub.scrubbed(); n > 0 {
		b = jsonInt(b, "secret_scrubbed", n)
	}
	b = append(b, "}\n"...)
	l.mu.Lock()
	l.w.Write(b)
	l.mu.Unlock()
	if cap(b) <= 64<<10 { // an outsized line's buffer is not kept
		*bp = b
		l.buf.Put(bp)
	}
}

func jsonInt(b []byte, key string, v int64) []byte {
	b = append(b, `,"`...)
	b = append(b, key...)
	b = append(b, `":`...)
	return strconv.AppendInt(b, v, 10)
}

// jsonString appends ,"key":"s" with s escaped as slog escapes it: quotes,
// backslashes, control characters, U+2028 and U+2029, and invalid UTF-8 as
// U+FFFD. Values come from the sandbox (hosts, paths, policy details), so a
// line can never be split or forged by them.
func jsonString(b []byte, key, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, `,"`...)
	b = append(b, key...)
	b = append(b, `":"`...)
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
