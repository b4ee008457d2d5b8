package supervisor

import (
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/airlock-sandbox/airlock/proxy/fakedns"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Egress is every way out of a proxy network n for a sandbox, on a proxy
// (a sandbox's, a pod's, or the listeners of `airlock proxy` beside a
// workload whose namespace someone else set up): the explicit proxy's
// listener, the transparent listeners the redirect leads every other TCP
// connection to, and the DNS answerer, whose synthetic addresses the
// transparent listeners map back to names. OpenEgress readies it, so that
// a failure is the caller's to refuse to start on; Serve serves it.
type Egress struct {
	px   *proxy.Proxy
	n    *sandbox.Network
	sb   proxy.Sandbox
	e    *proxy.Egress
	pool *fakedns.Pool
}

// OpenEgress readies the egress of n for sb on px.
func OpenEgress(px *proxy.Proxy, n *sandbox.Network, sb proxy.Sandbox) (*Egress, error) {
	g := &Egress{px: px, n: n}
	if len(n.DNSPackets)+len(n.DNSStreams) > 0 {
		var err error
		if g.pool, err = fakedns.NewPool(fakedns.PoolConfig{}); err != nil {
			return nil, fmt.Errorf("sandbox %s: DNS answerer: %w", sb.ID, err)
		}
		sb.Names = g.pool
	}
	e, err := px.Open(sb) // its errors name the sandbox
	if err != nil {
		return nil, err
	}
	g.e, g.sb = e, sb
	return g, nil
}

// Go serves the egress (Serve) in a goroutine of its own; the channel
// gets what Serve returns.
func (g *Egress) Go(failed func(error)) <-chan error {
	done := make(chan error, 1)
	go func() { done <- g.Serve(failed) }()
	return done
}

// Serve serves the egress until all of its ways out have ended (px's
// Shutdown: each returns nil), and returns the first error. failed is
// called at once with the first one to stop on its own: a way out has
// gone, and the caller need not wait for the others to learn it.
func (g *Egress) Serve(failed func(error)) error {
	defer g.e.Close()
	serves := []func() error{func() error { return g.e.Serve(g.n.Listener) }}
	if g.pool != nil {
		serves = append(serves, func() error { return g.px.ServeDNS(g.sb, g.pool, g.n.DNSPackets, g.n.DNSStreams) })
	}
	for _, ln := range g.n.Transparent {
		serves = append(serves, func() error { return g.e.ServeTransparent(ln) })
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, serve := range serves {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Started after Shutdown began: ended by it all the same.
			if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, fakedns.ErrServerClosed) {
				mu.Lock()
				isFirst := first == nil
				if isFirst {
					first = err
				}
				mu.Unlock()
				if isFirst {
					failed(err)
				}
			}
		}()
	}
	wg.Wait()
	return first
}
