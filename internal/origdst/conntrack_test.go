package origdst

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Two client sockets bound to one source port, connected to two
// destinations that the redirect brings to one listener: the second's
// reply tuple would be the first's, so the NAT remaps its source port, and
// the accepted socket's remote is not the client's. Table.Original gives
// each connection's own source and destination, IPv4 and IPv6 alike; for
// a connection not redirected, the listener's address; for one conntrack
// does not know, ENOENT.
func TestTableOriginal(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces, nftables and conntrack")
	for _, tc := range []struct {
		name, network, listen, source string
		dests                         [2]string
	}{
		{"IPv4", "tcp4", "127.0.0.1:0", "127.0.0.1", [2]string{"127.0.0.2:443", "127.0.0.3:444"}},
		{"IPv6", "tcp6", "[::1]:0", "::1", [2]string{"[::1]:443", "[::1]:444"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := inNewNamespace(func() (netip.AddrPort, error) {
				ln, err := net.Listen(tc.network, tc.listen)
				if err != nil {
					return netip.AddrPort{}, err
				}
				defer ln.Close()
				if err := redirect443(uint16(ln.Addr().(*net.TCPAddr).Port)); err != nil {
					return netip.AddrPort{}, err
				}
				table, err := OpenTable(netns.None())
				if err != nil {
					return netip.AddrPort{}, err
				}
				defer table.Close()
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(tc.source)}, Control: testutil.ReuseAddr}
				for i, dest := range tc.dests {
					c, err := d.Dial(tc.network, dest)
					if err != nil {
						return netip.AddrPort{}, fmt.Errorf("dial %s: %w", dest, err)
					}
					defer c.Close()
					d.LocalAddr = c.LocalAddr() // the second binds the first's port
					s, err := ln.Accept()
					if err != nil {
						return netip.AddrPort{}, err
					}
					defer s.Close()
					client, seen := addrPortOf(c.LocalAddr()), addrPortOf(s.RemoteAddr())
					if i == 1 && seen == client {
						return netip.AddrPort{}, fmt.Errorf("the second connection's source port was not remapped (%s): the test shows nothing", seen)
					}
					src, dst, err := table.Original(addrPortOf(s.LocalAddr()), seen)
					if err != nil || src != client || dst.String() != dest {
						return netip.AddrPort{}, fmt.Errorf("Original(%s, %s) = %s, %s, %v; want %s, %s", s.LocalAddr(), seen, src, dst, err, client, dest)
					}
				}
				// A connection not redirected: its destination is the
				// listener's own address.
				c, err := net.Dial(tc.network, ln.Addr().String())
				if err != nil {
					return netip.AddrPort{}, err
				}
				defer c.Close()
				s, err := ln.Accept()
				if err != nil {
					return netip.AddrPort{}, err
				}
				defer s.Close()
				src, dst, err := table.Original(addrPortOf(s.LocalAddr()), addrPortOf(s.RemoteAddr()))
				if err != nil || src != addrPortOf(c.LocalAddr()) || dst != addrPortOf(ln.Addr()) {
					return netip.AddrPort{}, fmt.Errorf("Original(a direct connection) = %s, %s, %v; want %s, %s", src, dst, err, c.LocalAddr(), ln.Addr())
				}
				// A connection conntrack never saw.
				_, _, err = table.Original(addrPortOf(ln.Addr()), netip.AddrPortFrom(netip.MustParseAddr(tc.source), 1))
				if !errors.Is(err, unix.ENOENT) {
					return netip.AddrPort{}, fmt.Errorf("Original(an unknown connection) = %v; want ENOENT", err)
				}
				return netip.AddrPort{}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func addrPortOf(a net.Addr) netip.AddrPort {
	return netip.MustParseAddrPort(a.String())
}

// Check passes where conntrack can be queried (a namespace the test made,
// as root) and names the failure where it cannot: a process without
// CAP_NET_ADMIN over the namespace is refused.
func TestTableCheck(t *testing.T) {
	testutil.RequireRoot(t, "network and user namespaces")
	if os.Getenv(checkChildEnv) != "" {
		table, err := OpenTable(netns.None())
		if err == nil {
			err = table.Check()
		}
		fmt.Print(err)
		return
	}
	_, err := inNewNamespace(func() (netip.AddrPort, error) {
		table, err := OpenTable(netns.None())
		if err != nil {
			return netip.AddrPort{}, err
		}
		defer table.Close()
		return netip.AddrPort{}, table.Check()
	})
	if err != nil {
		t.Fatalf("Check as root = %v; want nil", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTableCheck$")
	cmd.Env = append(os.Environ(), checkChildEnv+"=1")
	// Root of a user namespace of its own: CAP_NET_ADMIN over nothing
	// but that namespace, not over this network namespace.
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
	}
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), unix.EPERM.Error()) {
		t.Fatalf("Check without CAP_NET_ADMIN printed %q (%v); want %q", out, err, unix.EPERM.Error())
	}
}

// checkChildEnv makes TestTableCheck the unprivileged child's side.
const checkChildEnv = "AIRLOCK_TEST_ORIGDST_CHECK"
