package testutil

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// ListenIn listens on TCP addr inside the network namespace at path ns
// (such as /run/netns/NAME): a socket stays in the namespace it was made
// in, so the listener serves there while the test goes on in its own.
// The listener is closed when the test ends.
func ListenIn(t testing.TB, ns, addr string) net.Listener {
	t.Helper()
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread moves into ns: it goes back before it is released,
		// or, if it cannot, stays locked and dies with the goroutine, so
		// no other goroutine runs in ns by mistake.
		runtime.LockOSThread()
		ln, restored, err := listenIn(ns, addr)
		if restored {
			runtime.UnlockOSThread()
		}
		ch <- result{ln, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, ns, r.err)
	}
	t.Cleanup(func() { r.ln.Close() })
	return r.ln
}

func listenIn(ns, addr string) (ln net.Listener, restored bool, err error) {
	orig, err := netns.Get()
	if err != nil {
		return nil, true, fmt.Errorf("current netns: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromPath(ns)
	if err != nil {
		return nil, true, err
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return nil, true, fmt.Errorf("setns %s: %w", ns, err)
	}
	ln, err = net.Listen("tcp", addr)
	if e := netns.Set(orig); e != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, false, errors.Join(err, fmt.Errorf("setns back: %w", e))
	}
	return ln, true, err
}
