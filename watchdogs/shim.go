package watchdogs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"time"
)

// Shim fault kinds, as the inbox lines name them.
const (
	KindShimDead = "shim_dead"
	KindShimHung = "shim_hung"
)

// ShimProbe asks the model shim for its model list, as a client would.
// Any HTTP answer, even an error status, means the process is alive and
// serving: a shim whose upstream refuses it answers 502, and restarting it
// would not help. No connection is dead; a connection that gets no answer
// in Timeout is a strike toward hung (a SIGSTOPped process still has its
// listening socket, and the kernel completes the handshake for it).
type ShimProbe struct {
	URL     string
	Timeout time.Duration
	client  *http.Client
}

// NewShimProbe returns a probe of url (http://127.0.0.1:PORT/v1/models).
func NewShimProbe(url string, timeout time.Duration) *ShimProbe {
	return &ShimProbe{URL: url, Timeout: timeout, client: &http.Client{
		// Never through HTTP_PROXY: the shim is on this host. A fresh
		// connection each time: a kept one would outlive the process.
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
		// A redirect is an answer: the shim is alive.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Probe implements Probe.
func (p *ShimProbe) Probe(ctx context.Context) Finding {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
	if err != nil {
		return Finding{Kind: KindShimDead, Detail: fmt.Sprintf("GET %s: %v", p.URL, err)}
	}
	resp, err := p.client.Do(req)
	if err == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		return Finding{}
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		return Finding{Kind: KindShimHung, Strike: true, Detail: fmt.Sprintf("GET %s: no answer in %v", p.URL, p.Timeout)}
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return Finding{Kind: KindShimDead, Detail: fmt.Sprintf("GET %s: connection refused: nothing listens on its port", p.URL)}
	}
	return Finding{Kind: KindShimDead, Detail: fmt.Sprintf("GET %s: %v", p.URL, err)}
}
