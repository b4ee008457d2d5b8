package fakedns

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// The default pools. 198.18.0.0/15 is reserved for benchmarking (RFC
// 2544), so no real destination is hidden behind a synthetic address;
// the IPv6 pool is a /64 of airlock's own ULA (fd61:6972:6c6b::/48, "airlk"),
// beside the address the sandbox's route device holds.
var (
	DefaultV4 = netip.MustParsePrefix("198.18.0.0/15")
	DefaultV6 = netip.MustParsePrefix("fd61:6972:6c6b:5300::/64")
)

// Defaults for PoolConfig's zero fields.
const (
	DefaultMax = 65536
	DefaultTTL = 10 * time.Minute
)

// PoolConfig sizes a Pool. Zero fields take the defaults.
type PoolConfig struct {
	V4, V6 netip.Prefix
	// Max is how many names are remembered at once; the least recently
	// used is forgotten first. Each pool must hold more addresses than
	// Max, so that a free one always exists.
	Max int
	// TTL is how long a name is remembered since it was last answered or
	// its address last used.
	TTL time.Duration
}

// Pool maps names to synthetic addresses and back. A name keeps its
// addresses while it is remembered; a forgotten name's addresses are not
// handed out again until allocation has walked the whole pool back to
// them, so a client holding a stale address reaches nothing (Name says it
// is forgotten) rather than another name.
type Pool struct {
	ttl time.Duration
	now func() time.Time // time.Now; tests step it

	mu     sync.Mutex
	names  *simplelru.LRU[string, *entry] // most recently used first
	addrs  map[netip.Addr]*entry          // both families
	v4, v6 family
}

// entry is one remembered name; an address is allocated for a family the
// first time the name is asked for in it.
type entry struct {
	name   string
	v4, v6 netip.Addr
	used   time.Time
}

// family is one address pool, walked in order by a cursor.
type family struct {
	prefix netip.Prefix
	first  uint64 // offset of the first address handed out
	span   uint64 // how many addresses are handed out
	next   uint64 // cursor, an offset from first, modulo span
}

// NewPool checks c and builds a Pool.
func NewPool(c PoolConfig) (*Pool, error) {
	if c.V4 == (netip.Prefix{}) {
		c.V4 = DefaultV4
	}
	if c.V6 == (netip.Prefix{}) {
		c.V6 = DefaultV6
	}
	if c.Max == 0 {
		c.Max = DefaultMax
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Max < 0 || c.TTL < 0 {
		return nil, fmt.Errorf("fakedns: pool size %d and TTL %v must not be negative", c.Max, c.TTL)
	}
	p := &Pool{ttl: c.TTL, now: time.Now, addrs: map[netip.Addr]*entry{}}
	var err error
	if p.v4, err = newFamily(c.V4, false, c.Max); err != nil {
		return nil, err
	}
	if p.v6, err = newFamily(c.V6, true, c.Max); err != nil {
		return nil, err
	}
	p.names, err = simplelru.NewLRU(c.Max, p.forget)
	if err != nil {
		return nil, fmt.Errorf("fakedns: %w", err)
	}
	return p, nil
}

func newFamily(pf netip.Prefix, v6 bool, names int) (family, error) {
	if !pf.IsValid() || pf.Addr().Is6() != v6 || pf.Addr().Is4In6() || pf.Addr().Zone() != "" || pf.Masked() != pf {
		return family{}, fmt.Errorf("fakedns: pool %s is not a masked IPv%s prefix", pf, map[bool]string{false: "4", true: "6"}[v6])
	}
	// Offsets are 64 bits: a wider IPv6 pool uses its low 2^63 addresses,
	// more than any Max.
	bits := min(pf.Addr().BitLen()-pf.Bits(), 63)
	f := family{prefix: pf, first: 1, span: 1<<bits - 1} // never the prefix's own address (subnet-router anycast in IPv6)
	if !v6 {
		f.span-- // nor the IPv4 broadcast address
	}
	if bits < 2 || f.span <= uint64(names) {
		return family{}, fmt.Errorf("fakedns: pool %s holds too few addresses for the %d names it must remember", pf, names)
	}
	return f, nil
}

// at is the address offset off from the prefix's.
func (f *family) at(off uint64) netip.Addr {
	b := f.prefix.Addr().As16()
	for i := 15; off > 0; i-- {
		sum := uint64(b[i]) + off&0xff
		b[i] = byte(sum)
		off = off>>8 + sum>>8
	}
	a := netip.AddrFrom16(b)
	if f.prefix.Addr().Is4() {
		return a.Unmap()
	}
	return a
}

// Addr is name's address in the family asked for (v6: AAAA), allocated if
// name has none yet. name must be canonical (policies.CanonicalHost): it
// is the name the policy decides on when the address is used.
func (p *Pool) Addr(name string, v6 bool) netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	p.expire(now)
	e, ok := p.names.Get(name)
	if !ok {
		e = &entry{name: name}
		p.names.Add(name, e) // may evict the least recently used name
	}
	e.used = now
	a, f := &e.v4, &p.v4
	if v6 {
		a, f = &e.v6, &p.v6
	}
	if !a.IsValid() {
		*a = p.allocate(f)
		p.addrs[*a] = e
	}
	return *a
}

// Name maps a back to its name. synthetic is false when a is not from
// either pool: the caller decides it as the literal address it is. A
// synthetic address with an empty name was handed out once and has since
// been forgotten (expired or evicted): the caller must deny, since the name
// it stood for is unknown. A lookup that finds the name refreshes it.
func (p *Pool) Name(a netip.Addr) (name string, synthetic bool) {
	a = a.Unmap()
	if !p.v4.prefix.Contains(a) && !p.v6.prefix.Contains(a) {
		return "", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	p.expire(now)
	e, ok := p.addrs[a]
	if !ok {
		return "", true
	}
	p.names.Get(e.name) // most recently used again
	e.used = now
	return e.name, true
}

// Len is how many names are remembered.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expire(p.now())
	return p.names.Len()
}

// expire forgets the names unused for the TTL. Every use moves a name to
// the front of the LRU and stamps it, so the oldest are the least recently
// stamped and expiry only ever looks at the back.
func (p *Pool) expire(now time.Time) {
	for {
		_, e, ok := p.names.GetOldest()
		if !ok || now.Sub(e.used) < p.ttl {
			return
		}
		p.names.RemoveOldest()
	}
}

// forget is the LRU's eviction callback: the name's addresses are freed.
func (p *Pool) forget(_ string, e *entry) {
	delete(p.addrs, e.v4)
	delete(p.addrs, e.v6)
}

// allocate takes the next free address after the cursor. The pool holds
// more addresses than names are remembered, so one is free; each is
// skipped at most once per walk.
func (p *Pool) allocate(f *family) netip.Addr {
	for {
		a := f.at(f.first + f.next)
		f.next = (f.next + 1) % f.span
		if _, used := p.addrs[a]; !used {
			return a
		}
	}
}
