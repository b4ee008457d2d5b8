package proxy

import (
	"math"
	"testing"
)

// The descriptors a limit needs never wrap: a --max-conns near 2^63 needs
// more than any limit, not a few.
func TestFDsNeededSaturates(t *testing.T) {
	if got := fdsNeeded(math.MaxInt64, 1); got != math.MaxUint64 {
		t.Errorf("fdsNeeded(MaxInt64, 1) = %d; want it saturated", got)
	}
	if got := fdsNeeded(1<<40, 1<<30); got != math.MaxUint64 {
		t.Errorf("fdsNeeded(2^40, 2^30) = %d; want it saturated", got)
	}
	if small := fdsNeeded(1024, 1); small < 1024 || small > 1<<20 {
		t.Errorf("fdsNeeded(1024, 1) = %d; want a few thousand", small)
	}
}
