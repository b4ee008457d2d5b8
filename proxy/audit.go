package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/policies"
)

// AuditMessage is the message of the one canonical line written per
// decision, allowed or denied (smokescreen's CANONICAL-PROXY-DECISION). An
// allowed decision's line is written before anything is dialled for it
// (admit); its outcome follows on a close line.
const AuditMessage = "CANONICAL-PROXY-DECISION"

// AuditCloseMessage is the message of the line that ends an allowed
// decision (smokescreen's CANONICAL-PROXY-CN-CLOSE): the same fields, with
// the same id, and the outcome: final decision and reason (an upstream
// failure turns an allow into a deny), status, bytes each way, duration.
const AuditCloseMessage = "CANONICAL-PROXY-CN-CLOSE"

// auditLog writes audit lines in the shape slog's JSON handler gives the
// proxy's other logs (time, level, msg, then the fields), encoded straight
// into a pooled buffer: every request and tunnel writes one or two, and through
// slog the line cost 7 µs, several times its write.
//
// A line is written whole or not at all. Each line is one write(2). On a
// regular file (opened O_APPEND) a write cut short, which is how a full
// disk ends one, is truncated back to where the line began, so the next
// line does not start inside it. On a pipe the kernel writes a line of up
// to PIPE_BUF (4096) bytes whole, and cuts a longer one only when the
// reader has gone, after which nothing more is read anyway; on any other
// writer a cut line is ended with a newline, so the next line stands on
// its own.
type auditLog struct {
	mu   sync.Mutex // one Write per line, lines never interleaved
	w    io.Writer
	file *os.File // w, when it is a regular file: a cut line is truncated away
	buf  sync.Pool
	// run tells this process's ids from another's in the same log; seq
	// numbers its decisions.
	run string
	seq atomic.Uint64
	// tee, when set, is given each decision's line after w took it
	// (Config.AuditTee).
	tee func(sandbox string, line []byte) error
}

func newAuditLog(w io.Writer, tee func(sandbox string, line []byte) error) *auditLog {
	l := &auditLog{w: w, tee: tee, buf: sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			l.file = f
		}
	}
	var r [4]byte
	rand.Read(r[:])
	l.run = hex.EncodeToString(r[:])
	return l
}

// admit writes an allowed decision's line before anything is dialled for
// it: no connection leaves that is not on record. When the line cannot be
// written the decision becomes a denial (503 audit_unavailable), unless the
// operator chose --audit-failure=warn. admit reports whether dc still
// allows; a caller that gets false answers dc's denial.
func (p *Proxy) admit(dc *decision) bool {
	if !dc.d.Allow {
		return false
	}
	err := p.writeLine(dc, AuditMessage, 0, 0, 0)
	var tee *teeError
	if err == nil || errors.As(err, &tee) {
		// In the log (its tee may have failed): whatever follows is
		// its close line, not a second decision line of the same id.
		dc.announced = true
		if dc.cc != nil {
			dc.cc.opened(dc)
		}
	}
	if err == nil {
		return true
	}
	if p.cfg.AuditFailOpen {
		return true // its outcome is tried as a decision line at the end
	}
	dc.deny(policies.ReasonAuditUnavailable, "audit log write failed: "+errnoText(err))
	return false
}

// teeError is a line the log took and its tee did not.
type teeError struct{ err error }

func (e *teeError) Error() string { return "audit tee: " + e.err.Error() }
func (e *teeError) Unwrap() error { return e.err }

// errnoText is the system's word for err (no space left on device, broken
// pipe), without the audit log's path, which a denial must not show the
// sandbox.
func errnoText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return "write error"
}

// record writes dc's last line and counts it: the close line of an
// admitted decision, or else the decision line of one that ends where it is
// decided (a denial). Query values and secrets never appear: the path is
// the canonical path without its query, and injected headers are named by
// the rule, not shown; secrets masked in the response are counted
// (secret_scrubbed).
func (p *Proxy) record(dc *decision, status int, up, down int64) {
	msg := AuditMessage
	if dc.announced {
		msg = AuditCloseMessage
		if dc.cc != nil {
			dc.cc.closed(dc)
		}
	}
	p.writeLine(dc, msg, status, up, down)
	p.cfg.Metrics.countDecision(dc.in.Sandbox.ID, verdict(dc), string(dc.d.Reason))
	p.cfg.Metrics.addBytes(dc.in.Sandbox.ID, up, down)
	p.cfg.Metrics.countScrubbed(dc.in.Sandbox.ID, dc.scrub.scrubbed())
}

// endOpen writes the close line of every decision of cc admitted and not
// yet closed, when a fault (a panic, recovered) ends its serving: the
// admit line said a connection was made, and the log must say it ended.
// What it moved is not known then.
func (p *Proxy) endOpen(cc *clientConn, fault any) {
	cc.openMu.Lock()
	open := cc.open
	cc.open = nil
	cc.openMu.Unlock()
	for _, dc := range open {
		dc.detail = dc.scrubbed(fmt.Sprintf("ended by a fault in the proxy (bytes not counted): %v", fault))
		p.record(dc, 0, 0, 0)
	}
}

func verdict(dc *decision) string {
	if dc.d.Allow {
		return "allow"
	}
	return "deny"
}

// writeLine writes one line; a failure is counted and logged on stderr
// with what the line was about.
func (p *Proxy) writeLine(dc *decision, msg string, status int, up, down int64) error {
	err := p.audit.write(dc, msg, status, up, down)
	if err != nil {
		p.cfg.Metrics.auditFailed()
		p.log.Error("audit log write failed", "err", err, "line", msg, "id", p.audit.id(dc),
			"sandbox", dc.in.Sandbox.ID, "host", dc.in.Request.Host, "port", dc.in.Request.Port,
			"decision", verdict(dc), "reason", string(dc.d.Reason), "fail_open", p.cfg.AuditFailOpen)
	}
	return err
}

// id is dc's audit id, given on its first line.
func (l *auditLog) id(dc *decision) string {
	return string(l.appendID(nil, dc))
}

func (l *auditLog) appendID(b []byte, dc *decision) []byte {
	if dc.id == 0 {
		dc.id = l.seq.Add(1)
	}
	b = append(b, l.run...)
	b = append(b, '-')
	return strconv.AppendUint(b, dc.id, 10)
}

func (l *auditLog) write(dc *decision, msg string, status int, up, down int64) error {
	level := "WARN"
	if dc.d.Allow {
		level = "INFO"
	}
	r := &dc.in.Request
	bp := l.buf.Get().(*[]byte)
	b := l.appendHead((*bp)[:0], level, msg)
	b = l.appendID(b, dc)
	b = append(b, '"')
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
	b = jsonString(b, "decision", verdict(dc))
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
		b = jsonString(b, "detail", dc.scrubbed(dc.detail))
	}
	if n := dc.scrub.scrubbed(); n > 0 {
		b = jsonInt(b, "secret_scrubbed", n)
	}
	if dc.count > 0 {
		b = jsonInt(b, "count", dc.count)
	}
	if dc.transparent {
		// Not a CONNECT nor a proxy request: a connection the redirect
		// brought, decided as its destination.
		b = jsonString(b, "via", "transparent")
	}
	return l.finish(bp, b, dc.in.Sandbox.ID)
}

// appendHead begins a line: its time, level and message, up to its id's
// value.
func (l *auditLog) appendHead(b []byte, level, msg string) []byte {
	b = append(b, `{"time":"`...)
	b = time.Now().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"`...)
	b = append(b, level...)
	b = append(b, `","msg":"`...)
	b = append(b, msg...)
	return append(b, `","id":"`...)
}

// finish ends the line in b, the decision of sandbox (a pod's DNS
// answerer's: ""), writes it (put) and its tee, and gives the buffer back
// to the pool, unless it grew outsized.
func (l *auditLog) finish(bp *[]byte, b []byte, sandbox string) error {
	b = append(b, "}\n"...)
	err := l.put(b)
	if err == nil && l.tee != nil && sandbox != "" {
		// A line its tee cannot take fails as one the log cannot: an
		// allowed decision is then refused (admit), never left off the
		// record its sandbox's owner reads.
		if terr := l.tee(sandbox, b); terr != nil {
			err = &teeError{terr}
		}
	}
	if cap(b) <= 64<<10 {
		*bp = b
		l.buf.Put(bp)
	}
	return err
}

// put writes one line whole or not at all (see auditLog).
func (l *auditLog) put(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.w.Write(b)
	if err == nil || n == 0 || n >= len(b) {
		return err
	}
	if l.file != nil {
		// O_APPEND left the offset at the end of the n bytes written.
		end, serr := l.file.Seek(0, io.SeekCurrent)
		if serr == nil {
			serr = l.file.Truncate(end - int64(n))
		}
		if serr != nil {
			return fmt.Errorf("%w; the %d bytes written of the line could not be removed: %v", err, n, serr)
		}
		return err
	}
	l.w.Write([]byte{'\n'})
	return err
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
