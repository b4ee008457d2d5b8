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
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Through a real nftables redirect, in a network namespace the test makes,
// a client that dials tls.tp.test's synthetic address is brought to the
// transparent listener, which reads the destination it asked for
// (SO_ORIGINAL_DST), attributes the connection to the client process (its
// socket is known to sock_diag by that destination, not the listener's),
// and tunnels it to the upstream.
func TestServeTransparentRedirected(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces and nftables")
	nsenter := testutil.RequireTool(t, "nsenter")
	fx := newTPFixture(t)
	ns, ln := redirectedNamespace(t, fx.port)
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

// redirectedNamespace makes a network namespace, loopback up, with a
// transparent listener on 127.0.0.1 and the least table that redirects to
// it: tcp dport port (the fixture's) in the output hook. The thread that
// made it stays locked and dies with its goroutine.
func redirectedNamespace(t *testing.T, port int) (netns.NsHandle, net.Listener) {
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
		if m.err = err; err != nil {
			return
		}
		if m.ln, m.err = net.Listen("tcp4", "127.0.0.1:0"); m.err != nil {
			return
		}
		m.err = redirectPort(m.ns, port, m.ln.Addr().(*net.TCPAddr).Port)
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

// redirectPort installs in ns: tcp dport from → redirect to :to.
func redirectPort(ns netns.NsHandle, from, to int) error {
	conn, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return err
	}
	table := conn.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "transparent_test"})
	chain := conn.AddChain(&nftables.Chain{
		Name: "out", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest,
	})
	conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(from >> 8), byte(from)}},
		&expr.Immediate{Register: 1, Data: []byte{byte(to >> 8), byte(to)}},
		&expr.Redir{RegisterProtoMin: 1},
	}})
	return conn.Flush()
}
