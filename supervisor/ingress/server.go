package ingress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/flood"
)

// Route is one door: a host address that reaches one service's port
// inside the pod.
type Route struct {
	Name    string // route name in logs and audit lines
	Listen  string // host address, e.g. 127.0.0.1:18789
	Service string // service name inside the pod
	Port    int    // the service's port on 127.0.0.1 inside the pod
	Keys    *Keys
}

// Options are what the supervisor supplies.
type Options struct {
	// Dial dials inside the pod's network namespace. Required: the
	// service's 127.0.0.1 is the pod's, and a dialer of the host's would
	// reach whatever listens on the host's loopback instead.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Audit receives one CANONICAL-INGRESS JSON line per request, and
	// before it, for an allowed request, its CANONICAL-INGRESS-ADMIT line.
	// Required.
	Audit io.Writer
	// AuditFailOpen forwards an allowed request whose admit line cannot
	// be written (the pod's audit_failure: warn); otherwise it is refused
	// (503 ingress_audit_unavailable), never let in unrecorded.
	AuditFailOpen bool
	// Logger is for errors (a failed upstream, a failed audit write);
	// slog.Default() when nil.
	Logger *slog.Logger
	// KeysChanged, when set, is told when the route's key file changed:
	// n keys now admit, or err says why none does until it is mended.
	KeysChanged func(n int, err error)
	// MaxConns bounds the connections the route serves at once (0:
	// DefaultMaxConns). Anyone who reaches the port may open them, and
	// each holds a descriptor and a goroutine of the supervisor, which
	// serves the proxy and the admin socket too. With every slot taken, a
	// new connection evicts one on which no request has been admitted
	// with a valid key yet (nor is being checked), the oldest of the
	// source that holds the most of those: a client without a key
	// holding connections open with half a header cannot lock operators
	// out (connLimit). Evictions are summed up in one audit
	// line per interval (ReasonEvicted). Only when every slot is an
	// admitted connection (a keep-alive, a stream, a WebSocket) or one
	// being checked do more wait in the backlog.
	MaxConns int
}

// DefaultMaxConns is a route's MaxConns when none is given: the proxy's
// own default per sandbox.
const DefaultMaxConns = 1024

// Server timeouts. There is no write timeout and no read timeout: either
// would cut a server-sent event stream or a WebSocket, which may last as
// long as the operator's session.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10 // as the proxy's: anyone who reaches the port may send it
)

// Server serves one route.
type Server struct {
	route Route
	ln    *connLimit
	srv   *http.Server
	proxy *httputil.ReverseProxy
	// transport keeps idle connections into the pod; each holds the pod's
	// network namespace alive, so Shutdown closes them.
	transport *http.Transport
	audit     *auditLog
	failOpen  bool
	log       *slog.Logger
	// keys are what the key file held when last looked at
	// (currentKeys); reloadMu lets one request reload it.
	keys        atomic.Pointer[keySet]
	reloadMu    sync.Mutex
	keysChanged func(n int, err error)

	// stop cancels every request's context at Shutdown: that is what ends
	// a WebSocket, whose hijacked connection http.Server no longer tracks.
	stop context.CancelFunc
	// admitted are the allowed requests in flight, each ended (its
	// context cancelled) once its key no longer admits (revoke).
	admittedMu sync.Mutex
	admitted   map[*admission]struct{}
	// unkeyed counts the lines of refusals for want of a key.
	unkeyed *flood.Counter[string]
	// evicted counts the connections evicted (connLimit), summed up in
	// one line per interval and never written one by one.
	evicted *flood.Counter[string]
	// mu guards closed; reqs counts the handlers Shutdown waits for, so
	// that every audit line is written when it returns.
	mu     sync.Mutex
	closed bool
	reqs   sync.WaitGroup
}

// Listen checks the route and binds its address; Serve then serves it.
// The supervisor binds every route at boot, so that a taken address fails
// the boot before READY.
func Listen(r Route, o Options) (*Server, error) {
	if err := r.check(o); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", r.Listen)
	if err != nil {
		return nil, fmt.Errorf("ingress route %q: listen %s: %w", r.Name, r.Listen, err)
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("route", r.Name, "service", r.Service)
	base, stop := context.WithCancel(context.Background())
	s := &Server{route: r, audit: &auditLog{w: o.Audit}, failOpen: o.AuditFailOpen, log: logger, stop: stop, keysChanged: o.KeysChanged,
		admitted: map[*admission]struct{}{}}
	s.unkeyed = &flood.Counter[string]{Interval: refusalInterval, Max: refusalLines, Summarise: s.summarise(http.StatusUnauthorized)}
	s.evicted = &flood.Counter[string]{Interval: refusalInterval, Max: 0, Summarise: s.summarise(0)}
	s.ln = newConnLimit(ln, cmp.Or(o.MaxConns, DefaultMaxConns), func() { s.evicted.Admit(ReasonEvicted) })
	go s.watchKeys(base)
	s.keys.Store(&keySet{keys: r.Keys, stamp: r.Keys.stamp})
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		// "OPTIONS *" reaches the handler (a key, a line), not net/http's
		// own answer.
		DisableGeneralOptionsHandler: true,
		BaseContext:                  func(net.Listener) context.Context { return base },
		ConnContext:                  connContext,
		ErrorLog:                     slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	s.proxy = s.newProxy(o.Dial)
	return s, nil
}

// check refuses a route that could not authenticate, audit or reach its
// service, before anything is bound.
func (r Route) check(o Options) error {
	var errs []error
	if r.Name == "" {
		errs = append(errs, errors.New("no name"))
	}
	if r.Service == "" {
		errs = append(errs, errors.New("no service"))
	}
	if r.Port < 1 || r.Port > 65535 {
		errs = append(errs, fmt.Errorf("port %d is not 1-65535", r.Port))
	}
	if r.Keys.Len() == 0 {
		errs = append(errs, errors.New("no operator keys: there is no unauthenticated mode"))
	}
	if o.Dial == nil {
		errs = append(errs, errors.New("no dialer into the pod"))
	}
	if o.Audit == nil {
		errs = append(errs, errors.New("no audit log"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ingress route %q: %w", r.Name, err)
	}
	return nil
}

// Addr is the bound address (the port chosen when Listen asked for :0).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until Shutdown; it returns nil after Shutdown.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("ingress route %q on %s: %w", s.route.Name, s.route.Listen, err)
	}
	return nil
}

// Shutdown stops listening and lets requests in flight finish until ctx
// ends; then it cuts what is left (streams, WebSockets: they never end by
// themselves) and returns once every request's audit line is written, or
// when ctx ends. A WebSocket is cut at once: http.Server does not wait for
// a connection that switched protocols.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	s.stop()
	if err != nil {
		s.srv.Close()
		err = fmt.Errorf("ingress route %q: requests cut at shutdown: %w", s.route.Name, err)
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.reqs.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		if err == nil {
			err = fmt.Errorf("ingress route %q: requests still ending at shutdown, their audit lines may follow: %w", s.route.Name, ctx.Err())
		}
	}
	s.transport.CloseIdleConnections()
	s.unkeyed.Flush() // no refusal comes after the requests have ended
	s.evicted.Flush() // nor an eviction after the listener closed
	return err
}

// summarise writes the line summing up n refusals for reason that were
// not written one by one, with status (0: connections closed unanswered).
func (s *Server) summarise(status int) func(reason string, n int64) {
	return func(reason string, n int64) {
		line := &auditLine{Route: s.route.Name, Service: s.route.Service, Operator: UnknownOperator,
			Status: status, Reason: reason, Count: n}
		if err := s.audit.write(line, time.Now()); err != nil {
			s.log.Error("ingress audit write failed", "err", err, "reason", reason, "count", n)
		}
	}
}

// begin counts a request Shutdown must wait for, unless Shutdown is
// already waiting (a straggler of a connection it closed).
func (s *Server) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.reqs.Add(1)
	return true
}
