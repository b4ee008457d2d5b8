package watchdogs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/adminclient"
)

// Shim fault kinds, as the inbox lines name them.
const (
	KindShimDead = "shim_dead"
	KindShimHung = "shim_hung"
)

// KindUnobservable is a blind round's kind (any watchdog's): what it looks
// at cannot be read (the pod's admin socket, a log, a cgroup); nothing is
// restarted.
const KindUnobservable = "unobservable"

// HTTPProbe asks a service for a page, as a client would (the shim for its
// model list, the gateway for its health). Any HTTP answer, even an error
// status, means the process is alive and serving: a shim whose upstream
// refuses it answers 502, and restarting it would not help. No connection
// is a Dead finding; a connection that gets no answer in Timeout is a
// strike toward Hung (a SIGSTOPped process still has its listening
// socket, and the kernel completes the handshake for it).
type HTTPProbe struct {
	URL        string
	Timeout    time.Duration
	Dead, Hung string // the findings' kinds
	client     *http.Client
}

// Dialer makes a probe's connections: nil dials from the host; a pod's
// services are on its own loopback, reached through its admin socket.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// NewHTTPProbe returns a probe of url (http://127.0.0.1:PORT/v1/models)
// whose findings are the kinds dead and hung.
func NewHTTPProbe(url string, timeout time.Duration, dead, hung string, dial Dialer) *HTTPProbe {
	return &HTTPProbe{URL: url, Timeout: timeout, Dead: dead, Hung: hung, client: &http.Client{
		// Never through HTTP_PROXY: the service is on this host or in
		// its pod. A fresh connection each time: a kept one would
		// outlive the process.
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true, DialContext: dial},
		// A redirect is an answer: the shim is alive.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Probe implements Probe.
func (p *HTTPProbe) Probe(ctx context.Context) Finding {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
	if err != nil {
		return Finding{Kind: p.Dead, Detail: fmt.Sprintf("GET %s: %v", p.URL, err)}
	}
	resp, err := p.client.Do(req)
	if err == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		return Finding{}
	}
	if errors.Is(err, adminclient.ErrNoPod) {
		return Finding{Kind: KindUnobservable, Blind: true, Detail: fmt.Sprintf("GET %s: %v", p.URL, err)}
	}
	// The pod refused to dial for the probe (a port no service declares,
	// a name where it wants an address): the service was not looked at,
	// and a restart would not make the pod dial it.
	var refused *adminclient.StatusError
	if errors.As(err, &refused) && refused.Status >= 400 && refused.Status < 500 {
		return Finding{Kind: KindUnobservable, Blind: true, Detail: fmt.Sprintf("GET %s: the pod refuses to dial it (is --url a port the service declares?): %v", p.URL, err)}
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		return Finding{Kind: p.Hung, Strike: true, Detail: fmt.Sprintf("GET %s: no answer in %v", p.URL, p.Timeout)}
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return Finding{Kind: p.Dead, Detail: fmt.Sprintf("GET %s: connection refused: nothing listens on its port", p.URL)}
	}
	return Finding{Kind: p.Dead, Detail: fmt.Sprintf("GET %s: %v", p.URL, err)}
}
