package fakedns

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"
)

// clock is a Pool clock the test steps by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time       { return c.t }
func (c *clock) step(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                { return &clock{t: time.Unix(1e9, 0)} }
func mustAddr(t *testing.T, p *Pool, name string, v6 bool) netip.Addr {
	t.Helper()
	a, err := p.Addr(name, v6)
	if err != nil {
		t.Fatalf("Addr(%q, v6=%v): %v", name, v6, err)
	}
	return a
}
func stepped(t *testing.T, c PoolConfig) (*Pool, *clock) {
	t.Helper()
	p, err := NewPool(c)
	if err != nil {
		t.Fatalf("NewPool(%+v): %v", c, err)
	}
	clk := newClock()
	p.now = clk.now
	p.v4.start, p.v6.start = 0, 0 // the walk from the first address, for tests that follow it
	unmetered(p)
	return p, clk
}

// unmetered lets p hand out new names as fast as it is asked, for tests of
// what follows from many names (TestPoolMetersNewNames tests the meter).
func unmetered(p *Pool) { p.newNames = bucket{rate: 1e18, burst: 1e18, tokens: 1e18} }

// A flood of new names is metered (the default pool: about 55 a second
// after 8,192 at once): beyond that a new name gets ErrExhausted, and the
// names already remembered still answer, so a flood of fresh names neither
// evicts the names others use nor runs the pool out of addresses.
func TestPoolMetersNewNames(t *testing.T) {
	p, err := NewPool(PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	p.now = clk.now
	known := mustAddr(t, p, "db.victim.test", false)
	for i := range 8191 {
		mustAddr(t, p, fmt.Sprintf("n%d.flood.test", i), false)
	}
	if a, err := p.Addr("over.flood.test", false); !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), "faster than") {
		t.Fatalf("Addr of a new name past the burst = %s, %v; want ErrExhausted, metered", a, err)
	}
	if a := mustAddr(t, p, "db.victim.test", false); a != known {
		t.Fatalf("a remembered name = %s; want %s still", a, known)
	}
	mustAddr(t, p, "db.victim.test", true) // its other family is no new name
	clk.step(time.Second)
	got := 0
	for i := range 100 {
		if _, err := p.Addr(fmt.Sprintf("m%d.flood.test", i), false); err == nil {
			got++
		}
	}
	if want := int(float64(DefaultMax) / (2 * DefaultTTL.Seconds())); got != want {
		t.Fatalf("a second later, %d new names; want %d", got, want)
	}
}

// A pool hands out its first addresses from a random place: made again
// (a proxy restarted under running clients), its first names do not get
// the addresses the last one's clients may still hold for other names.
// From any place, a walk hands out every address of the span once.
func TestPoolStartsAtRandom(t *testing.T) {
	firsts := map[netip.Addr]bool{}
	for range 20 {
		p, err := NewPool(PoolConfig{})
		if err != nil {
			t.Fatal(err)
		}
		firsts[mustAddr(t, p, "db.internal.test", false)] = true
	}
	if len(firsts) == 1 {
		t.Fatalf("20 pools gave their first name the same address %v; want each its own place", firsts)
	}
	p, err := NewPool(PoolConfig{V4: netip.MustParsePrefix("10.9.0.0/29"), V6: netip.MustParsePrefix("fd00::/125"), Max: 3})
	if err != nil {
		t.Fatal(err)
	}
	unmetered(p)
	p.v4.start = 4
	seen := map[netip.Addr]bool{}
	for i := range 6 {
		a := mustAddr(t, p, fmt.Sprintf("n%d.test", i), false)
		if seen[a] || a == netip.MustParseAddr("10.9.0.0") || a == netip.MustParseAddr("10.9.0.7") {
			t.Fatalf("address %d of a walk from the middle = %s (seen %v); want each of .1 to .6 once", i, a, seen)
		}
		seen[a] = true
	}
}

func TestPoolStableMappingBothFamilies(t *testing.T) {
	p, _ := stepped(t, PoolConfig{})
	names := []string{"api.example.test", "b.example.test", "c.example.test"}
	seen := map[netip.Addr]string{}
	for _, n := range names {
		for _, v6 := range []bool{false, true} {
			a := mustAddr(t, p, n, v6)
			pf := DefaultV4
			if v6 {
				pf = DefaultV6
			}
			if !pf.Contains(a) {
				t.Errorf("Addr(%q, v6=%v) = %s; want an address of %s", n, v6, a, pf)
			}
			if again := mustAddr(t, p, n, v6); again != a {
				t.Errorf("Addr(%q, v6=%v) = %s, then %s; want the same", n, v6, a, again)
			}
			if other, dup := seen[a]; dup {
				t.Errorf("Addr(%q, v6=%v) = %s, already %q's", n, v6, a, other)
			}
			seen[a] = n
		}
	}
	for a, n := range seen {
		if got, syn := p.Name(a); got != n || !syn {
			t.Errorf("Name(%s) = %q, %v; want %q, true", a, got, syn, n)
		}
	}
	// An IPv4-mapped spelling is the same address.
	a := mustAddr(t, p, names[0], false)
	if got, syn := p.Name(netip.AddrFrom16(a.As16())); got != names[0] || !syn {
		t.Errorf("Name(%s as IPv4-mapped) = %q, %v; want %q, true", a, got, syn, names[0])
	}
}

func TestPoolNameOfOtherAddresses(t *testing.T) {
	p, _ := stepped(t, PoolConfig{})
	mustAddr(t, p, "a.test", false)
	mustAddr(t, p, "a.test", true)
	for _, tc := range []struct {
		addr      string
		synthetic bool
	}{
		{"192.0.2.1", false},
		{"127.0.0.1", false},
		{"198.17.255.255", false},
		{"198.20.0.0", false},
		{"2001:db8::1", false},
		{"fd61:6972:6c6b:5301::1", false},
		{"198.19.200.7", true}, // in the pool, never handed out
		{"fd61:6972:6c6b:5300::9999", true},
	} {
		name, syn := p.Name(netip.MustParseAddr(tc.addr))
		if name != "" || syn != tc.synthetic {
			t.Errorf("Name(%s) = %q, %v; want \"\", %v", tc.addr, name, syn, tc.synthetic)
		}
	}
}

// A name is remembered for the TTL since its last answer or use; then its
// address is synthetic but nameless, and the name gets a new address.
func TestPoolExpiry(t *testing.T) {
	const ttl = time.Minute
	p, clk := stepped(t, PoolConfig{TTL: ttl})
	a := mustAddr(t, p, "kept.test", false)
	b := mustAddr(t, p, "dropped.test", true)
	for range 3 {
		clk.step(ttl / 2)
		if name, _ := p.Name(a); name != "kept.test" { // a use refreshes it
			t.Fatalf("Name(%s) after %v = %q; want kept.test", a, ttl/2, name)
		}
	}
	if name, syn := p.Name(b); name != "" || !syn {
		t.Errorf("Name(%s) after its TTL = %q, %v; want \"\", true (forgotten)", b, name, syn)
	}
	if p.len() != 1 {
		t.Errorf("Len() = %d after one name expired; want 1", p.len())
	}
	if again := mustAddr(t, p, "dropped.test", true); again == b {
		t.Errorf("Addr(dropped.test) after expiry = %s, its old address; want a new one", again)
	}
	clk.step(ttl)
	if p.len() != 0 {
		t.Errorf("Len() = %d after every TTL; want 0", p.len())
	}
}

// A flood of unique names keeps Max of them; the least recently used go
// first, their addresses with them, and the heap does not grow with the
// flood.
func TestPoolFloodIsBounded(t *testing.T) {
	const max, flood = 1000, 100_000
	p, _ := stepped(t, PoolConfig{Max: max})
	kept := mustAddr(t, p, "kept.test", false)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range flood {
		mustAddr(t, p, fmt.Sprintf("n%d.flood.test", i), i%2 == 0)
		if i%(max/2) == 0 {
			p.Name(kept) // used often enough to stay
		}
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := p.names.Len(); n != max {
		t.Errorf("%d names remembered after a flood of %d; want Max = %d", n, flood, max)
	}
	if n := len(p.addrs); n > max {
		t.Errorf("%d addresses mapped after a flood of %d; want at most Max = %d", n, flood, max)
	}
	if name, _ := p.Name(kept); name != "kept.test" {
		t.Errorf("Name(%s) = %q after the flood; want kept.test, used throughout", kept, name)
	}
	if name, syn := p.Name(netip.MustParseAddr("198.18.0.2")); name != "" || !syn {
		t.Errorf("the first flooded name's address = %q, %v; want forgotten", name, syn)
	}
	// Remembering all of them would hold 100 000 entries (tens of MB);
	// Max of them are about 200 KB.
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 4<<20 {
		t.Errorf("heap grew by %d bytes over a flood of %d names; want it bounded by Max", grew, flood)
	}
}

// A forgotten address is quarantined: it is handed out again only when
// every address has been once and its quarantine (the answers' TTL and a
// margin) is over; until then a new name gets ErrExhausted. Addresses
// still remembered are never handed out.
func TestPoolQuarantine(t *testing.T) {
	p, clk := stepped(t, PoolConfig{V4: netip.MustParsePrefix("10.9.0.0/29"), V6: netip.MustParsePrefix("fd00::/125"), Max: 3})
	// /29: .1 to .6 are handed out (not .0, nor the broadcast .7).
	var got []string
	for i := range 6 {
		got = append(got, mustAddr(t, p, fmt.Sprintf("n%d.test", i), false).String())
	}
	if want := "[10.9.0.1 10.9.0.2 10.9.0.3 10.9.0.4 10.9.0.5 10.9.0.6]"; fmt.Sprint(got) != want {
		t.Errorf("addresses over a walk = %v; want %s", got, want)
	}
	// n0, n1, n2 are forgotten (Max 3): their addresses wait.
	if a, err := p.Addr("n6.test", false); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Addr(n6.test) with every address remembered or quarantined = %s, %v; want ErrExhausted", a, err)
	}
	if p.len() != 3 {
		t.Errorf("Len() = %d after a name got no address; want 3 (it is not remembered)", p.len())
	}
	clk.step(p.quarantine - time.Second)
	p.Name(netip.MustParseAddr("10.9.0.5")) // keeps n4
	if a, err := p.Addr("n6.test", false); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Addr(n6.test) a second before the quarantine ends = %s, %v; want ErrExhausted", a, err)
	}
	clk.step(time.Second)
	// Now .1, .2, .3 are free, in the order they were forgotten; n6 and
	// n7 evict n3 (.4) and n5 (.6), quarantined from now: m0 waits.
	for i, want := range []string{"10.9.0.1", "10.9.0.2", "10.9.0.3"} {
		p.Name(netip.MustParseAddr("10.9.0.5"))
		if a := mustAddr(t, p, fmt.Sprintf("n%d.test", 6+i), false); a.String() != want {
			t.Errorf("Addr(n%d.test) after the quarantine = %s; want %s", 6+i, a, want)
		}
	}
	if a, err := p.Addr("m0.test", false); !errors.Is(err, ErrExhausted) {
		t.Errorf("Addr(m0.test) = %s, %v; want ErrExhausted (.4 and .6 were just forgotten)", a, err)
	}
	if name, _ := p.Name(netip.MustParseAddr("10.9.0.5")); name != "n4.test" {
		t.Errorf("Name(10.9.0.5) = %q; want n4.test, never reused while remembered", name)
	}
	// IPv6 never hands out the prefix's own address either.
	if a := mustAddr(t, p, "v6.test", true); a != netip.MustParseAddr("fd00::1") {
		t.Errorf("first IPv6 address = %s; want fd00::1", a)
	}
}

// A flood of new names that walks the whole default pool does not hand a
// victim's address, forgotten by the flood, to another name while a
// client may still hold it: the flood gets ErrExhausted instead, and the
// address is reused only after its quarantine.
func TestPoolFloodDoesNotReuseForgotten(t *testing.T) {
	p, clk := stepped(t, PoolConfig{})
	victim := mustAddr(t, p, "db.victim.test", false)
	var exhausted int
	for i := range p.v4.span + 100 {
		a, err := p.Addr(fmt.Sprintf("n%d.flood.test", i), false)
		switch {
		case errors.Is(err, ErrExhausted):
			exhausted++
		case err != nil:
			t.Fatal(err)
		case a == victim:
			t.Fatalf("flooded name %d got the victim's address %s, forgotten moments ago", i, a)
		}
	}
	if exhausted == 0 {
		t.Fatalf("a flood of %d names wrapped a pool of %d without ErrExhausted", p.v4.span+100, p.v4.span)
	}
	if name, syn := p.Name(victim); name != "" || !syn {
		t.Errorf("Name(%s) after the flood = %q, %v; want forgotten", victim, name, syn)
	}
	clk.step(p.quarantine)
	if a := mustAddr(t, p, "next.test", false); a != victim {
		t.Errorf("Addr(next.test) after the quarantine = %s; want %s, the first forgotten", a, victim)
	}
	if n := len(p.v4.forgotten); uint64(n) > p.v4.span {
		t.Errorf("%d addresses queued in quarantine; want at most the pool's %d", n, p.v4.span)
	}
}

func TestNewPoolRefuses(t *testing.T) {
	for _, c := range []PoolConfig{
		{V4: netip.MustParsePrefix("10.0.0.0/29"), Max: 6}, // 6 usable, not more than Max
		{V4: netip.MustParsePrefix("10.0.0.1/24")},         // not masked
		{V4: DefaultV6}, // wrong family
		{V6: DefaultV4}, // wrong family
		{V6: netip.MustParsePrefix("::ffff:10.0.0.0/120")}, // IPv4-mapped
		{V4: netip.MustParsePrefix("10.0.0.0/31"), Max: 1}, // no room
		{Max: -1},
		{TTL: -time.Second},
	} {
		if _, err := NewPool(c); err == nil {
			t.Errorf("NewPool(%+v) = nil error; want a refusal", c)
		}
	}
}
