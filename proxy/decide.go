package proxy

import (
	"context"
	"net/netip"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy/egress"
)

// decision is one question asked and answered, carried to the audit line.
type decision struct {
	in    policies.Input
	d     policies.Decision
	start time.Time
	// detail adds what the policy did not decide (SSRF range, upstream
	// error, host mismatch). It never holds secrets.
	detail string
	// addrs are the upstream addresses the SSRF guard checked: the only
	// ones dialled for this decision.
	addrs []netip.Addr
	// serverStatus is the status an HTTP server answers a request it
	// cannot read itself (400: its framing cannot be trusted; 431: its
	// header is too large); 0 for the reason's own.
	serverStatus int
	// scrub masks the injected secrets in the response; its count goes
	// to the audit line as secret_scrubbed.
	scrub *scrubber
	// id ties the decision's audit lines together; set by its first line.
	id uint64
	// announced: the decision line is written, and the outcome goes on a
	// close line (admit).
	announced bool
	// count is how many connections one line stands for (a flood
	// summary); 0 for one.
	count int64
	// transparent: the connection came through the transparent
	// listener, not as a CONNECT or proxy request.
	transparent bool
	// cc is the connection the decision is about; nil for a refusal at
	// accept (limitListener), which is never admitted.
	cc *clientConn
}

// upstreamContext lets the transport dial exactly dc's checked addresses,
// on connections no other program's requests use (poolOwner).
func (dc *decision) upstreamContext(ctx context.Context) context.Context {
	ctx = withOwner(ctx, poolOwner{dc.in.Sandbox, dc.in.Process.Exe, dc.in.Process.SHA256})
	return egress.WithChecked(ctx, dc.in.Request.Host, dc.in.Request.Port, dc.addrs)
}

// begin attributes the connection, to a process and the service it is
// decided as. An identity failure is a denial that never reaches the
// policy, in the listener's own name (a pod's listener: the pod's); ok
// reports whether the policy may be asked.
func (p *Proxy) begin(cc *clientConn, req policies.Request) (dc *decision, ok bool) {
	dc = &decision{start: time.Now(), transparent: cc.transparent, cc: cc}
	dc.in.Request = req
	proc, err := cc.identity(p.cfg.Metrics)
	if err != nil {
		dc.in.Sandbox = policies.Sandbox{ID: cc.sb.ID, Kind: cc.sb.Kind, Preset: cc.sb.Preset}
		dc.d = policies.Decision{Reason: identityReason(err), Preset: cc.sb.Preset}
		dc.detail = err.Error()
		return dc, false
	}
	dc.in.Sandbox = policies.Sandbox{ID: cc.svc.ID, Kind: cc.svc.Kind, Preset: cc.svc.Preset}
	dc.in.Process = policies.Process{PID: proc.PID, Exe: proc.Exe, SHA256: proc.SHA256}
	return dc, true
}

// listenerDenial is a denial made in the listener's own name, before the
// connection's owner is looked up, or where a lookup would answer for
// another socket than the client's (a refused connection's, a flood's).
func listenerDenial(st *sandboxState, req policies.Request, reason policies.Reason, detail string) *decision {
	dc := &decision{start: time.Now(), detail: detail}
	dc.in.Sandbox = policies.Sandbox{ID: st.ID, Kind: st.Kind, Preset: st.Preset}
	dc.in.Request = req
	dc.d = policies.Decision{Reason: reason, Preset: st.Preset}
	return dc
}

// refused is a denial the proxy makes without asking the policy (a request
// it cannot read, a host that differs from its tunnel). An identity failure
// still comes first: it is the reason the agent must see.
func (p *Proxy) refused(cc *clientConn, req policies.Request, reason policies.Reason, detail string) *decision {
	dc, ok := p.begin(cc, req)
	if ok {
		dc.d = policies.Decision{Reason: reason, Preset: dc.in.Sandbox.Preset}
		dc.detail = detail
	}
	return dc
}

// decide attributes the connection and asks the policy.
func (p *Proxy) decide(ctx context.Context, cc *clientConn, req policies.Request) *decision {
	dc, ok := p.begin(cc, req)
	if !ok {
		return dc
	}
	start := time.Now()
	dc.d = p.cfg.Decider.Decide(ctx, &dc.in)
	p.cfg.Metrics.observeEval(time.Since(start))
	if why := dc.d.Why(); why != "" {
		dc.detail = why
	}
	return dc
}

// deny turns an allowed decision into a denial the proxy made after the
// policy (SSRF, host mismatch, missing secret, upstream failure).
func (dc *decision) deny(reason policies.Reason, detail string) {
	dc.d.Allow, dc.d.Inspect, dc.d.Reason, dc.d.Inject = false, false, reason, nil
	dc.detail = dc.scrubbed(detail)
}

// scrubbed is s with the secrets injected into dc's request masked: an
// error of the upstream's (a header net/http could not parse) quotes its
// bytes, which may echo one, and the detail goes into the 403/502 body and
// the audit log.
func (dc *decision) scrubbed(s string) string {
	if dc.scrub == nil {
		return s
	}
	return dc.scrub.scrubString(s)
}
