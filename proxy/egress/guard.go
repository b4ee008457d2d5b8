// Package egress resolves and dials upstream destinations for the proxy,
// refusing any address the sandbox must not reach (SSRF guard). A name is
// resolved once, every address it resolves to is checked, and exactly the
// checked address is dialled, so DNS rebinding cannot swap it afterwards.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// ErrBlocked marks a destination the guard refuses.
var ErrBlocked = errors.New("ssrf_blocked")

// BlockedError names the address and the range that refused it.
type BlockedError struct {
	Host  string
	Addr  netip.Addr
	Range string
}

func (e *BlockedError) Error() string {
	if e.Host != "" && e.Host != e.Addr.String() {
		return fmt.Sprintf("%s resolves to %s, which is %s", e.Host, e.Addr, e.Range)
	}
	return fmt.Sprintf("%s is %s", e.Addr, e.Range)
}

func (e *BlockedError) Is(target error) bool { return target == ErrBlocked }

// Guard checks and dials destinations. The zero value is not usable: build
// it with New.
type Guard struct {
	allow    []netip.Prefix
	resolve  map[string][]netip.Addr // "host:port" → addresses (curl --resolve)
	self     []netip.Prefix
	resolver *net.Resolver
	dialer   net.Dialer
}

// Options configure a Guard.
type Options struct {
	// AllowRanges are CIDRs the operator allows despite being private
	// (--allow-range). Tests use them for their loopback upstreams.
	AllowRanges []netip.Prefix
	// Resolve pins names to addresses, in curl's HOST:PORT:ADDR[,ADDR]
	// form (--resolve). Pinned addresses are still checked.
	Resolve []string
	// Self are the proxy's own addresses, refused unless allowed.
	Self []netip.Addr
	// Resolver looks names up; nil means the system resolver (the proxy's,
	// never the sandbox's).
	Resolver *net.Resolver
	// DialTimeout bounds an upstream TCP connect; zero means
	// DefaultDialTimeout.
	DialTimeout time.Duration
}

// DefaultDialTimeout is the upstream connect timeout when none is given.
const DefaultDialTimeout = 10 * time.Second

// New builds a Guard.
func New(o Options) (*Guard, error) {
	g := &Guard{allow: o.AllowRanges, resolve: map[string][]netip.Addr{}, resolver: o.Resolver}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	g.dialer.Timeout = o.DialTimeout
	if g.dialer.Timeout == 0 {
		g.dialer.Timeout = DefaultDialTimeout
	}
	// No keepalive probes: four setsockopt calls on every upstream
	// connection, for what the tunnels' idle watcher (TCP_INFO) and the
	// transport's idle timeout already end.
	g.dialer.KeepAlive = -1
	for _, a := range o.Self {
		g.self = append(g.self, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	for _, r := range o.Resolve {
		key, addrs, err := parseResolve(r)
		if err != nil {
			return nil, err
		}
		g.resolve[key] = addrs
	}
	return g, nil
}

// ParseAllowRange parses a --allow-range CIDR.
func ParseAllowRange(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("--allow-range %q: %w", s, err)
	}
	return p.Masked(), nil
}

func parseResolve(s string) (string, []netip.Addr, error) {
	// HOST:PORT:ADDR[,ADDR...]; IPv6 addresses may be bracketed.
	parts := strings.SplitN(s, ":", 3)
	if len(parts) != 3 {
		return "", nil, fmt.Errorf("--resolve %q: want HOST:PORT:ADDR[,ADDR]", s)
	}
	port, err := strconv.Atoi(parts[1])
	if err != nil || port < 1 || port > 65535 {
		return "", nil, fmt.Errorf("--resolve %q: bad port", s)
	}
	var addrs []netip.Addr
	for _, a := range strings.Split(parts[2], ",") {
		ip, err := netip.ParseAddr(strings.Trim(a, "[]"))
		if err != nil {
			return "", nil, fmt.Errorf("--resolve %q: %w", s, err)
		}
		addrs = append(addrs, ip.Unmap())
	}
	return net.JoinHostPort(strings.ToLower(parts[0]), parts[1]), addrs, nil
}

// Lookup resolves host (already canonical: an IP literal or a lower-case
// name) and checks every address. Any refused address refuses the name: a
// name that answers with one public and one private address is a rebinding
// attempt, not a choice.
func (g *Guard) Lookup(ctx context.Context, host string, port int) ([]netip.Addr, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("resolve %s: port %d out of range", host, port)
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip.Unmap()}
	} else if pinned, ok := g.resolve[net.JoinHostPort(host, strconv.Itoa(port))]; ok {
		addrs = pinned
	} else {
		ips, err := g.resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		for _, ip := range ips {
			addrs = append(addrs, ip.Unmap())
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: no addresses", host)
	}
	for _, a := range addrs {
		if err := g.Check(a); err != nil {
			var be *BlockedError
			if errors.As(err, &be) {
				be.Host = host
			}
			return nil, err
		}
	}
	return addrs, nil
}

// Check refuses an address in a range the sandbox must not reach, unless an
// allow range covers it.
func (g *Guard) Check(a netip.Addr) error {
	if a.Zone() != "" {
		// A zone names a local interface, and no prefix contains a
		// zoned address: none of the ranges below would refuse it.
		return &BlockedError{Addr: a, Range: "an address scoped to a local interface (zone " + a.Zone() + ")"}
	}
	a = a.Unmap()
	if name := g.refused(a); name != "" {
		return &BlockedError{Addr: a, Range: name}
	}
	// Addresses that embed IPv4 addresses are judged by each of them
	// too, the proxy's own among them: a Teredo address carries two, and
	// an allow range for one says nothing of the other.
	for _, v4 := range embeddedIPv4(a) {
		if name := g.refused(v4); name != "" {
			return &BlockedError{Addr: a, Range: fmt.Sprintf("an IPv6 form of %s (%s)", v4, name)}
		}
	}
	return nil
}

// refused names what refuses a, one of the proxy's own addresses or a
// blocked range an allow range does not cover; "" when nothing does.
func (g *Guard) refused(a netip.Addr) string {
	for _, p := range g.self {
		if p.Contains(a) && !g.allowedItself(a) {
			return "one of the proxy's own addresses (an allow range lets it through only as that one address, /32 or /128)"
		}
	}
	if g.allowed(a) {
		return ""
	}
	return blockedRange(a)
}

// allowed says whether an allow range covers a.
func (g *Guard) allowed(a netip.Addr) bool {
	for _, p := range g.allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// allowedItself says whether an allow range names a alone: one of the
// proxy's own addresses (what listens on the host, on 0.0.0.0 too) is not
// let through by a range opened for others (an internal registry's
// 10.0.0.0/8, which holds the VM's own 10.x address).
func (g *Guard) allowedItself(a netip.Addr) bool {
	for _, p := range g.allow {
		if p.IsSingleIP() && p.Addr() == a {
			return true
		}
	}
	return false
}

// Dial connects to the first of addrs that answers. The addresses must come
// from Lookup: Dial does not check them again.
func (g *Guard) Dial(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, error) {
	// Both are Lookup's to have refused: nil, nil here would be a
	// connection nobody made.
	if len(addrs) == 0 || port < 1 || port > 65535 {
		return nil, fmt.Errorf("dial %v port %d: no address, or a port out of range", addrs, port)
	}
	var errs []error
	for _, a := range addrs {
		c, err := g.dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			if self := selfConnected(c); self.IsValid() && !g.allowedItself(self) {
				// An address the host took since the proxy started (a
				// rotated IPv6 privacy address, a new DHCP lease) is
				// not among Self: the kernel says it is the host's own
				// by making it the connection's source too.
				c.Close()
				err = &BlockedError{Addr: self, Range: "an address of the proxy's own host (the connection's source is its destination)"}
			} else {
				return c, nil
			}
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// selfConnected is c's remote address when it is its local one too: a
// connection to one of the host's own addresses, which the kernel sources
// from that address. The zero Addr otherwise.
func selfConnected(c net.Conn) netip.Addr {
	l, lok := c.LocalAddr().(*net.TCPAddr)
	r, rok := c.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok {
		return netip.Addr{}
	}
	la, ra := l.AddrPort().Addr().Unmap(), r.AddrPort().Addr().Unmap()
	if la != ra {
		return netip.Addr{}
	}
	return ra
}

type checkedKey struct{}

type checked struct {
	hostport string
	addrs    []netip.Addr
}

// WithChecked carries addresses Lookup already checked for host:port to
// DialContext, which then dials exactly them instead of resolving again.
func WithChecked(ctx context.Context, host string, port int, addrs []netip.Addr) context.Context {
	return context.WithValue(ctx, checkedKey{}, checked{net.JoinHostPort(host, strconv.Itoa(port)), addrs})
}

// DialContext dials "host:port": the addresses WithChecked put in ctx for
// it, or else it resolves and checks the name first. It has the signature
// http.Transport wants.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("bad port in %q", addr)
	}
	if c, ok := ctx.Value(checkedKey{}).(checked); ok && c.hostport == addr {
		return g.Dial(ctx, c.addrs, port)
	}
	addrs, err := g.Lookup(ctx, strings.ToLower(strings.TrimSuffix(host, ".")), port)
	if err != nil {
		return nil, err
	}
	return g.Dial(ctx, addrs, port)
}
