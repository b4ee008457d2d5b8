package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Through a real nftables redirect, in a network namespace the test makes,
// a client that dials tls.tp.test's synthetic address is brought to the
// transparent listener, which reads the destination it asked for
// (conntrack), attributes the connection to the client process (its
// socket is known to sock_diag by that destination, not the listener's),
// and tunnels it to the upstream.
func TestServeTransparentRedirected(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces and nftables")
	nsenter := testutil.RequireTool(t, "nsenter")
	fx := newTPFixture(t)
	ns, ln := redirectedNamespace(t, fx.port, "tcp4")
	sb := fx.sb
	sb.NetNS = ns
	fx.serve(t, ln, sb, transparentServer(fx.p))

	c := fx.client(t, tpTLS, nsenter, fmt.Sprintf("--net=/proc/%d/fd/%d", os.Getpid(), int(ns)))
	resp, issuer := fx.httpsGet(t, c, "tls.tp.test", []string{"http/1.1"}, "/")
	wantBody(t, resp, http.StatusOK, tpUpstreamBody)
	if issuer != fx.upCA.Cert.Subject.CommonName {
		t.Fatalf("the client's TLS peer was issued by %q; want the upstream's own (an opaque tunnel)", issuer)
	}
	l := fx.decision(t, "tls.tp.test", policies.ReasonAllowed)
	if l["via"] != "transparent" || l["binary"] != fx.exe || l["port"] != float64(fx.port) {
		t.Fatalf("decision line %v; want via transparent, binary %s, port %d", l, fx.exe, fx.port)
	}

	// A client that dials the listener itself was not redirected: it
	// would be decided as a connection to the proxy. It is reset.
	c = fx.clientTo(t, netip.MustParseAddrPort(ln.Addr().String()), nsenter, fmt.Sprintf("--net=/proc/%d/fd/%d", os.Getpid(), int(ns)))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: tls.tp.test\r\n\r\n")
	wantNothing(t, c)
	l = fx.decision(t, "", policies.ReasonInvalidRequest)
	if l["binary"] != fx.exe || !strings.Contains(l["detail"].(string), "not a redirected connection") {
		t.Fatalf("decision line %v; want invalid_request, not a redirected connection, binary %s", l, fx.exe)
	}
}

// tpAPI6 and tpTLS6 are api. and tls.tp.test's synthetic IPv6 addresses
// in a redirected namespace, which has them on its loopback.
var (
	tpAPI6 = netip.MustParseAddr("2001:db8::2")
	tpTLS6 = netip.MustParseAddr("2001:db8::3")
)

// A client socket bound to the port an earlier one connects from, towards
// another destination: both redirected to the listener, the second's reply
// tuple would be the first's, so the NAT remaps its source port and the
// listener sees a port no client socket has. Its owner is found by the
// source conntrack remembers: both connections are decided, and allowed,
// as the client binary's, IPv4 and IPv6 alike.
func TestServeTransparentRemappedSource(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces, nftables and conntrack")
	nsenter := testutil.RequireTool(t, "nsenter")
	for _, tc := range []struct {
		network  string
		source   netip.Addr // the address the client binds: one for both connections
		api, tls netip.Addr
	}{
		{"tcp4", netip.MustParseAddr("127.0.0.1"), tpAPI, tpTLS},
		{"tcp6", netip.IPv6Loopback(), tpAPI6, tpTLS6},
	} {
		t.Run(tc.network, func(t *testing.T) {
			fx := newTPFixture(t)
			ns, ln := redirectedNamespace(t, fx.port, tc.network)
			sb := fx.sb
			sb.NetNS = ns
			sb.Names = tpNames{tc.api: "api.tp.test", tc.tls: "tls.tp.test"}
			fx.serve(t, ln, sb, transparentServer(fx.p))
			d := fx.dialer(t, nsenter, fmt.Sprintf("--net=/proc/%d/fd/%d", os.Getpid(), int(ns)))

			first := d.dial(t, fmt.Sprintf("%s %s", netip.AddrPortFrom(tc.tls, uint16(fx.port)), netip.AddrPortFrom(tc.source, 0)))
			defer first.Close()
			resp, _ := fx.httpsGet(t, first, "tls.tp.test", []string{"http/1.1"}, "/")
			wantBody(t, resp, http.StatusOK, tpUpstreamBody)
			if l := fx.decision(t, "tls.tp.test", policies.ReasonAllowed); l["binary"] != fx.exe {
				t.Fatalf("decision line %v; want binary %s", l, fx.exe)
			}

			// The first connection is still open (this process holds it).
			port := addrPort(first.LocalAddr()).Port()
			second := d.dial(t, fmt.Sprintf("%s %s", netip.AddrPortFrom(tc.api, uint16(fx.port)), netip.AddrPortFrom(tc.source, port)))
			defer second.Close()
			if got := addrPort(second.LocalAddr()); got.Port() != port {
				t.Fatalf("the second client socket is %s; want port %d, the first's", got, port)
			}
			resp, _ = fx.httpsGet(t, second, "api.tp.test", []string{"http/1.1"}, "/ok/remapped")
			wantBody(t, resp, http.StatusOK, tpUpstreamBody)
			if l := fx.decision(t, "api.tp.test", policies.ReasonAllowed); l["binary"] != fx.exe || l["via"] != "transparent" {
				t.Fatalf("decision line %v; want via transparent, binary %s", l, fx.exe)
			}
		})
	}
}

// redirectedNamespace makes a network namespace, loopback up (with tpAPI6
// and tpTLS6), with a transparent listener on 127.0.0.1 (network tcp4) or
// ::1 (tcp6) and the least table that redirects to it: tcp dport port (the
// fixture's) in the output hook. The thread that made it stays locked and
// dies with its goroutine.
func redirectedNamespace(t *testing.T, port int, network string) (netns.NsHandle, net.Listener) {
	t.Helper()
	type made struct {
		ns  netns.NsHandle
		ln  net.Listener
		err error
	}
	ch := make(chan made, 1)
	go func() {
		runtime.LockOSThread()
		var m made
		defer func() { ch <- m }()
		if m.err = unix.Unshare(unix.CLONE_NEWNET); m.err != nil {
			return
		}
		if m.ns, m.err = netns.Get(); m.err != nil {
			return
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		for _, a := range []netip.Addr{tpAPI6, tpTLS6} {
			if err != nil {
				break
			}
			err = netlink.AddrAdd(lo, &netlink.Addr{IPNet: netlink.NewIPNet(a.AsSlice()), Flags: unix.IFA_F_NODAD})
		}
		if m.err = err; err != nil {
			return
		}
		listen := "127.0.0.1:0"
		if network == "tcp6" {
			listen = "[::1]:0"
		}
		if m.ln, m.err = net.Listen(network, listen); m.err != nil {
			return
		}
		m.err = testutil.RedirectTCP(int(m.ns), m.ln.Addr().(*net.TCPAddr).Port, port)
	}()
	m := <-ch
	// The listener is closed by the fixture's Shutdown (ServeTransparent).
	if m.err != nil && m.ln != nil {
		m.ln.Close()
	}
	if m.ns.IsOpen() {
		t.Cleanup(func() { m.ns.Close() })
	}
	if m.err != nil {
		t.Fatalf("redirected namespace: %v", m.err)
	}
	return m.ns, m.ln
}

// A redirected connection whose original destination conntrack cannot
// give is refused as invalid_request with conntrack's error, not as
// identity_unknown: the accepted socket's tuple is the listener's side of
// the redirect, which no client socket has, so its owner is not known
// either, and the line says both.
func TestServeTransparentOriginUnknown(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces and nftables")
	nsenter := testutil.RequireTool(t, "nsenter")
	fx := newTPFixture(t)
	ns, ln := redirectedNamespace(t, fx.port, "tcp4")
	listener := netip.MustParseAddrPort(ln.Addr().String())
	fx.p.origin = func(st *sandboxState, local, remote netip.AddrPort) (netip.AddrPort, netip.AddrPort, error) {
		if local == listener {
			return netip.AddrPort{}, netip.AddrPort{}, fmt.Errorf("conntrack: %s→%s: %w", remote, local, unix.ENOENT)
		}
		return remote, local, nil
	}
	sb := fx.sb
	sb.NetNS = ns
	fx.serve(t, ln, sb, transparentServer(fx.p))
	c := fx.client(t, tpTLS, nsenter, fmt.Sprintf("--net=/proc/%d/fd/%d", os.Getpid(), int(ns)))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: tls.tp.test\r\n\r\n")
	wantNothing(t, c)
	l := fx.decision(t, "", policies.ReasonInvalidRequest)
	if d, _ := l["detail"].(string); !strings.Contains(d, "original destination is unknown") || !strings.Contains(d, unix.ENOENT.Error()) || !strings.Contains(d, "nor is its owner") {
		t.Fatalf("decision line %v; want invalid_request with conntrack's error, and the owner unknown", l)
	}
}
