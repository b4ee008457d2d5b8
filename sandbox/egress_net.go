package sandbox

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/origdst"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The namespace's way to "the outside": a device that leads nowhere, with
// an address of each family and the default routes. Without an address a
// connect() fails before netfilter sees the packet, without a route with
// ENETUNREACH; with both, the nat chain redirects it to the proxy. ifb,
// not dummy: some kernels lack CONFIG_DUMMY. 192.0.0.8 is the IPv4 dummy
// address (RFC 7600); fd61:6972:6c6b::/48 is a ULA block ("airlk").
const egressDevice = "airlock0"

// egressFamily is one address family's share of the namespace's egress.
type egressFamily struct {
	network  string       // "4" or "6", as in tcp4, udp6
	loopback string       // where the redirect lands
	addr     netip.Prefix // the device's address
	route    netip.Prefix // the default route
}

var egressFamilies = []egressFamily{
	{"4", "127.0.0.1", netip.MustParsePrefix("192.0.0.8/32"), netip.MustParsePrefix("0.0.0.0/0")},
	{"6", "::1", netip.MustParsePrefix("fd61:6972:6c6b::1/128"), netip.MustParsePrefix("::/0")},
}

// setUpEgress runs in the new namespace, before any sandboxed process
// exists: the device and routes, the listeners, then the nft table. Any
// failure is an error naming the step: the caller refuses to start, never
// a sandbox with a way out.
//
// On a kernel without IPv6 (no /proc/sys/net/ipv6) there are no v6
// addresses, routes or listeners, and no v6 way out either: AF_INET6
// sockets cannot even be made.
func (n *Network) setUpEgress(c NetworkConfig) error {
	families := egressFamilies[:1]
	if hasIPv6() {
		families = egressFamilies
	}
	if err := addEgressDevice(families); err != nil {
		return err
	}
	if err := n.listen(c.ProxyPort, c.LocalPorts, families); err != nil {
		return err
	}
	t, d := port(n.Transparent[0]), port(n.DNSStreams[0])
	r := EgressRules{
		TransparentPort: t, DNSPort: d,
		LocalTCPPorts: slices.Concat([]int{c.ProxyPort}, c.LocalPorts),
		PeerTCPPorts:  c.LocalPorts,
	}
	if err := InstallEgress(n.NS, r); err != nil {
		return fmt.Errorf("sandbox namespace: %w", err)
	}
	if err := checkConntrack(n); err != nil {
		return err
	}
	// After the listeners, which avoid the services' ports themselves.
	return reservePorts(c.LocalPorts)
}

// checkConntrack refuses a namespace whose conntrack cannot be asked: the
// transparent listeners learn each redirected connection's destination
// from it, and would refuse every one; a command started anyway would find
// its connections hanging, where the launch should have refused to start.
func checkConntrack(n *Network) error {
	t, err := origdst.OpenTable(n.NS)
	if err == nil {
		err = t.Check()
		t.Close()
	}
	if err != nil {
		return fmt.Errorf("sandbox namespace: the redirect's original destinations cannot be read from conntrack (the kernel needs nf_conntrack_netlink): %w", err)
	}
	return nil
}

// reservePorts keeps a pod's services' ports from the kernel's picks in
// the namespace (ip_local_reserved_ports, both families): a bind to port 0,
// or a connect's or listen's implicit one, is not a port Landlock can
// check, and could be handed a service's port while it restarts. Only a
// port in the ephemeral range (ip_local_port_range) can be picked: with
// none there, nothing is written (a read-only /proc/sys, as containers
// often have, is then no matter); with one there and the sysctl not
// writable, the namespace is refused.
func reservePorts(ports []int) error {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fmt.Errorf("sandbox namespace: the ephemeral port range: %w", err)
	}
	var low, high int
	if _, err := fmt.Sscan(string(raw), &low, &high); err != nil {
		return fmt.Errorf("sandbox namespace: the ephemeral port range %q: %w", raw, err)
	}
	var picked []string
	for _, p := range ports {
		if p >= low && p <= high {
			picked = append(picked, strconv.Itoa(p))
		}
	}
	if len(picked) == 0 {
		return nil
	}
	const sysctl = "/proc/sys/net/ipv4/ip_local_reserved_ports"
	if err := os.WriteFile(sysctl, []byte(strings.Join(picked, ",")), 0); err != nil {
		return fmt.Errorf("sandbox namespace: the services' ports %s lie in the ephemeral range %d-%d and cannot be reserved: %w (give them ports outside it)", strings.Join(picked, ","), low, high, err)
	}
	return nil
}

func hasIPv6() bool {
	_, err := os.Stat("/proc/sys/net/ipv6")
	return err == nil
}

// addEgressDevice adds the device, up, with its addresses and the default
// routes through it.
func addEgressDevice(families []egressFamily) error {
	dev := &netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: egressDevice}}
	if err := netlink.LinkAdd(dev); err != nil {
		return fmt.Errorf("sandbox namespace: add ifb device %s: %w (the kernel needs CONFIG_IFB)", egressDevice, err)
	}
	if err := netlink.LinkSetUp(dev); err != nil {
		return fmt.Errorf("sandbox namespace: bring up %s: %w", egressDevice, err)
	}
	for _, f := range families {
		// No duplicate address detection: nothing else is on the device,
		// and a tentative address cannot be a source.
		addr := &netlink.Addr{IPNet: prefixNet(f.addr), Flags: unix.IFA_F_NODAD}
		if err := netlink.AddrAdd(dev, addr); err != nil {
			return fmt.Errorf("sandbox namespace: address %s on %s: %w", f.addr, egressDevice, err)
		}
		route := &netlink.Route{LinkIndex: dev.Attrs().Index, Dst: prefixNet(f.route), Scope: netlink.SCOPE_LINK}
		if err := netlink.RouteAdd(route); err != nil {
			return fmt.Errorf("sandbox namespace: default route %s via %s: %w", f.route, egressDevice, err)
		}
	}
	return nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// listen opens the explicit proxy's listener and, for each family, the
// transparent listener and the DNS sockets. Each family gets its own
// socket: a dual-stack one would hide a v4 client's original destination
// (origdst). The kernel picks T and D on the first (IPv4) listen; the
// IPv6 ones take the same ports, free in a namespace this new. D is picked
// by a TCP listen, so it is free for UDP too (nothing has bound UDP here).
// Neither may be one of the ports the namespace's services will listen on
// (avoid): a service's bind would fail, or its peers reach the wrong
// listener.
func (n *Network) listen(proxyPort int, avoid []int, families []egressFamily) error {
	// Their clients are the sandbox's processes: no keepalive probes
	// (four setsockopt calls per accept) for peers on the same host.
	lc := &net.ListenConfig{KeepAlive: -1}
	ctx := context.Background()
	var err error
	if n.Listener, err = lc.Listen(ctx, "tcp4", fmt.Sprintf("127.0.0.1:%d", proxyPort)); err != nil {
		return fmt.Errorf("sandbox namespace: proxy listener: %w", err)
	}
	t, d := 0, 0
	for _, f := range families {
		ln, err := listenAvoiding(lc, "tcp"+f.network, f.loopback, t, avoid)
		if err != nil {
			return fmt.Errorf("sandbox namespace: transparent listener: %w", err)
		}
		n.Transparent, t = append(n.Transparent, ln), port(ln)
		ln, err = listenAvoiding(lc, "tcp"+f.network, f.loopback, d, avoid)
		if err != nil {
			return fmt.Errorf("sandbox namespace: DNS listener: %w", err)
		}
		n.DNSStreams, d = append(n.DNSStreams, ln), port(ln)
		pc, err := lc.ListenPacket(ctx, "udp"+f.network, net.JoinHostPort(f.loopback, strconv.Itoa(d)))
		if err != nil {
			return fmt.Errorf("sandbox namespace: DNS socket: %w", err)
		}
		n.DNSPackets = append(n.DNSPackets, pc)
	}
	return nil
}

func port(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

// listenAvoiding listens on host:p, or, for p 0, on a port the kernel
// picks that is not in avoid: one that is stays bound until another is
// found, so the kernel does not pick it again.
func listenAvoiding(lc *net.ListenConfig, network, host string, p int, avoid []int) (net.Listener, error) {
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	for range 64 {
		ln, err := lc.Listen(context.Background(), network, net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil || p != 0 || !slices.Contains(avoid, port(ln)) {
			return ln, err
		}
		held = append(held, ln)
	}
	return nil, fmt.Errorf("listen on %s: the kernel kept picking ports in %v", host, avoid)
}
