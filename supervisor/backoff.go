package supervisor

import (
	"math"
	"math/rand/v2"
	"time"
)

// backoff spaces a service's restarts: initial, then multiplied by mult
// each time up to max, each delay spread by ±jitter so that services
// failing together (a shared dependency went away) do not restart in
// lockstep.
type backoff struct {
	initial, max time.Duration
	mult, jitter float64
	next         time.Duration
}

func (b *backoff) delay() time.Duration {
	if b.next == 0 {
		b.next = b.initial
	}
	d := b.next
	// In floating point first: a product past time.Duration's range
	// would convert to a negative delay, no delay at all.
	b.next = durationAtMost(float64(b.next)*b.mult, b.max)
	if b.jitter > 0 {
		d = durationAtMost(float64(d)*(1+b.jitter*(2*rand.Float64()-1)), math.MaxInt64)
	}
	return d
}

// durationAtMost is f nanoseconds, or limit when f is more.
func durationAtMost(f float64, limit time.Duration) time.Duration {
	if f >= float64(limit) {
		return limit
	}
	return time.Duration(f)
}

// reset starts over at initial: the service ran healthy again.
func (b *backoff) reset() { b.next = 0 }

// crashLoop gives up on a service restarted more than max times within
// window: restarting it again would only burn the host.
type crashLoop struct {
	max    int
	window time.Duration
	times  []time.Time
}

// restart records a restart at now and reports whether it is one too many.
func (c *crashLoop) restart(now time.Time) bool {
	keep := c.times[:0]
	for _, t := range c.times {
		if now.Sub(t) < c.window {
			keep = append(keep, t)
		}
	}
	c.times = append(keep, now)
	return len(c.times) > c.max
}

// reset forgets the restarts: an operator revived the service.
func (c *crashLoop) reset() { c.times = nil }
