package origdst

import (
	"net/netip"
	"runtime"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// inNewNamespace runs f on a locked thread in a new network namespace
// with loopback up. The thread is never unlocked: it dies with its
// goroutine, and the namespace with it.
func inNewNamespace(f func() (netip.AddrPort, error)) (netip.AddrPort, error) {
	type result struct {
		ap  netip.AddrPort
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- result{err: err}
			return
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		if err != nil {
			ch <- result{err: err}
			return
		}
		ap, err := f()
		ch <- result{ap, err}
	}()
	r := <-ch
	return r.ap, r.err
}

// redirect443 redirects, in the calling thread's namespace, tcp dport 443
// (and 444) → :port, in the output hook.
func redirect443(port uint16) error {
	ns, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(ns)
	return testutil.RedirectTCP(ns, int(port), 443, 444)
}
