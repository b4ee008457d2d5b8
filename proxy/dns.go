package proxy

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/clip"
	"github.com/airlock-sandbox/airlock/internal/flood"
	"github.com/airlock-sandbox/airlock/proxy/fakedns"
)

// DNSAuditMessage is the message of the line written for each DNS query
// the sandbox's answerer refuses (NXDOMAIN, REFUSED). An address it hands
// out has no line of its own: the connection made to it is decided and
// audited as any other.
const DNSAuditMessage = "CANONICAL-PROXY-DNS"

// ServeDNS answers sandbox sb's DNS queries on packets (UDP) and streams
// (TCP) with addresses from pool (fakedns.Server) until Shutdown, and
// closes them when it returns. Nothing is forwarded. Names sb.Reachable
// rejects get NXDOMAIN. Each refusal is written to the audit log before it
// is sent and, as for a connection, one whose line cannot be written gets
// SERVFAIL instead, unless AuditFailOpen; past maxDNSLines in a
// dnsFloodInterval they are summed up instead (flood.Counter). Replies are
// counted by rcode.
func (p *Proxy) ServeDNS(sb Sandbox, pool *fakedns.Pool, packets []net.PacketConn, streams []net.Listener) error {
	refusals := &flood.Counter[dnsFloodKey]{Interval: dnsFloodInterval, Max: maxDNSLines, Summarise: func(k dnsFloodKey, n int64) {
		p.auditDNS(&sb, &fakedns.Refusal{Rcode: k.rcode, Reason: k.reason, Detail: fmt.Sprintf(
			"%d refusals beyond %d within %s not written one by one", n, maxDNSLines, dnsFloodInterval)}, n)
	}}
	defer refusals.Flush() // Serve has returned: no refusal comes after it
	srv, err := fakedns.NewServer(fakedns.ServerConfig{
		Pool:      pool,
		Reachable: sb.Reachable,
		Refused: func(r fakedns.Refusal) error {
			write, err := refusals.Admit(dnsFloodKey{r.Rcode, r.Reason})
			if !write {
				return err // on record in the summary line, if the log writes
			}
			err = p.auditDNS(&sb, &r, 0)
			refusals.Wrote(err)
			return err
		},
		Answered: func(rcode string) { p.cfg.Metrics.countDNS(sb.ID, rcode) },
	})
	if err != nil {
		return fmt.Errorf("proxy: sandbox %s: %w", sb.ID, err)
	}
	p.mu.Lock()
	if p.closing.Load() {
		// Serve then closes the sockets and says the server is closed.
		srv.Shutdown(context.Background())
	}
	p.dns[srv] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.dns, srv)
		p.mu.Unlock()
	}()
	var addrs []string
	for _, pc := range packets {
		addrs = append(addrs, "udp "+pc.LocalAddr().String())
	}
	for _, ln := range streams {
		addrs = append(addrs, "tcp "+ln.Addr().String())
	}
	p.log.Info("proxy answering DNS", "sandbox", sb.ID, "kind", sb.Kind, "preset", sb.Preset, "listen", addrs)
	return srv.Serve(packets, streams)
}

// maxDNSName is as much of a refused name as its line holds: the longest
// name DNS carries, 253 bytes, as read.
const maxDNSName = 256

// auditDNS writes a refusal's line or, with count > 0, the line summing up
// count refusals of a flood (no name nor query type: they were many). A
// line that cannot be written is counted and logged on stderr; its error
// refuses the answer unless the operator chose --audit-failure=warn.
func (p *Proxy) auditDNS(sb *Sandbox, r *fakedns.Refusal, count int64) error {
	l := p.audit
	bp := l.buf.Get().(*[]byte)
	b := l.appendHead((*bp)[:0], "WARN", DNSAuditMessage)
	b = append(b, l.run...)
	b = append(b, '-')
	b = strconv.AppendUint(b, l.seq.Add(1), 10)
	b = append(b, '"')
	b = jsonString(b, "sandbox", sb.ID)
	if sb.Kind != "" {
		b = jsonString(b, "kind", sb.Kind)
	}
	if sb.Preset != "" { // a pod's answerer speaks for all its services
		b = jsonString(b, "preset", sb.Preset)
	}
	// The name is the sandbox's to choose, and a name that cannot be
	// read is quoted again in the detail: each escaping multiplies its
	// bytes, and a refusal's line, up to 64 a second, must stay small.
	if count == 0 {
		b = jsonString(b, "name", clip.String(r.Name, maxDNSName))
		b = jsonString(b, "qtype", r.QType)
	}
	b = jsonString(b, "rcode", r.Rcode)
	b = jsonString(b, "reason", string(r.Reason))
	b = jsonString(b, "detail", clip.String(r.Detail, 2*maxDNSName))
	if count > 0 {
		b = jsonInt(b, "count", count)
	}
	err := l.finish(bp, b, "")
	if err == nil {
		return nil
	}
	p.cfg.Metrics.auditFailed()
	p.log.Error("audit log write failed", "err", err, "line", DNSAuditMessage, "sandbox", sb.ID,
		"name", r.Name, "qtype", r.QType, "rcode", r.Rcode, "reason", string(r.Reason), "count", count, "fail_open", p.cfg.AuditFailOpen)
	if p.cfg.AuditFailOpen {
		return nil
	}
	return err
}
