package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	g, err := New(Options{Self: []netip.Addr{netip.MustParseAddr("93.184.216.34")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr    string
		blocked string // substring of the range name; "" = allowed
	}{
		{"8.8.8.8", ""},
		{"2606:4700::1111", ""},
		{"127.0.0.1", "loopback"},
		{"127.255.0.9", "loopback"},
		{"169.254.169.254", "metadata"},
		{"10.1.2.3", "private"},
		{"172.31.0.1", "private"},
		{"192.168.1.1", "private"},
		{"100.100.100.200", "carrier-grade NAT"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"::1", "loopback"},
		{"fd00::1", "unique local"},
		{"fe80::1", "link-local"},
		{"3fff:0fff::1", "documentation"},
		{"3fff:1000::1", ""},
		{"::ffff:169.254.169.254", "metadata"},
		{"64:ff9b::a9fe:a9fe", "IPv6 form of 169.254.169.254"},
		{"64:ff9b::808:808", ""},
		{"2002:7f00:1::1", "IPv6 form of 127.0.0.1"},
		{"2002:0808:0808::1", ""},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", "IPv6 form of 127.0.0.1"}, // Teredo client 127.0.0.1 (inverted)
		{"::7f00:1", "loopback"},
		{"224.0.0.1", "multicast"},
		{"93.184.216.34", "proxy's own"},
		// The proxy's own address in every IPv6 form that carries it.
		{"::ffff:93.184.216.34", "proxy's own"},
		{"64:ff9b::5db8:d822", "IPv6 form of 93.184.216.34 (one of the proxy's own"},
		{"2002:5db8:d822::1", "IPv6 form of 93.184.216.34 (one of the proxy's own"},
		{"::5db8:d822", "IPv6 form of 93.184.216.34 (one of the proxy's own"},
		{"::ffff:0:5db8:d822", "IPv6 form of 93.184.216.34 (one of the proxy's own"},
		// The IPv4-translated form (SIIT) of loopback.
		{"::ffff:0:7f00:1", "IPv6 form of 127.0.0.1"},
		{"::ffff:0:808:808", ""},
		// No prefix contains a zoned address.
		{"::1%lo", "zone lo"},
		{"fe80::1%eth0", "zone eth0"},
	} {
		err := g.Check(netip.MustParseAddr(tc.addr))
		switch {
		case tc.blocked == "" && err != nil:
			t.Errorf("Check(%s) = %v; want allowed", tc.addr, err)
		case tc.blocked != "" && (!errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), tc.blocked)):
			t.Errorf("Check(%s) = %v; want blocked as %q", tc.addr, err, tc.blocked)
		}
	}
}

func TestAllowRange(t *testing.T) {
	p, _ := ParseAllowRange("127.0.0.0/8")
	g, _ := New(Options{AllowRanges: []netip.Prefix{p}})
	if err := g.Check(netip.MustParseAddr("127.0.0.1")); err != nil {
		t.Fatalf("Check(127.0.0.1) with --allow-range 127.0.0.0/8 = %v", err)
	}
	if err := g.Check(netip.MustParseAddr("169.254.169.254")); err == nil {
		t.Fatal("an allow range for loopback allowed the metadata address")
	}
	// The proxy's own addresses only by an allow range of that address
	// alone: one opened for an internal registry's range does not open
	// the VM's own address in it.
	ten8, _ := ParseAllowRange("10.0.0.0/8")
	own, _ := ParseAllowRange("10.1.2.3/32")
	self := []netip.Addr{netip.MustParseAddr("10.1.2.3")}
	g, _ = New(Options{AllowRanges: []netip.Prefix{ten8}, Self: self})
	if err := g.Check(netip.MustParseAddr("10.1.2.4")); err != nil {
		t.Fatalf("Check(10.1.2.4) with --allow-range 10.0.0.0/8 = %v; want allowed", err)
	}
	if err := g.Check(netip.MustParseAddr("10.1.2.3")); !errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), "own addresses") {
		t.Fatalf("Check(the proxy's own 10.1.2.3) with --allow-range 10.0.0.0/8 = %v; want blocked as its own", err)
	}
	g, _ = New(Options{AllowRanges: []netip.Prefix{ten8, own}, Self: self})
	if err := g.Check(netip.MustParseAddr("10.1.2.3")); err != nil {
		t.Fatalf("Check(the proxy's own 10.1.2.3) with --allow-range 10.1.2.3/32 = %v; want allowed", err)
	}
	// A Teredo address embeds a server (10.0.0.1) and a client
	// (169.254.169.254, inverted): allowing the one allows not the other.
	ten, _ := ParseAllowRange("10.0.0.0/8")
	g, _ = New(Options{AllowRanges: []netip.Prefix{ten}})
	if err := g.Check(netip.MustParseAddr("2001:0:a00:1::5601:5601")); !errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), "169.254.169.254") {
		t.Fatalf("Check(Teredo 10.0.0.1 / 169.254.169.254) with --allow-range 10.0.0.0/8 = %v; want blocked naming 169.254.169.254", err)
	}
}

func TestLookupChecksPinnedAndResolvedAddresses(t *testing.T) {
	g, err := New(Options{Resolve: []string{"evil.test:443:8.8.8.8,10.0.0.1", "good.test:443:8.8.4.4"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := g.Lookup(ctx, "evil.test", 443); !errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), "evil.test resolves to 10.0.0.1") {
		t.Fatalf("Lookup(name with one private address) = %v; want blocked naming it", err)
	}
	addrs, err := g.Lookup(ctx, "good.test", 443)
	if err != nil || len(addrs) != 1 || addrs[0].String() != "8.8.4.4" {
		t.Fatalf("Lookup(pinned) = %v, %v", addrs, err)
	}
	// A pin applies to its port only.
	if _, err := g.Lookup(ctx, "127.0.0.1", 80); !errors.Is(err, ErrBlocked) {
		t.Fatalf("Lookup(127.0.0.1) = %v; want blocked", err)
	}
	for _, bad := range []string{"nope", "a:b:c", "h:70000:1.2.3.4", "h:443:notanip"} {
		if _, err := New(Options{Resolve: []string{bad}}); err == nil {
			t.Errorf("New(--resolve %q) accepted", bad)
		}
	}
}

func TestDialContextRefusesBeforeConnecting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g, _ := New(Options{})
	if _, err := g.DialContext(context.Background(), "tcp", ln.Addr().String()); !errors.Is(err, ErrBlocked) {
		t.Fatalf("DialContext(loopback) = %v; want blocked", err)
	}
	p, _ := ParseAllowRange("127.0.0.1/32")
	g, _ = New(Options{AllowRanges: []netip.Prefix{p}})
	c, err := g.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("DialContext(loopback, allowed) = %v", err)
	}
	c.Close()
}

// Addresses checked once are what the dial uses: the name is not resolved
// again (here it could not be: it is pinned nowhere and does not exist).
func TestDialContextUsesCheckedAddresses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.2:0") // the connection's source is 127.0.0.1
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	g, _ := New(Options{})
	ctx := WithChecked(context.Background(), "nowhere.invalid", port, []netip.Addr{netip.MustParseAddr("127.0.0.2")})
	c, err := g.DialContext(ctx, "tcp", net.JoinHostPort("nowhere.invalid", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("DialContext with checked addresses: %v", err)
	}
	c.Close()
	// For another host:port the carried addresses do not apply.
	if _, err := g.DialContext(ctx, "tcp", "127.0.0.1:1"); !errors.Is(err, ErrBlocked) {
		t.Fatalf("DialContext(127.0.0.1:1) = %v; want the guard to check it", err)
	}
}

// A connection whose source address is its destination went to one of the
// host's own addresses, whatever Self listed when the proxy started (an
// address the host took since): refused unless an allow range names it.
func TestDialRefusesTheHostItself(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // dialled from 127.0.0.1
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	self := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	g, _ := New(Options{})
	if c, err := g.Dial(context.Background(), self, port); !errors.Is(err, ErrBlocked) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("Dial(127.0.0.1 from 127.0.0.1) = %v; want blocked", err)
	}
	// Nor by a range opened for others that holds it.
	wide, _ := ParseAllowRange("127.0.0.0/8")
	g, _ = New(Options{AllowRanges: []netip.Prefix{wide}})
	if c, err := g.Dial(context.Background(), self, port); !errors.Is(err, ErrBlocked) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("Dial(127.0.0.1 from 127.0.0.1, --allow-range 127.0.0.0/8) = %v; want blocked", err)
	}
	p, _ := ParseAllowRange("127.0.0.1/32")
	g, _ = New(Options{AllowRanges: []netip.Prefix{p}})
	c, err := g.Dial(context.Background(), self, port)
	if err != nil {
		t.Fatalf("Dial(127.0.0.1, allowed) = %v", err)
	}
	c.Close()
}

// A port out of range is refused, not cut to 16 bits (65979 is 443 to a
// uint16), and Dial with nothing to dial is an error, never a nil
// connection without one.
func TestPortRangeAndNoAddresses(t *testing.T) {
	g, err := New(Options{Resolve: []string{"good.test:443:8.8.4.4"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, port := range []int{0, -1, 65536, 65536 + 443} {
		if addrs, err := g.Lookup(ctx, "8.8.4.4", port); err == nil {
			t.Errorf("Lookup(8.8.4.4, port %d) = %v; want refused", port, addrs)
		}
		if c, err := g.Dial(ctx, []netip.Addr{netip.MustParseAddr("127.0.0.1")}, port); err == nil {
			c.Close()
			t.Errorf("Dial(port %d) connected; want refused", port)
		}
	}
	if c, err := g.Dial(ctx, nil, 443); c != nil || err == nil {
		t.Errorf("Dial(no addresses) = %v, %v; want an error", c, err)
	}
}
