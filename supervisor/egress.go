package supervisor

import (
	"errors"
	"net/http"
	"sync"

	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/airlock-sandbox/airlock/proxy/fakedns"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// ServeEgress serves every way out of the proxy network n for sb on px
// (a sandbox's, a pod's, or the listeners of `airlock proxy` beside a
// workload whose namespace someone else set up):
// the explicit proxy's listener, the transparent listeners the redirect
// leads every other TCP connection to, and the DNS answerer, whose
// synthetic addresses the transparent listeners map back to names. It
// returns when all of them have ended (px's Shutdown: each returns nil),
// with the first error. failed is called at once with the first one to stop on its own:
// a way out has gone, and the caller need not wait for the others to
// learn it.
func ServeEgress(px *proxy.Proxy, n *sandbox.Network, sb proxy.Sandbox, failed func(error)) error {
	var pool *fakedns.Pool
	if len(n.DNSPackets)+len(n.DNSStreams) > 0 {
		var err error
		if pool, err = fakedns.NewPool(fakedns.PoolConfig{}); err != nil {
			return err
		}
		sb.Names = pool
	}
	e, err := px.Open(sb)
	if err != nil {
		return err
	}
	defer e.Close()
	serves := []func() error{func() error { return e.Serve(n.Listener) }}
	if pool != nil {
		serves = append(serves, func() error { return px.ServeDNS(sb, pool, n.DNSPackets, n.DNSStreams) })
	}
	for _, ln := range n.Transparent {
		serves = append(serves, func() error { return e.ServeTransparent(ln) })
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
