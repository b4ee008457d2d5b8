package fakedns

import (
	"errors"
	"fmt"
	"math/rand/v2"
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
	// Max: the others are the forgotten names' in quarantine, and a
	// pool runs out (ErrExhausted) when more names than that are
	// forgotten within a quarantine.
	Max int
	// TTL is how long a name is remembered since it was last answered or
	// its address last used.
	TTL time.Duration
}

// quarantineMargin is how much longer than the answers' TTL a forgotten
// address stays unused: a client may keep an answer a little past its TTL
// (a connection begun just before it ran out, a cache that rounds up).
const quarantineMargin = time.Minute

// ErrExhausted is Addr's error when no address may be handed out: every one
// is a remembered name's or was forgotten too recently.
var ErrExhausted = errors.New("fakedns: synthetic address pool exhausted")

// Pool maps names to synthetic addresses and back. A name keeps its
// addresses while it is remembered. A forgotten name's addresses are
// quarantined: not handed out again before a client's cached answer
// naming them has run out (the answers' TTL and quarantineMargin), so a
// client holding a stale address reaches nothing (Name says it is
// forgotten) rather than another name. Addresses never handed out are
// taken first; when none is left and none is out of quarantine, a new
// name gets ErrExhausted rather than a reused address.
type Pool struct {
	ttl        time.Duration
	quarantine time.Duration
	now        func() time.Time // time.Now; tests step it

	mu     sync.Mutex
	names  *simplelru.LRU[string, *entry] // most recently used first
	addrs  map[netip.Addr]*entry          // both families
	v4, v6 family
	// newNames meters names not remembered yet (a token bucket): a
	// sandbox asking for fresh names (one of a wildcard rule's, a
	// random label each) as fast as it can would otherwise evict every
	// other process's names, and run the pool out of addresses.
	newNames bucket
}

// bucket is a token bucket: rate tokens a second, at most burst.
type bucket struct {
	rate, burst, tokens float64
	last                time.Time
}

// take takes a token at now, if there is one.
func (b *bucket) take(now time.Time) bool {
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// entry is one remembered name; an address is allocated for a family the
// first time the name is asked for in it.
type entry struct {
	name   string
	v4, v6 netip.Addr
	used   time.Time
}

// family is one address pool. Its addresses are handed out in order once,
// then again in the order they were forgotten, each after its quarantine.
type family struct {
	prefix netip.Prefix
	first  uint64 // offset of the first address handed out
	span   uint64 // how many addresses are handed out
	next   uint64 // how many were handed out a first time
	start  uint64 // where in the span the first one was
	// forgotten is a FIFO of the addresses forgotten, oldest at head;
	// the quarantine is one duration, so their ends are in order too.
	// Each address is in it at most once: its memory is bounded by span.
	forgotten []forgotten
	head      int
}

type forgotten struct {
	off   uint64    // from first
	until time.Time // end of its quarantine
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
	p := &Pool{ttl: c.TTL, quarantine: time.Duration(answerTTL(c.TTL))*time.Second + quarantineMargin,
		now: time.Now, addrs: map[netip.Addr]*entry{}}
	// At this rate, with its burst, new names fill at most five eighths
	// of the pool within a TTL (they are forgotten after it, unused), and
	// their addresses, quarantine and all, never run out: a flood keeps
	// what it asks for from evicting the names others use, or starving
	// them of addresses.
	p.newNames = bucket{rate: float64(c.Max) / (2 * c.TTL.Seconds()), burst: max(1, float64(c.Max)/8)}
	p.newNames.tokens = p.newNames.burst
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
	// Offsets are 64 bits: a wider IPv6 pool uses its low 2^63 addresses.
	bits := min(pf.Addr().BitLen()-pf.Bits(), 63)
	f := family{prefix: pf, first: 1, span: 1<<bits - 1} // never the prefix's own address (subnet-router anycast in IPv6)
	if !v6 {
		f.span-- // nor the IPv4 broadcast address
	}
	// Every address handed out may wait in the quarantine queue: a pool
	// uses no more than maxSpan (or twice names), which bounds the queue.
	// A /64 has no use for more.
	f.span = min(f.span, max(maxSpan, 2*uint64(names)))
	if bits < 2 || f.span <= uint64(names) {
		return family{}, fmt.Errorf("fakedns: pool %s holds too few addresses for the %d names it must remember", pf, names)
	}
	// Handed out from a random place in the span: a pool made again
	// (a proxy restarted under running clients, a sidecar's) hands out
	// its first names elsewhere than the last one's, whose answers its
	// clients may still hold, so a cached address seldom names another
	// host at once.
	f.start = rand.Uint64N(f.span)
	return f, nil
}

// maxSpan is the most addresses a family hands out (unless names needs
// more): the default IPv4 pool's.
const maxSpan = 1 << 17

// offset is at's inverse: a's offset from the prefix's address.
func (f *family) offset(a netip.Addr) uint64 {
	x, base := a.As16(), f.prefix.Addr().As16()
	var off uint64
	for i := 8; i < 16; i++ { // a span fits in the low 64 bits
		off = off<<8 | uint64(x[i]-base[i])
	}
	return off - f.first
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
// is the name the policy decides on when the address is used. Its error
// wraps ErrExhausted: a name that gets no address is not remembered.
func (p *Pool) Addr(name string, v6 bool) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	p.expire(now)
	f := &p.v4
	if v6 {
		f = &p.v6
	}
	e, ok := p.names.Get(name)
	if ok {
		e.used = now
		if a := e.addr(v6); a.IsValid() {
			return a, nil
		}
	} else if !p.newNames.take(now) {
		return netip.Addr{}, fmt.Errorf("fakedns: no address for %s: %w: new names asked for faster than %.0f a second (after %.0f at once)", name, ErrExhausted, p.newNames.rate, p.newNames.burst)
	}
	a, err := p.allocate(f, now)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("fakedns: no address for %s: %w", name, err)
	}
	if !ok {
		e = &entry{name: name, used: now}
		p.names.Add(name, e) // may evict the least recently used name
	}
	if v6 {
		e.v6 = a
	} else {
		e.v4 = a
	}
	p.addrs[a] = e
	return a, nil
}

func (e *entry) addr(v6 bool) netip.Addr {
	if v6 {
		return e.v6
	}
	return e.v4
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

// len is how many names are remembered.
func (p *Pool) len() int {
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

// forget is the LRU's eviction callback: the name's addresses are
// quarantined.
func (p *Pool) forget(_ string, e *entry) {
	until := p.now().Add(p.quarantine)
	for _, f := range []*family{&p.v4, &p.v6} {
		if a := e.addr(f == &p.v6); a.IsValid() {
			delete(p.addrs, a)
			f.forgotten = append(f.forgotten, forgotten{off: f.offset(a), until: until})
		}
	}
}

// allocate takes an address never handed out or, when none is left, the
// one forgotten first if its quarantine is over.
func (p *Pool) allocate(f *family, now time.Time) (netip.Addr, error) {
	if f.next < f.span {
		rel := (f.start + f.next) % f.span
		f.next++
		return f.at(f.first + rel), nil
	}
	if f.head == len(f.forgotten) || now.Before(f.forgotten[f.head].until) {
		return netip.Addr{}, fmt.Errorf("%w: %s: its %d addresses are remembered names' or were forgotten less than %s ago",
			ErrExhausted, f.prefix, f.span, p.quarantine)
	}
	off := f.forgotten[f.head].off
	f.head++
	if f.head > len(f.forgotten)/2 { // reclaim the queue's dead front
		f.forgotten = append(f.forgotten[:0], f.forgotten[f.head:]...)
		f.head = 0
	}
	return f.at(f.first + off), nil
}
