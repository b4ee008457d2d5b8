package proxy

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/airlock-sandbox/airlock/proxy/identity"
	"golang.org/x/sys/unix"
)

// fdsPerConn is the most descriptors one client connection holds: an
// opaque tunnel's two sockets. A plain or inspected connection holds its
// socket and one upstream connection at a time.
const fdsPerConn = 2

// What the proxy holds besides its sandboxes' connections: idle upstream
// connections and a margin for listeners, the audit log,
// metrics, netlink and BPF.
const (
	maxIdleUpstream = 256
	fdMargin        = 256
)

// fdsNeeded is the most descriptors `sandboxes` sandboxes of maxConns
// connections each can hold: their connections, the refusals lingering
// past the limit, the /proc directories each identity resolver keeps
// open, and the proxy's own.
func fdsNeeded(maxConns, sandboxes int) uint64 {
	// Saturating: a --max-conns near 2^63 must not wrap to a small need,
	// and with it the warning that no limit can hold it.
	per := satAdd(satMul(uint64(maxConns), fdsPerConn), maxRefusing+identity.ProcCacheSize)
	return satAdd(satMul(uint64(sandboxes), per), maxIdleUpstream+fdMargin)
}

func satMul(a, b uint64) uint64 {
	if hi, lo := bits.Mul64(a, b); hi == 0 {
		return lo
	}
	return math.MaxUint64
}

func satAdd(a, b uint64) uint64 {
	if sum, carry := bits.Add64(a, b, 0); carry == 0 {
		return sum
	}
	return math.MaxUint64
}

// EnsureFDs checks that the process may open the descriptors sandboxes
// sandboxes at maxConns connections each can hold, raising the soft
// RLIMIT_NOFILE toward the hard one if it must (Go already raises it at
// start-up, to one below the hard limit). When even the hard limit is
// short, it returns a warning naming the numbers and the fix: past it the
// proxy fails new connections before --max-conns answers 503 (closed, but
// as identity_unknown or an upstream error, which names the wrong cause).
// It is a warning, not a refusal, because the count is a worst case (every
// connection holding an upstream one). err is a failed syscall.
func EnsureFDs(maxConns, sandboxes int) (warning string, err error) {
	need := fdsNeeded(maxConns, sandboxes)
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return "", fmt.Errorf("getrlimit(RLIMIT_NOFILE): %w", err)
	}
	if lim.Cur >= need {
		return "", nil
	}
	if lim.Max >= need {
		raised := lim
		raised.Cur = need
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &raised); err != nil {
			return "", fmt.Errorf("setrlimit(RLIMIT_NOFILE, %d): %w", need, err)
		}
		return "", nil
	}
	fixed := fdsNeeded(0, sandboxes)
	fits := 0
	if lim.Max > fixed {
		fits = int((lim.Max - fixed) / (uint64(sandboxes) * fdsPerConn))
	}
	return fmt.Sprintf("--max-conns %d for %d sandbox(es) may need %d file descriptors (%d per connection, plus %d for the proxy), but RLIMIT_NOFILE allows %d (hard limit): past that, new connections fail before --max-conns answers 503; raise it (ulimit -n %d, systemd LimitNOFILE=%d) or lower --max-conns to at most %d",
		maxConns, sandboxes, need, fdsPerConn, fixed, lim.Max, need, need, fits), nil
}
