package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/origdst"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy/identity"
)

type sandboxState struct {
	Sandbox
	resolver *identity.Resolver
	// conntrack tells a transparent connection's original tuple, in the
	// listener's namespace.
	conntrack *origdst.Table
	active    atomic.Int64 // connections held, hijacked tunnels included
	refusing  atomic.Int64 // over-limit connections being answered
	flooded   atomic.Int64 // over-limit connections closed unanswered, not yet on record
}

// clientConn is one accepted connection. Its owner is looked up once, when
// its first request is decided, and every request on the connection is
// attributed to it, as the service it is placed in.
type clientConn struct {
	sb             *sandboxState
	conn           *stallConn
	remote, local  netip.AddrPort
	once           sync.Once
	proc           *identity.Process
	svc            Service // valid when err is nil
	err            error
	lookupDuration time.Duration
	// handled: a handler has the connection's current request. Until one
	// does, whatever http.Server writes is its own refusal (servedConn).
	handled atomic.Bool
	// transparent: accepted by a transparent listener, whose audit lines
	// say so.
	transparent bool
	// open are its admitted decisions whose close line is not written
	// yet (the tunnel's, an inspected request's), for endOpen.
	openMu sync.Mutex
	open   []*decision
}

// opened notes an admitted decision, closed its close line.
func (cc *clientConn) opened(dc *decision) {
	cc.openMu.Lock()
	cc.open = append(cc.open, dc)
	cc.openMu.Unlock()
}

func (cc *clientConn) closed(dc *decision) {
	cc.openMu.Lock()
	if i := slices.Index(cc.open, dc); i >= 0 {
		cc.open = slices.Delete(cc.open, i, i+1)
	}
	cc.openMu.Unlock()
}

func newClientConn(sb *sandboxState, c *stallConn) *clientConn {
	return &clientConn{sb: sb, conn: c, remote: addrPort(c.RemoteAddr()), local: addrPort(c.LocalAddr())}
}

func connFrom(ctx context.Context) *clientConn {
	cc, _ := ctx.Value(ctxKey{}).(*clientConn)
	return cc
}

func (c *clientConn) identity(m *Metrics) (*identity.Process, error) {
	c.once.Do(func() {
		start := time.Now()
		c.proc, c.err = c.sb.resolver.Lookup(c.remote, c.local)
		if c.err == nil {
			c.svc, c.err = c.sb.service(c.proc)
		}
		c.lookupDuration = time.Since(start)
		m.observeIdentity(c.lookupDuration)
	})
	return c.proc, c.err
}

// service is who a connection of p is decided as: the listener's own
// sandbox, or on a pod's listener the service Route places p in. A process
// placed nowhere, or in a service without a preset, is not attributed.
func (st *sandboxState) service(p *identity.Process) (Service, error) {
	if st.Route == nil {
		return Service{ID: st.ID, Kind: st.Kind, Preset: st.Preset}, nil
	}
	s, err := st.Route(p)
	if err == nil && (s.ID == "" || s.Preset == "") {
		err = fmt.Errorf("pid %d (%s) is placed in service %q, which has no preset", p.PID, p.Exe, s.ID)
	}
	if err != nil {
		// %v: whatever Route wraps, the reason is identity_unknown.
		return Service{}, fmt.Errorf("%w: %v", identity.ErrUnknown, err)
	}
	return s, nil
}

// identityReason maps a lookup failure to its reason code.
func identityReason(err error) policies.Reason {
	if errors.Is(err, identity.ErrAmbiguous) {
		return policies.ReasonIdentityAmbiguous
	}
	return policies.ReasonIdentityUnknown
}

// closeWrite half-closes c when its socket can: the wrappers around a
// client's socket (early bytes, write progress, the server's refusals)
// pass it through, so a lingering close still reaches the socket.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// syscallConn is c's socket for the idle watcher and resets, through the
// same wrappers.
func syscallConn(c net.Conn) (syscall.RawConn, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}
