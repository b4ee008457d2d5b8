package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Network is a sandbox's own network namespace, made by the launcher before
// the sandboxed process exists, with the proxy's listener already inside.
type Network struct {
	NS       netns.NsHandle
	Listener net.Listener // 127.0.0.1:port inside the namespace; nil for --net none
}

// NewNetwork creates a network namespace with only loopback up and, when
// port is non-zero, a TCP listener on 127.0.0.1:port inside it. The
// namespace is entered on one locked thread and left before returning: the
// proxy serves the listener from the host namespace's goroutines, so its
// upstream dials leave from the host, and the sandbox has no route at all.
func NewNetwork(port int) (*Network, error) {
	type result struct {
		n   *Network
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		n, err, restored := newNetwork(port)
		if restored {
			runtime.UnlockOSThread()
		} // else: the thread stays locked and dies with the goroutine
		ch <- result{n, err}
	}()
	r := <-ch
	return r.n, r.err
}

func newNetwork(port int) (n *Network, err error, restored bool) {
	orig, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("current netns: %w", err), true
	}
	defer orig.Close()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return nil, &os.SyscallError{Syscall: "unshare(CLONE_NEWNET)", Err: err}, true
	}
	defer func() {
		if e := netns.Set(orig); e != nil {
			err, restored = fmt.Errorf("setns back to the host namespace: %w", e), false
			return
		}
		restored = true
	}()
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("sandbox netns: %w", err), false
	}
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("bring up lo in the sandbox namespace: %w", err), false
	}
	n = &Network{NS: ns}
	if port != 0 {
		// Its clients are the sandbox's processes: no keepalive probes
		// (four setsockopt calls per accept) for peers on the same host.
		ln, err := (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp4", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			ns.Close()
			return nil, fmt.Errorf("proxy listener in the sandbox namespace: %w", err), false
		}
		n.Listener = ln
	}
	return n, nil, false
}

// Close releases the namespace handle and the listener.
func (n *Network) Close() {
	if n.Listener != nil {
		n.Listener.Close()
	}
	n.NS.Close()
}
