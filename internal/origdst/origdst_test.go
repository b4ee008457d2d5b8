package origdst

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Of reads what the client asked for, for IPv4 and IPv6 alike, through a
// real nftables redirect in a namespace the test makes; for a connection
// that was not redirected it is the listener's own address.
func TestOf(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces and nftables")
	for _, tc := range []struct {
		name, network, listen string
		dial                  string // "": the listener itself, not redirected
		want                  string // "": the listener's address
	}{
		{"IPv4 redirected", "tcp4", "127.0.0.1:0", "127.0.0.2:443", "127.0.0.2:443"},
		{"IPv6 redirected", "tcp6", "[::1]:0", "[::1]:443", "[::1]:443"},
		{"IPv4 direct", "tcp4", "127.0.0.1:0", "", ""},
		{"IPv6 direct", "tcp6", "[::1]:0", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			got, err := inNewNamespace(func() (netip.AddrPort, error) {
				ln, err := net.Listen(tc.network, tc.listen)
				if err != nil {
					return netip.AddrPort{}, err
				}
				defer ln.Close()
				if err := redirect443(uint16(ln.Addr().(*net.TCPAddr).Port)); err != nil {
					return netip.AddrPort{}, err
				}
				dial := tc.dial
				if dial == "" {
					dial = ln.Addr().String()
				}
				if want == "" {
					want = ln.Addr().String()
				}
				c, err := net.Dial(tc.network, dial)
				if err != nil {
					return netip.AddrPort{}, fmt.Errorf("dial %s: %w", dial, err)
				}
				defer c.Close()
				s, err := ln.Accept()
				if err != nil {
					return netip.AddrPort{}, err
				}
				defer s.Close()
				return Of(s.(*net.TCPConn))
			})
			if err != nil || got.String() != want {
				t.Fatalf("Of(a connection to %s) = %v, %v; want %s", tc.dial, got, err, want)
			}
		})
	}
}

// inNewNamespace runs f on a locked thread in a new network namespace
// with loopback up. The thread is never unlocked: it dies with its
// goroutine, and the namespace with it.
func inNewNamespace(f func() (netip.AddrPort, error)) (netip.AddrPort, error) {
	type result struct {
		ap  netip.AddrPort
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- result{err: err}
			return
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		if err != nil {
			ch <- result{err: err}
			return
		}
		ap, err := f()
		ch <- result{ap, err}
	}()
	r := <-ch
	return r.ap, r.err
}

// redirect443 installs, in the calling thread's namespace, the least
// table that redirects: tcp dport 443 (and 444) → :port, in the output hook.
func redirect443(port uint16) error {
	ns, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(ns)
	conn, err := nftables.New(nftables.WithNetNSFd(ns))
	if err != nil {
		return err
	}
	table := conn.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "origdst_test"})
	chain := conn.AddChain(&nftables.Chain{
		Name: "out", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest,
	})
	for _, from := range []uint16{443, 444} {
		conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(from >> 8), byte(from)}},
			&expr.Immediate{Register: 1, Data: []byte{byte(port >> 8), byte(port)}},
			&expr.Redir{RegisterProtoMin: 1},
		}})
	}
	return conn.Flush()
}
