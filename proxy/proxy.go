package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/origdst"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy/certs"
	"github.com/airlock-sandbox/airlock/proxy/egress"
	"github.com/airlock-sandbox/airlock/proxy/fakedns"
	"github.com/airlock-sandbox/airlock/proxy/identity"
	"github.com/airlock-sandbox/airlock/proxy/relay"
	"github.com/elazarl/goproxy"
	"github.com/vishvananda/netns"
)

// Sandbox is what one listener serves: every connection accepted on it is
// attributed to this sandbox and decided by its preset.
type Sandbox struct {
	ID     string
	Kind   string
	Preset string
	// Candidates are the processes that may own the sandbox's connections
	// (its cgroup, its process tree; identity.AllProcesses for host
	// clients).
	Candidates identity.Candidates
	// NetNS is the network namespace the listener lives in; sock_diag is
	// asked there. netns.None() means the proxy's own namespace.
	NetNS netns.NsHandle
	// Hook, when set, names the connecting process of each socket (the
	// cgroup connect hook): lookups cost O(1) instead of a scan.
	Hook identity.ConnHook
	// Route, when set, makes the listener a pod's, shared by its
	// services: each connection is decided as the service Route names
	// for its process (by its cgroup, ByCgroup), with that service's ID,
	// kind and preset. A process Route cannot place (in no service's
	// cgroup) is denied, identity_unknown, with Route's error as the
	// detail. Preset may then be empty.
	Route func(p *identity.Process) (Service, error)
	// Reachable reports whether any rule of the sandbox's preset(s) could
	// reach a canonical host (policies.Engine.Reachable): the DNS answerer
	// says NXDOMAIN for names it rejects. nil: every name resolves (the
	// connection is still decided).
	Reachable func(host string) bool
	// Names maps the synthetic addresses the sandbox's DNS answered with
	// back to their names, for the transparent listener
	// (ServeTransparent). nil: every destination is decided as its
	// literal address.
	Names NameMap
}

// Limits bound what one client can hold.
type Limits struct {
	MaxConns          int           // concurrent connections per listener
	MaxHeaderBytes    int           // request header size
	ReadHeaderTimeout time.Duration // slowloris guard
	IdleTimeout       time.Duration // idle keep-alive connections
	HandshakeTimeout  time.Duration // TLS handshakes, both sides
	TunnelIdleTimeout time.Duration // opaque tunnels that move no data
	// WriteTimeout cuts a plain or inspected client that accepts none of
	// a response for this long (stallConn).
	WriteTimeout time.Duration
	// UpstreamHeaderTimeout is how long an upstream may take to start
	// its answer once the request is sent.
	UpstreamHeaderTimeout time.Duration
}

// DefaultLimits are used for zero fields.
var DefaultLimits = Limits{
	MaxConns:          1024,
	MaxHeaderBytes:    64 << 10,
	ReadHeaderTimeout: 10 * time.Second,
	IdleTimeout:       2 * time.Minute,
	HandshakeTimeout:  10 * time.Second,
	TunnelIdleTimeout: 10 * time.Minute,
	// nginx's send_timeout: long enough for a client busy between reads,
	// short enough that stalled ones do not pile up.
	WriteTimeout:          time.Minute,
	UpstreamHeaderTimeout: 5 * time.Minute,
}

// Config configures a Proxy.
type Config struct {
	Decider policies.Decider
	// CA signs leaves for inspected hosts.
	CA *certs.CA
	// Guard resolves and dials upstreams (SSRF guard).
	Guard *egress.Guard
	// UpstreamRoots verify upstream TLS: system roots plus operator CAs.
	// nil means the system roots.
	UpstreamRoots *x509.CertPool
	// Secrets resolves the credentials the policy injects.
	Secrets SecretSource
	// Audit receives the JSON decision and close lines; nil discards.
	Audit io.Writer
	// AuditFailOpen serves a decision whose audit line cannot be written
	// (--audit-failure=warn); by default it is refused, 503
	// audit_unavailable, and nothing is dialled for it.
	AuditFailOpen bool
	// AuditTee, when set, is given each decision line after Audit took
	// it, with the sandbox it is of: a pod copies a one-off sandbox's
	// lines to its owner's file. Its error fails the line as Audit's
	// would (an allowed decision becomes audit_unavailable).
	AuditTee func(sandbox string, line []byte) error
	// Metrics, nil for none.
	Metrics *Metrics
	Limits  Limits
	Logger  *slog.Logger
}

// Proxy is the L7 egress proxy. One Proxy serves any number of listeners,
// each bound to one sandbox.
type Proxy struct {
	cfg       Config
	log       *slog.Logger
	audit     *auditLog
	transport *upstreamTransport
	// relays copy opaque tunnels' bytes (proxy/relay).
	relays *relay.Loops
	// forced ends when Shutdown's grace has run out: tunnels on the
	// relay loops end then, as hijacked connections are closed, and
	// upstream dials still under way.
	forced context.Context
	force  context.CancelFunc
	// sendPlain is goproxy's round trip for plain requests: transport.
	sendPlain goproxy.RoundTripper
	hashes    *identity.HashCache
	// closeAudit closes the audit file Build opened; nil for a Proxy
	// made with New, whose caller owns its writer.
	closeAudit func() error
	// origin is the source and destination a transparent connection's
	// client sent it from and to: redirected, except in tests that stand
	// in for the redirect.
	origin func(st *sandboxState, local, remote netip.AddrPort) (src, dst netip.AddrPort, err error)
	// checkOrigin refuses a transparent listener whose connections origin
	// cannot answer for: checkConntrack, except in those tests.
	checkOrigin func(st *sandboxState) error

	mu       sync.Mutex
	servers  map[*http.Server]struct{}
	tunnels  sync.WaitGroup
	hijacked map[net.Conn]*tracked
	dns      map[*fakedns.Server]struct{}
	// closing is set, under mu, once Shutdown has begun; awaitRequest
	// reads it on every inspected request without taking mu.
	closing atomic.Bool
	// conns counts the explicit listeners' connections that their
	// http.Server serves (not yet closed or taken over), under mu;
	// drained, when set, is closed when it falls to 0 (Shutdown).
	conns   int
	drained chan struct{}
	// sandboxes counts those open (Open): each may hold its --max-conns.
	sandboxes int
}

// tracked is a hijacked client connection that Shutdown drains.
type tracked struct {
	conn net.Conn
	// idle: an inspected tunnel waiting for its next request, which
	// Shutdown closes at once (as http.Server closes idle connections)
	// instead of waiting out the grace period for a request that may
	// never come.
	idle atomic.Bool
}

// New builds a Proxy. Upstream connections never consult HTTP(S)_PROXY: the
// proxy is started with the agent's environment in some setups, and reading
// it would loop back to itself.
func New(cfg Config) (*Proxy, error) {
	if cfg.Decider == nil || cfg.CA == nil || cfg.Guard == nil {
		return nil, errors.New("proxy: Decider, CA and Guard are required")
	}
	fillLimits(&cfg.Limits)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Audit == nil {
		cfg.Audit = io.Discard
	}
	if cfg.Secrets == nil {
		cfg.Secrets = EnvSecrets{}
	}
	p := &Proxy{
		cfg:         cfg,
		log:         cfg.Logger,
		audit:       newAuditLog(cfg.Audit, cfg.AuditTee),
		hashes:      identity.NewHashCache(1024),
		servers:     map[*http.Server]struct{}{},
		hijacked:    map[net.Conn]*tracked{},
		dns:         map[*fakedns.Server]struct{}{},
		origin:      redirected,
		checkOrigin: checkConntrack,
	}
	p.transport = newUpstreamTransport(&http.Transport{
		Proxy:       nil,
		DialContext: cfg.Guard.DialContext,
		TLSClientConfig: &tls.Config{
			RootCAs:    cfg.UpstreamRoots,
			NextProtos: []string{"http/1.1"},
			MinVersion: tls.VersionTLS12,
		},
		ForceAttemptHTTP2:     false,
		TLSHandshakeTimeout:   cfg.Limits.HandshakeTimeout,
		ResponseHeaderTimeout: cfg.Limits.UpstreamHeaderTimeout,
		// Expect: 100-continue is honoured upstream: the body is sent
		// once the origin asks for it, or after this long without a word.
		ExpectContinueTimeout: time.Second,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true, // pass encodings through untouched
	})
	p.sendPlain = goproxy.RoundTripperFunc(func(req *http.Request, _ *goproxy.ProxyCtx) (*http.Response, error) {
		return p.transport.RoundTrip(req)
	})
	relays, err := relay.Start(0)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	p.relays = relays
	p.forced, p.force = context.WithCancel(context.Background())
	// Before anything listens: short of descriptors, connections would
	// fail (as identity_unknown) before --max-conns is reached. Serve
	// checks again as further sandboxes are served.
	if err := p.checkFDs(1); err != nil {
		return nil, err
	}
	return p, nil
}

// checkFDs warns when sandboxes sandboxes at their --max-conns may need
// more descriptors than RLIMIT_NOFILE allows (EnsureFDs).
func (p *Proxy) checkFDs(sandboxes int) error {
	warning, err := EnsureFDs(p.cfg.Limits.MaxConns, sandboxes)
	if warning != "" {
		p.log.Warn(warning)
	}
	return err
}

func fillLimits(l *Limits) {
	d := DefaultLimits
	orDefault(&l.MaxConns, d.MaxConns)
	orDefault(&l.MaxHeaderBytes, d.MaxHeaderBytes)
	orDefault(&l.ReadHeaderTimeout, d.ReadHeaderTimeout)
	orDefault(&l.IdleTimeout, d.IdleTimeout)
	orDefault(&l.HandshakeTimeout, d.HandshakeTimeout)
	orDefault(&l.TunnelIdleTimeout, d.TunnelIdleTimeout)
	orDefault(&l.WriteTimeout, d.WriteTimeout)
	orDefault(&l.UpstreamHeaderTimeout, d.UpstreamHeaderTimeout)
}

func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

type ctxKey struct{}

// Egress is one sandbox as the proxy serves it. Its listeners (the
// explicit proxy's, the transparent ones) share its identity resolver and
// its --max-conns: a sandbox holds as many connections whichever way its
// programs leave.
type Egress struct {
	p         *Proxy
	st        *sandboxState
	closeOnce sync.Once
}

// Open readies sb to be served on one or more listeners. Close it once
// they have stopped.
func (p *Proxy) Open(sb Sandbox) (*Egress, error) {
	st, err := p.newSandboxState(sb)
	if err != nil {
		return nil, err
	}
	e := &Egress{p: p, st: st}
	p.mu.Lock()
	p.sandboxes++
	n := p.sandboxes
	p.mu.Unlock()
	// Every sandbox served at once may hold its --max-conns; New checked
	// for the first.
	if n > 1 {
		if err := p.checkFDs(n); err != nil {
			e.Close()
			return nil, fmt.Errorf("proxy: sandbox %s: %w", sb.ID, err)
		}
	}
	return e, nil
}

// Close releases the sandbox's identity resolver and conntrack socket.
func (e *Egress) Close() {
	e.closeOnce.Do(func() {
		e.st.resolver.Close()
		e.st.conntrack.Close()
		e.p.mu.Lock()
		e.p.sandboxes--
		e.p.mu.Unlock()
	})
}

// Serve accepts explicit proxy connections on ln until Shutdown. The
// listener may live in another network namespace (created there by the
// launcher); upstream dials happen from the proxy's namespace.
func (e *Egress) Serve(ln net.Listener) error {
	p, st, sb := e.p, e.st, e.st.Sandbox

	gp := goproxy.NewProxyHttpServer()
	gp.Logger = log.New(io.Discard, "", 0)
	gp.Tr = unusedTransport // handlePlain sends through p.transport
	gp.ConnectDial = nil    // never used: CONNECT is served before goproxy
	gp.KeepHeader = false   // strip Proxy-Authorization upstream
	// Accept-Encoding passes, as in an inspected tunnel: dropped, the
	// identity an injected secret's request asks for (inject) would be
	// lost, and the upstream free to compress what the scrubber must read.
	gp.KeepAcceptEncoding = true
	gp.OnRequest().DoFunc(p.handlePlain)
	gp.OnResponse().DoFunc(p.handlePlainResponse)

	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			cc := connFrom(r.Context())
			cc.handled.Store(true) // ours to answer and audit
			defer p.endOnPanic(cc)
			if why := cc.conn.frames.next(); why != "" {
				p.refuseFraming(w, r, why)
				return
			}
			switch {
			case r.Method == http.MethodConnect:
				p.serveConnect(w, r)
			case strings.EqualFold(r.Method, http.MethodConnect):
				// Another spelling, in absolute form: forwarded, it would
				// go out a CONNECT (methods are upper-cased), and an
				// upstream would take what follows its head for a tunnel
				// or the next request, which nothing decided.
				p.refuseFraming(w, r, fmt.Sprintf("the method %q is a CONNECT, which is asked of the proxy itself (CONNECT host:port), never forwarded", r.Method))
			case !r.URL.IsAbs():
				p.nonProxy(w, r)
			case hopByHop(r.Header):
				p.plainUpgrade(w, r)
			default:
				sw := &streamWriter{ResponseWriter: w, length: -1}
				gp.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), streamKey{}, sw)))
				abortIfTruncated(sw.body)
			}
		}),
		// Every request reaches the handler, "OPTIONS *" too: each takes
		// its header's framing verdict in turn (frameTracker).
		DisableGeneralOptionsHandler: true,
		MaxHeaderBytes:               p.cfg.Limits.MaxHeaderBytes,
		ReadHeaderTimeout:            p.cfg.Limits.ReadHeaderTimeout,
		IdleTimeout:                  p.cfg.Limits.IdleTimeout,
		ErrorLog:                     log.New(io.Discard, "", 0),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			// The owner is looked up when the first request is decided:
			// the client is then waiting on its socket, and with the
			// process cache a lookup costs less than a goroutine to
			// overlap it with reading the request.
			return context.WithValue(ctx, ctxKey{}, c.(*servedConn).cc)
		},
		// limitListener took the slot; a hijacked connection's tunnel
		// releases it when it ends.
		ConnState: func(c net.Conn, s http.ConnState) {
			serverStateHook(c, s)
			switch s {
			case http.StateNew:
				p.serving(1)
			case http.StateClosed:
				st.active.Add(-1)
				p.serving(-1)
			case http.StateHijacked:
				p.serving(-1) // tracked from now on (p.track)
			}
		},
	}
	if err := p.register(srv); err != nil {
		return err
	}
	p.log.Info("proxy serving", "sandbox", sb.ID, "kind", sb.Kind, "preset", sb.Preset, "pod", sb.Route != nil, "listen", ln.Addr().String())
	err := srv.Serve(&limitListener{Listener: ln, p: p, st: st})
	p.recordFlood(st) // what the last interval counted
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// newSandboxState checks sb and opens its identity resolver, which
// Egress.Close closes.
func (p *Proxy) newSandboxState(sb Sandbox) (*sandboxState, error) {
	if sb.Preset == "" && sb.Route == nil {
		return nil, fmt.Errorf("proxy: sandbox %s has no preset", sb.ID)
	}
	if sb.Candidates == nil {
		return nil, fmt.Errorf("proxy: sandbox %s has no candidate processes", sb.ID)
	}
	resolver, err := identity.NewResolver(sb.NetNS, sb.Candidates, p.hashes)
	if err != nil {
		return nil, fmt.Errorf("proxy: sandbox %s: %w", sb.ID, err)
	}
	if sb.Hook != nil {
		resolver.WithConnHook(sb.Hook)
	}
	if sb.Route != nil {
		resolver.WithCgroups()
	}
	table, err := origdst.OpenTable(sb.NetNS)
	if err != nil {
		resolver.Close()
		return nil, fmt.Errorf("proxy: sandbox %s: %w", sb.ID, err)
	}
	return &sandboxState{Sandbox: sb, resolver: resolver, conntrack: table}, nil
}

// register adds a listener's server to those Shutdown stops, unless
// Shutdown has begun (http.ErrServerClosed).
func (p *Proxy) register(srv *http.Server) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing.Load() {
		return http.ErrServerClosed
	}
	p.servers[srv] = struct{}{}
	return nil
}

// Shutdown stops accepting, lets requests and tunnels in flight finish
// until ctx ends, then closes what is left.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closing.Store(true)
	servers := make([]*http.Server, 0, len(p.servers))
	for s := range p.servers {
		servers = append(servers, s)
	}
	for _, t := range p.hijacked {
		if t.idle.Load() {
			t.conn.Close()
		}
	}
	answerers := make([]*fakedns.Server, 0, len(p.dns))
	for s := range p.dns {
		answerers = append(answerers, s)
	}
	p.mu.Unlock()
	var errs []error
	for _, s := range servers {
		errs = append(errs, s.Shutdown(ctx))
	}
	for _, s := range answerers {
		errs = append(errs, s.Shutdown(ctx))
	}
	done := make(chan struct{})
	go func() { p.tunnels.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		p.mu.Lock()
		for c := range p.hijacked {
			c.Close()
		}
		p.mu.Unlock()
		p.force()
		<-done
	}
	if ctx.Err() != nil {
		// The grace ran out (here or in a server's Shutdown): plain
		// requests in flight are on the servers' own connections, which
		// their Shutdown leaves open. Closed, their handlers end, each
		// with its close line, before Shutdown returns.
		for _, s := range servers {
			s.Close()
		}
		errs = append(errs, ctx.Err(), p.awaitConns(connDrain))
	}
	p.transport.CloseIdleConnections()
	p.relays.Stop()
	return errors.Join(errs...)
}

// serving counts the explicit listeners' connections in their servers'
// hands (ConnState).
func (p *Proxy) serving(delta int) {
	p.mu.Lock()
	if p.conns += delta; p.conns == 0 && p.drained != nil {
		close(p.drained)
		p.drained = nil
	}
	p.mu.Unlock()
}

// connDrain is how long Shutdown waits, once it closed them, for the
// servers' connections to be done with: each ends its request's handler
// (a closed client connection cancels its upstream request too), writes
// its close line and gives its slot back, at once.
const connDrain = 5 * time.Second

// awaitConns waits up to d for the servers' connections to be done with.
func (p *Proxy) awaitConns(d time.Duration) error {
	p.mu.Lock()
	if p.conns == 0 {
		p.mu.Unlock()
		return nil
	}
	drained := make(chan struct{})
	p.drained = drained
	p.mu.Unlock()
	select {
	case <-drained:
		return nil
	case <-time.After(d):
		p.mu.Lock()
		defer p.mu.Unlock()
		return fmt.Errorf("proxy: %d connections still being served %v after they were closed", p.conns, d)
	}
}

// endOnPanic, deferred by a handler, ends the connection's admitted
// decisions on record (endOpen) when the handler panics, and panics on:
// net/http's server ends the connection, as it ends any handler's.
func (p *Proxy) endOnPanic(cc *clientConn) {
	if r := recover(); r != nil {
		p.endOpen(cc, r)
		panic(r)
	}
}

// shuttingDown is the audit detail of a connection taken over too late.
const shuttingDown = "not started: the proxy is shutting down"

// track registers a hijacked client connection so Shutdown can drain it;
// release unregisters it. Once Shutdown has begun it closes c and returns
// a nil t.
func (p *Proxy) track(c net.Conn) (t *tracked, release func()) {
	t = &tracked{conn: c}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing.Load() {
		// Taken over after Shutdown began, which may already be done
		// waiting: closed, and nil tells the caller to start nothing.
		c.Close()
		return nil, func() {}
	}
	p.tunnels.Add(1)
	p.hijacked[c] = t
	return t, func() {
		p.mu.Lock()
		delete(p.hijacked, c)
		p.mu.Unlock()
		p.tunnels.Done()
	}
}

// awaitRequest marks t idle until the next request's first byte arrives on
// br. It reports false, without waiting, once Shutdown has begun: idle is
// set before closing is read, and Shutdown sets closing before it reads
// idle (both atomics), so one of the two always sees the other.
func (p *Proxy) awaitRequest(t *tracked, br *bufio.Reader) bool {
	t.idle.Store(true)
	defer t.idle.Store(false)
	if p.closing.Load() {
		return false
	}
	_, err := br.Peek(1)
	return err == nil
}

func (p *Proxy) nonProxy(w http.ResponseWriter, r *http.Request) {
	const why = "this is airlock's egress proxy; send absolute-form (GET http://host/path) or CONNECT requests"
	p.refuseClosing(w, r, p.malformed(connFrom(r.Context()), policies.Request{Phase: policies.PhaseRequest, Method: r.Method}, "origin-form request: "+why))
}

// CACert is the PEM certificate clients must trust for inspected hosts.
func (p *Proxy) CACert() []byte { return p.cfg.CA.CertPEM }

// addrPort converts a net.Addr of a TCP connection.
func addrPort(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		ap := t.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}
