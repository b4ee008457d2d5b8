package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/origdst"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// egressNetwork is a namespace with transparent egress, the explicit
// proxy on 3128 and localPorts open.
func egressNetwork(t *testing.T, localPorts ...int) *Network {
	t.Helper()
	testutil.RequireRoot(t, "network namespaces and nftables")
	n, err := NewNetwork(NetworkConfig{ProxyPort: 3128, LocalPorts: localPorts})
	if err != nil {
		t.Fatalf("NewNetwork: %v", err)
	}
	t.Cleanup(n.Close)
	if len(n.Transparent) != 2 || len(n.DNSStreams) != 2 || len(n.DNSPackets) != 2 {
		t.Fatalf("NewNetwork made %d transparent listeners, %d DNS listeners, %d DNS sockets; want one of each per family",
			len(n.Transparent), len(n.DNSStreams), len(n.DNSPackets))
	}
	return n
}

// Every TCP connection not for loopback lands on a transparent listener,
// which learns what was asked for; port 53 of any address, UDP and TCP,
// lands on the DNS sockets. IPv4 and IPv6 alike.
func TestEgressRedirects(t *testing.T) {
	n := egressNetwork(t)
	for _, tc := range []struct {
		network, addr string
		lands         func(n *Network) any // a net.Listener or a net.PacketConn
	}{
		{"tcp", "192.0.2.1:443", func(n *Network) any { return n.Transparent[0] }},
		{"tcp", "198.18.0.7:22", func(n *Network) any { return n.Transparent[0] }},
		{"tcp", "[2001:db8::1]:443", func(n *Network) any { return n.Transparent[1] }},
		{"tcp", "192.0.2.53:53", func(n *Network) any { return n.DNSStreams[0] }},
		{"tcp", "127.0.0.53:53", func(n *Network) any { return n.DNSStreams[0] }},
		{"tcp", "[::1]:53", func(n *Network) any { return n.DNSStreams[1] }},
		{"tcp", "[2001:db8::53]:53", func(n *Network) any { return n.DNSStreams[1] }},
		{"udp", "192.0.2.53:53", func(n *Network) any { return n.DNSPackets[0] }},
		{"udp", "127.0.0.53:53", func(n *Network) any { return n.DNSPackets[0] }},
		{"udp", "[::1]:53", func(n *Network) any { return n.DNSPackets[1] }},
		{"udp", "[2001:db8::53]:53", func(n *Network) any { return n.DNSPackets[1] }},
	} {
		t.Run(tc.network+" "+tc.addr, func(t *testing.T) {
			// The deadline only ends a test that would hang (a SYN
			// nothing redirects goes out to nowhere).
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := n.DialContext(ctx, tc.network, tc.addr)
			if err != nil {
				t.Fatalf("DialContext(%s %s): %v", tc.network, tc.addr, err)
			}
			defer c.Close()
			const hello = "hello"
			if _, err := io.WriteString(c, hello); err != nil {
				t.Fatalf("write to %s %s: %v", tc.network, tc.addr, err)
			}
			switch at := tc.lands(n).(type) {
			case net.Listener:
				s, err := at.Accept()
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if got := readN(t, s, len(hello)); got != hello {
					t.Fatalf("%s on %s read %q; want %q (another connection?)", tc.addr, at.Addr(), got, hello)
				}
				table, err := origdst.OpenTable(n.NS)
				if err != nil {
					t.Fatal(err)
				}
				defer table.Close()
				local, remote := netip.MustParseAddrPort(s.LocalAddr().String()), netip.MustParseAddrPort(s.RemoteAddr().String())
				if _, got, err := table.Original(local, remote); err != nil || got != netip.MustParseAddrPort(tc.addr) {
					t.Fatalf("the original destination of a connection to %s = %v, %v", tc.addr, got, err)
				}
			case net.PacketConn:
				at.SetReadDeadline(time.Now().Add(10 * time.Second))
				buf := make([]byte, 64)
				k, from, err := at.ReadFrom(buf)
				if err != nil {
					t.Fatalf("%s %s never reached %s: %v", tc.network, tc.addr, at.LocalAddr(), err)
				}
				if string(buf[:k]) != hello || from.String() != c.LocalAddr().String() {
					t.Fatalf("%s read %q from %s; want %q from %s", at.LocalAddr(), buf[:k], from, hello, c.LocalAddr())
				}
			}
		})
	}
}

func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read from %s: %v", c.RemoteAddr(), err)
	}
	return string(b)
}

// What the table does not redirect fails at once, with an error the
// program sees, never a timeout: UDP and ICMP to any address not the
// namespace's own, TCP to a loopback port not allowed. An allowed
// loopback port, and the explicit proxy's, reach their listeners.
func TestEgressRejects(t *testing.T) {
	const allowed, other = 8901, 18789
	n := egressNetwork(t, allowed)
	for _, p := range []int{allowed, other} {
		for _, host := range []string{"127.0.0.1", "::1"} {
			listenOn(t, n, net.JoinHostPort(host, fmt.Sprint(p)), "served")
		}
	}
	go serveHello(n.Listener, "proxy")
	for _, tc := range []struct {
		network, addr string
		want          string // a greeting, or the error
	}{
		{"tcp", "127.0.0.1:8901", "served"},
		{"tcp", "[::1]:8901", "served"},
		{"tcp", "127.0.0.1:3128", "proxy"},
		{"tcp", "127.0.0.1:18789", unix.ECONNREFUSED.Error()},
		{"tcp", "[::1]:18789", unix.ECONNREFUSED.Error()},
		{"udp", "192.0.2.1:9", unix.EPERM.Error()},
		{"udp", "[2001:db8::1]:9", unix.EPERM.Error()},
		{"ip4:icmp", "192.0.2.1", unix.EPERM.Error()},
		{"ip6:ipv6-icmp", "2001:db8::1", unix.EPERM.Error()},
	} {
		t.Run(tc.network+" "+tc.addr, func(t *testing.T) {
			got, err := attemptIn(n, tc.network, tc.addr)
			if err != nil {
				got = err.Error()
			}
			if !strings.HasSuffix(got, tc.want) {
				t.Fatalf("%s %s: %q; want %q", tc.network, tc.addr, got, tc.want)
			}
		})
	}
}

// attemptIn connects to addr inside n and returns what the peer says,
// or, for datagrams, sends one and returns the error of the send (nil
// means it left).
func attemptIn(n *Network, network, addr string) (string, error) {
	if network != "tcp" {
		return "", sendIn(n, network, addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := n.DialContext(ctx, network, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	return string(b), err
}

// sendIn sends one datagram (an ICMP echo request for ip4:icmp and
// ip6:ipv6-icmp) to addr from inside n.
func sendIn(n *Network, network, addr string) error {
	var c net.Conn
	err := inNamespace(n.enter, func() (err error) {
		c, err = net.Dial(network, addr)
		return err
	})
	if err != nil {
		return err
	}
	defer c.Close()
	msg := []byte("x")
	switch network {
	case "ip4:icmp":
		msg = []byte{8, 0, 0xf7, 0xff, 0, 0, 0, 0} // echo request, id 0, seq 0
	case "ip6:ipv6-icmp":
		msg = []byte{128, 0, 0, 0, 0, 0, 0, 0} // the kernel sums ICMPv6
	}
	_, err = c.Write(msg)
	return err
}

// listenOn listens on addr inside n and greets every connection.
func listenOn(t *testing.T, n *Network, addr, hello string) {
	t.Helper()
	var ln net.Listener
	err := inNamespace(n.enter, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s in the namespace: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	go serveHello(ln, hello)
}

// InstallEgress's sidecar knobs, each installed over the table before
// (it replaces, so an exemption does not outlive its table): AllLocalTCP
// opens every loopback port, ExemptUID lets that uid's sockets (here the
// test's own, root's) pass unredirected and unfiltered.
func TestInstallEgressReplacesAndExempts(t *testing.T) {
	n := egressNetwork(t)
	listenOn(t, n, "127.0.0.1:18789", "served")
	listenOn(t, n, "127.0.0.1:53", "local53")
	go serveHello(n.DNSStreams[0], "dns")
	base := EgressRules{
		TransparentPort: port(n.Transparent[0]), DNSPort: port(n.DNSStreams[0]),
		LocalTCPPorts: []int{3128, port(n.Transparent[0]), port(n.DNSStreams[0])},
	}
	root, other := uint32(0), uint32(12345)
	for _, tc := range []struct {
		name      string
		rules     func(r EgressRules) EgressRules
		port18789 string // what 127.0.0.1:18789 says, or the error
		port53    string // what 127.0.0.1:53 says
	}{
		{"exempt root", func(r EgressRules) EgressRules { r.ExemptUID = &root; return r }, "served", "local53"},
		{"plain", func(r EgressRules) EgressRules { return r }, unix.ECONNREFUSED.Error(), "dns"},
		{"all local TCP", func(r EgressRules) EgressRules { r.AllLocalTCP = true; return r }, "served", "dns"},
		{"exempt another uid", func(r EgressRules) EgressRules { r.ExemptUID = &other; return r }, unix.ECONNREFUSED.Error(), "dns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := InstallEgress(n.NS, tc.rules(base)); err != nil {
				t.Fatalf("InstallEgress: %v", err)
			}
			for addr, want := range map[string]string{"127.0.0.1:18789": tc.port18789, "127.0.0.1:53": tc.port53} {
				got, err := attemptIn(n, "tcp", addr)
				if err != nil {
					got = err.Error()
				}
				if !strings.HasSuffix(got, want) {
					t.Errorf("%s: tcp %s: %q; want %q", tc.name, addr, got, want)
				}
			}
		})
	}
}

func TestInstallEgressRefusesBadPorts(t *testing.T) {
	for _, r := range []EgressRules{
		{TransparentPort: 0, DNSPort: 53},
		{TransparentPort: 8080, DNSPort: 65536},
		{TransparentPort: 8080, DNSPort: 5353, LocalTCPPorts: []int{-1}},
	} {
		if err := InstallEgress(netns.None(), r); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("InstallEgress(%+v) = %v; want a port out of range", r, err)
		}
	}
}

// A namespace whose table cannot be installed is no namespace at all: the
// caller gets the error, never a Network with a way out.
func TestNewNetworkFailsClosed(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces and nftables")
	n, err := NewNetwork(NetworkConfig{ProxyPort: 3128, LocalPorts: []int{70000}})
	if err == nil || n != nil || !strings.Contains(err.Error(), "port 70000 is out of range") {
		t.Fatalf("NewNetwork(local port 70000) = %v, %v; want no network and the port named", n, err)
	}
}

// The transparent and DNS ports the kernel picks are never one a service
// of the namespace will listen on: with the namespace's ephemeral range
// narrowed to two ports and the one the kernel picks first a service's,
// the other is taken.
func TestListenAvoidsServicePorts(t *testing.T) {
	testutil.RequireRoot(t, "a network namespace")
	err := inNamespace(func() error { return unix.Unshare(unix.CLONE_NEWNET) }, func() error {
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		if err != nil {
			return err
		}
		// Per namespace: the thread's, which unshare just made.
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_local_port_range", []byte("40002 40003"), 0o644); err != nil {
			return err
		}
		lc := &net.ListenConfig{}
		first, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		service := port(first) // the kernel's preference, which it keeps
		first.Close()
		for range 8 {
			ln, err := listenAvoiding(lc, "tcp4", "127.0.0.1", 0, []int{service})
			if err != nil {
				return err
			}
			got := port(ln)
			ln.Close()
			if got == service {
				return fmt.Errorf("picked port %d, one a service will listen on", got)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A pod's one-off cannot reach the services' ports, which the namespace's
// table opens to every process in it: DenyPeers rejects the connections of
// its cgroup's processes, and no one else's; the proxy's port stays open
// to it; undone, the rule is gone.
func TestDenyPeers(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces, nftables and cgroups")
	const peer = 8901
	n := egressNetwork(t, peer)
	listenOn(t, n, fmt.Sprintf("127.0.0.1:%d", peer), "served")
	go serveHello(n.Listener, "proxy")
	root, err := cgroup2.Mount()
	if err != nil {
		t.Fatalf("the cgroup v2 hierarchy: %v", err)
	}
	leaf := func(name string) string {
		dir, err := cgroup2.Create(root, fmt.Sprintf("airlock-test-%s-%d", name, os.Getpid()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { destroyGroups("", "", []string{dir}) })
		return dir
	}
	oneOff, service := leaf("oneoff"), leaf("service")
	undo, err := n.DenyPeers(oneOff)
	if err != nil {
		t.Fatal(err)
	}
	connect := func(dir string, port int) string {
		c := base(t, "/bin/bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && cat <&3", port))
		c.Net, c.ProxyPort, c.Cgroups = NetProxy, 3128, []string{dir}
		p, err := Start(context.Background(), c, n)
		if err != nil {
			t.Fatal(err)
		}
		code, err := p.Wait()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(code)
	}
	for _, tc := range []struct {
		name string
		dir  string
		port int
		want string // exit code
	}{
		{"the one-off to a service", oneOff, peer, "1"},
		{"the one-off to the proxy", oneOff, 3128, "0"},
		{"a service to a service", service, peer, "0"},
	} {
		if got := connect(tc.dir, tc.port); got != tc.want {
			t.Errorf("%s: exit %s; want %s", tc.name, got, tc.want)
		}
	}
	// Over UDP, a service's port need not be declared: the one-off's
	// datagrams reach no local port but the DNS one, a service's arrive.
	const undeclared = peer + 1
	declaredUDP, undeclaredUDP := listenUDP(t, n, peer), listenUDP(t, n, undeclared)
	from := func(dir string, port int) string { return fmt.Sprintf("%s-to-%d", filepath.Base(dir), port) }
	for _, dir := range []string{oneOff, service} {
		for _, port := range []int{peer, undeclared, 53} {
			if sent, want := sendUDP(t, n, dir, port, from(dir, port)), dir == service || port == 53; sent != want {
				t.Errorf("%s: sent %v; want %v", from(dir, port), sent, want)
			}
		}
	}
	for _, tc := range []struct {
		name string
		pc   net.PacketConn
		want []string
	}{
		{"a service's declared UDP port", declaredUDP, []string{from(service, peer)}},
		{"a service's undeclared UDP port", undeclaredUDP, []string{from(service, undeclared)}},
		{"the DNS socket", n.DNSPackets[0], []string{from(oneOff, 53), from(service, 53)}},
	} {
		if got := received(tc.pc); !slices.Equal(got, tc.want) {
			t.Errorf("%s received %q; want %q", tc.name, got, tc.want)
		}
	}
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	if got := connect(oneOff, peer); got != "0" {
		t.Errorf("after undo, the one-off to a service: exit %s; want 0", got)
	}
	if !sendUDP(t, n, oneOff, undeclared, "after-undo") {
		t.Error("after undo, the one-off's UDP was refused")
	}
	if got := received(undeclaredUDP); !slices.Equal(got, []string{"after-undo"}) {
		t.Errorf("after undo, the one-off's UDP: %q arrived; want it", got)
	}
	// Without peer ports, the one-off's UDP is still refused.
	bare := egressNetwork(t)
	bareUDP := listenUDP(t, bare, undeclared)
	undo, err = bare.DenyPeers(oneOff)
	if err != nil {
		t.Fatal(err)
	}
	if sendUDP(t, bare, oneOff, undeclared, "no-peers") {
		t.Error("without peer ports, the one-off's UDP was let go")
	}
	if got := received(bareUDP); len(got) != 0 {
		t.Errorf("without peer ports, the one-off's UDP reached a local port: %q", got)
	}
	if err := undo(); err != nil {
		t.Errorf("undo without peer ports: %v", err)
	}
}

// listenUDP is a UDP socket on 127.0.0.1:port in n.
func listenUDP(t *testing.T, n *Network, port int) net.PacketConn {
	t.Helper()
	var pc net.PacketConn
	if err := inNamespace(n.enter, func() (err error) {
		pc, err = net.ListenPacket("udp4", fmt.Sprintf("127.0.0.1:%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc
}

// sendUDP sends msg to 127.0.0.1:port from a sandbox in n and the cgroup
// dir, and says whether the send was let go (a refusal fails sendto
// itself, EPERM): a sender that did not run would make "nothing arrived"
// mean nothing.
func sendUDP(t *testing.T, n *Network, dir string, port int, msg string) (sent bool) {
	t.Helper()
	c := base(t, "/usr/bin/python3", "-c", fmt.Sprintf(`import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b%q, ("127.0.0.1", %d))
except PermissionError:
    sys.exit(3)`, msg, port))
	c.Net, c.ProxyPort, c.Cgroups = NetProxy, 3128, []string{dir}
	p, err := Start(context.Background(), c, n)
	if err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait()
	if err != nil || (code != 0 && code != 3) {
		t.Fatalf("sending %q to port %d: exit %d, %v", msg, port, code, err)
	}
	return code == 0
}

// received is what pc has queued: the datagrams sent to it so far (their
// senders have ended).
func received(pc net.PacketConn) []string {
	var got []string
	buf := make([]byte, 512)
	for {
		pc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		m, _, err := pc.ReadFrom(buf)
		if err != nil {
			return got
		}
		got = append(got, string(buf[:m]))
	}
}

// In a shared network (a pod's) a sandbox binds only its own ports and one
// the kernel picks: another service's port, free while that service
// restarts, is not its to take, and the kernel never picks a service's
// port (reserved). In its own network it binds any.
func TestSharedNetworkBinds(t *testing.T) {
	// 8901 is below the ephemeral range, 40001 in it: only the one the
	// kernel could pick is reserved.
	const own, other = 8901, 40001
	n := egressNetwork(t, own, other)
	var reserved []byte
	if err := inNamespace(n.enter, func() (err error) {
		reserved, err = os.ReadFile("/proc/sys/net/ipv4/ip_local_reserved_ports")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(reserved)); got != fmt.Sprint(other) {
		t.Errorf("reserved ports in the namespace %q; want the service's in the ephemeral range, %d", got, other)
	}
	script := `import socket, sys
for p in map(int, sys.argv[1:]):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        print(p, "bound")
    except OSError as e:
        print(p, e.errno)
    s.close()`
	for _, tc := range []struct {
		shared bool
		want   string
	}{
		{true, fmt.Sprintf("%d bound\n%d %d\n0 bound\n", own, other, unix.EACCES)},
		{false, fmt.Sprintf("%d bound\n%d bound\n0 bound\n", own, other)},
	} {
		c := base(t, "/usr/bin/python3", "-c", script, fmt.Sprint(own), fmt.Sprint(other), "0")
		c.Net, c.ProxyPort = NetProxy, 3128
		c.SharedNetwork = tc.shared
		if tc.shared {
			c.BindPorts = []int{own}
		}
		var out bytes.Buffer
		c.Stdout = &out
		p, err := Start(context.Background(), c, n)
		if err != nil {
			t.Fatal(err)
		}
		if code, err := p.Wait(); err != nil || code != 0 {
			t.Fatalf("shared %v: exit %d, %v", tc.shared, code, err)
		}
		if out.String() != tc.want {
			t.Errorf("shared %v: binds %q; want %q", tc.shared, out.String(), tc.want)
		}
	}
}

// The filter lets established flows through to the namespace's own
// addresses, or as answers to flows that came in, only. A flow the exempt uid began to the outside (a sidecar
// proxy's UDP lookup of the real resolver) stays established in conntrack
// after its socket closes; a workload process that bound the same port
// would otherwise ride it past the redirect, which sees only a flow's
// first packet. (What the kernel then does with such a packet needs a
// peer outside the namespace; the table is read back as the kernel holds
// it.)
func TestEgressEstablishedOnlyToLocal(t *testing.T) {
	n := egressNetwork(t)
	exempt := uint32(1337)
	if err := InstallEgress(n.NS, EgressRules{TransparentPort: port(n.Transparent[0]), DNSPort: port(n.DNSStreams[0]), ExemptUID: &exempt}); err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, r := range filterRules(t, n) {
		var ct, bounded bool
		for _, e := range r.Exprs {
			switch e := e.(type) {
			case *expr.Ct:
				ct = ct || e.Key == expr.CtKeySTATE
				bounded = bounded || e.Key == expr.CtKeyDIRECTION
			case *expr.Fib:
				bounded = bounded || e.FlagDADDR && e.ResultADDRTYPE
			}
		}
		if ct {
			seen = true
			if !bounded {
				t.Errorf("filter_out accepts established flows to any destination in either direction: %d expressions, neither fib daddr type local nor ct direction reply", len(r.Exprs))
			}
		}
	}
	if !seen {
		t.Fatal("filter_out has no rule for established flows")
	}
}

// The ingress's source address is root's alone in the namespace: the
// supervisor dials a service from it, and a sandboxed process (another
// service, a one-off) cannot, so a service believes X-Airlock-Operator
// from that address only.
func TestIngressSourceIsRoots(t *testing.T) {
	py := testutil.RequireTool(t, "/usr/bin/python3")
	const port = 8901
	for _, src := range []string{"127.0.0.1", IngressSource.String()} {
		cfg := base(t, py, "-c", fmt.Sprintf(`import socket
s = socket.socket()
s.bind((%q, 0))
s.connect(("127.0.0.1", %d))
print(s.recv(100).decode())`, src, port))
		cfg.Net, cfg.ProxyPort, cfg.ConnectPorts = NetProxy, 3128, []int{port}
		out, code, err := runWith(t, cfg, func(n *Network) {
			listenOn(t, n, fmt.Sprintf("127.0.0.1:%d", port), "served")
			c, err := n.DialFrom(IngressSource)(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				t.Fatalf("the supervisor's dial from %s: %v", IngressSource, err)
			}
			got, _ := io.ReadAll(c)
			c.Close()
			if from := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr(); from != IngressSource || string(got) != "served" {
				t.Fatalf("the supervisor's dial: from %s, read %q; want from %s, the service's hello", from, got, IngressSource)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if ok := code == 0 && out == "served\n"; ok != (src != IngressSource.String()) {
			t.Errorf("a sandboxed process's connect from %s: exit %d %q; want it refused only from the ingress's address", src, code, out)
		}
	}
}

// sidecarPair is the sidecar shape (`airlock redirect`): a workload's
// namespace with the table installed, uid 1337 exempt (the proxy's), and
// a route out: a veth pair to a second namespace, the outside, both the
// test's own. The workload is 2001:db8:1::2/64, its default route the
// outside's 2001:db8:1::1, which holds 2001:db8:99::5 too (an address
// out there).
type sidecarPair struct{ inner, outer netns.NsHandle }

const sidecarExempt = 1337

func newSidecarPair(t *testing.T) sidecarPair {
	t.Helper()
	testutil.RequireRoot(t, "network namespaces and nftables")
	var p sidecarPair
	inNS(t, netns.None(), func() {
		orig, err := netns.Get()
		if err != nil {
			t.Fatal(err)
		}
		defer orig.Close()
		if p.inner, err = netns.New(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.inner.Close() })
		if p.outer, err = netns.New(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.outer.Close() })
		if err := netns.Set(orig); err != nil {
			t.Fatal(err)
		}
	})
	hi, err := netlink.NewHandleAt(p.inner)
	if err != nil {
		t.Fatal(err)
	}
	defer hi.Close()
	ho, err := netlink.NewHandleAt(p.outer)
	if err != nil {
		t.Fatal(err)
	}
	defer ho.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "wa0"}, PeerName: "wb0", PeerNamespace: netlink.NsFd(p.outer)}
	if err := hi.LinkAdd(veth); err != nil {
		t.Fatalf("veth pair: %v", err)
	}
	up := func(h *netlink.Handle, name string, addrs ...string) netlink.Link {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			ipnet, err := netlink.ParseIPNet(a)
			if err != nil {
				t.Fatal(err)
			}
			// No duplicate detection: the address is usable at once.
			if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipnet, Flags: unix.IFA_F_NODAD}); err != nil {
				t.Fatalf("%s on %s: %v", a, name, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	up(hi, "lo")
	wa0 := up(hi, "wa0", "2001:db8:1::2/64")
	up(ho, "lo", "2001:db8:99::5/128")
	up(ho, "wb0", "2001:db8:1::1/64")
	if err := hi.RouteAdd(&netlink.Route{LinkIndex: wa0.Attrs().Index, Gw: net.ParseIP("2001:db8:1::1"),
		Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}}); err != nil {
		t.Fatalf("default route: %v", err)
	}
	exempt := uint32(sidecarExempt)
	if err := InstallEgress(p.inner, EgressRules{TransparentPort: 15001, DNSPort: 15053, AllLocalTCP: true, LocalTCPPorts: []int{3128}, ExemptUID: &exempt}); err != nil {
		t.Fatal(err)
	}
	return p
}

// inNS runs f on a thread in namespace ns (netns.None(): the caller's),
// one that ends with it: what f starts or opens there stays there.
func inNS(t *testing.T, ns netns.NsHandle, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if ns != netns.None() {
			if err := netns.Set(ns); err != nil {
				t.Error(err)
				return
			}
		}
		f()
	}()
	<-done
}

// pythonAs runs a Python script as uid in namespace ns, and returns what
// it printed.
func pythonAs(t *testing.T, ns netns.NsHandle, uid int, script string) string {
	t.Helper()
	py := testutil.RequireTool(t, "/usr/bin/python3")
	var out []byte
	var err error
	inNS(t, ns, func() {
		cmd := exec.Command(py, "-c", script)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		out, err = cmd.CombinedOutput()
	})
	if err != nil {
		t.Fatalf("python as uid %d: %v\n%s", uid, err, out)
	}
	return string(out)
}

// In the sidecar shape, what the workload sends leaves through the proxy
// or not at all: the answer of a local socket to one bound (IP_FREEBIND,
// no capability needed) to an address outside is not routed out as the
// reply of a flow let through. The exempt uid's own packets reach the
// outside, neighbour discovery included.
func TestSidecarRefusesAForeignSource(t *testing.T) {
	p := newSidecarPair(t)
	var outside net.PacketConn
	inNS(t, p.outer, func() {
		var err error
		if outside, err = net.ListenPacket("udp6", "[2001:db8:99::5]:4443"); err != nil {
			t.Fatal(err)
		}
	})
	defer outside.Close()
	got := make(chan string, 2)
	go func() {
		buf := make([]byte, 100)
		for {
			n, _, err := outside.ReadFrom(buf)
			if err != nil {
				return
			}
			got <- string(buf[:n])
		}
	}()
	// The exempt uid's datagram, from the workload's own address: the
	// way out works, so a datagram that does not arrive was refused.
	pythonAs(t, p.inner, sidecarExempt, `import socket
socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).sendto(b"exempt", ("2001:db8:99::5", 4443))`)
	select {
	case m := <-got:
		if m != "exempt" {
			t.Fatalf("the outside got %q; want the exempt uid's datagram", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the exempt uid's datagram did not reach the outside")
	}
	out := pythonAs(t, p.inner, 1000, `import socket
local = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
local.bind(("2001:db8:1::2", 7777))
local.settimeout(2)
foreign = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
foreign.setsockopt(socket.IPPROTO_IPV6, 78, 1)  # IPV6_FREEBIND
foreign.bind(("2001:db8:99::5", 4443))
try:
    foreign.sendto(b"ping", ("2001:db8:1::2", 7777))
    _, addr = local.recvfrom(100)
    local.sendto(b"exfiltrated", addr)
    print("answered")
except OSError as e:
    print("refused:", e)`)
	select {
	case m := <-got:
		t.Errorf("the outside got %q from the workload (%s); want nothing but through the proxy", m, strings.TrimSpace(out))
	case <-time.After(time.Second):
	}
}

// The exempt uid's TCP connection ends whole when it closes with data
// still queued: the rest and the FIN go from no socket, and no uid, and
// are the exempt flow's still.
func TestSidecarExemptFlowOutlivesItsSocket(t *testing.T) {
	p := newSidecarPair(t)
	var ln net.Listener
	inNS(t, p.outer, func() {
		// A small window, so that the sender closes with most of what
		// it sent still queued.
		lc := net.ListenConfig{Control: testutil.SocketOption(unix.SOL_SOCKET, unix.SO_RCVBUF, 4096)}
		var err error
		if ln, err = lc.Listen(context.Background(), "tcp6", "[2001:db8:99::5]:8080"); err != nil {
			t.Fatal(err)
		}
	})
	defer ln.Close()
	type result struct {
		n   int64
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			res <- result{err: err}
			return
		}
		defer c.Close()
		time.Sleep(500 * time.Millisecond) // the sender has closed
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := io.Copy(io.Discard, c)
		res <- result{n, err}
	}()
	const size = 256 << 10
	pythonAs(t, p.inner, sidecarExempt, fmt.Sprintf(`import socket
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
s.settimeout(5)
s.connect(("2001:db8:99::5", 8080))
s.sendall(b"x" * %d)
s.close()`, size))
	r := <-res
	if r.err != nil || r.n != size {
		t.Errorf("the outside read %d bytes, %v; want all %d, then the end", r.n, r.err, size)
	}
}

// A socket of the workload cannot take the exempt uid's TCP flow over: one
// bound to the flow's address and port, connecting to the same peer once
// the peer has reset the exempt socket, finds conntrack's flow still open
// (and marked), and is refused, not let out around the proxy.
func TestSidecarExemptFlowIsNotTakenOver(t *testing.T) {
	p := newSidecarPair(t)
	var ln *net.TCPListener
	inNS(t, p.outer, func() {
		l, err := net.Listen("tcp6", "[2001:db8:99::5]:8080")
		if err != nil {
			t.Fatal(err)
		}
		ln = l.(*net.TCPListener)
	})
	second := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			second <- "nothing: " + err.Error()
			return
		}
		c.(*net.TCPConn).SetLinger(0) // close resets it
		time.Sleep(200 * time.Millisecond)
		c.Close()
		c, err = ln.Accept()
		if err != nil {
			second <- "nothing"
			return
		}
		second <- "a connection from " + c.RemoteAddr().String()
		c.Close()
	}()
	port := strings.TrimSpace(pythonAs(t, p.inner, sidecarExempt, `import socket
s = socket.create_connection(("2001:db8:99::5", 8080), timeout=5)
print(s.getsockname()[1], flush=True)
try:
    s.recv(10)
except OSError:
    pass`))
	out := pythonAs(t, p.inner, 1000, `import socket
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("2001:db8:1::2", `+port+`))
s.settimeout(2)
try:
    s.connect(("2001:db8:99::5", 8080))
    print("connected")
except OSError as e:
    print("refused:", e)`)
	ln.Close()
	if got := <-second; got != "nothing" {
		t.Errorf("the outside got %s, the workload's (%s) on the exempt flow's port %s; want it refused", got, strings.TrimSpace(out), port)
	}
}

// The nftables sockets egress rules are made and removed through are closed
// (in the background: closeSoon), not left open for each one-off a pod
// runs; and each undo has removed its rules when it returns.
func TestEgressRulesLeaveNoSocket(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces, nftables and cgroups")
	n := egressNetwork(t, 8901)
	root, err := cgroup2.Mount()
	if err != nil {
		t.Fatalf("the cgroup v2 hierarchy: %v", err)
	}
	dir, err := cgroup2.Create(root, fmt.Sprintf("airlock-test-sockets-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyGroups("", "", []string{dir}) })
	sockets := func() int {
		n := 0
		fds, _ := os.ReadDir("/proc/self/fd")
		for _, fd := range fds {
			if l, _ := os.Readlink("/proc/self/fd/" + fd.Name()); strings.HasPrefix(l, "socket:") {
				n++
			}
		}
		return n
	}
	before := sockets()
	for range 10 {
		undo, err := n.DenyPeers(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := undo(); err != nil {
			t.Fatal(err)
		}
		if left := peerRules(t, n); left != 0 {
			t.Fatalf("%d of the one-off's rules left after undo", left)
		}
		if err := InstallEgress(n.NS, EgressRules{TransparentPort: 1000, DNSPort: 1001, LocalTCPPorts: []int{8901}}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, fmt.Sprintf("the process's sockets back to %d", before), func() bool { return sockets() <= before })
}

// peerRules counts the rules DenyPeers put in n's filter chain.
func peerRules(t *testing.T, n *Network) int {
	t.Helper()
	left := 0
	for _, r := range filterRules(t, n) {
		if bytes.HasPrefix(r.UserData, []byte("airlock-deny-peers ")) {
			left++
		}
	}
	return left
}

// filterRules are the rules of n's filter chain.
func filterRules(t *testing.T, n *Network) []*nftables.Rule {
	t.Helper()
	conn, err := nftables.New(nftables.WithNetNSFd(int(n.NS)))
	if err != nil {
		t.Fatal(err)
	}
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: egressTable}
	rules, err := conn.GetRules(table, &nftables.Chain{Name: "filter_out", Table: table})
	if err != nil {
		t.Fatal(err)
	}
	return rules
}
