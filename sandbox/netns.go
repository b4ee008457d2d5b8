package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NetworkConfig is what a sandbox's network namespace gets.
type NetworkConfig struct {
	// ProxyPort, when non-zero, is the explicit proxy's port (its
	// listener on 127.0.0.1:ProxyPort) and turns on transparent egress:
	// the redirect, the transparent listeners and the DNS sockets.
	// 0: loopback only (--net none).
	ProxyPort int
	// LocalPorts are further loopback TCP ports the namespace's processes
	// may connect to (a pod's services' ports). With --net none Landlock
	// enforces them; in the transparent network the nft table does.
	LocalPorts []int
}

// Network is a sandbox's own network namespace, made by the launcher before
// the sandboxed process exists, with the proxy's listeners already inside.
type Network struct {
	NS       netns.NsHandle
	Listener net.Listener // explicit proxy, 127.0.0.1:ProxyPort; nil for none
	// Transparent are where the redirect lands: tcp4 127.0.0.1:T and tcp6
	// [::1]:T (one port T, chosen by the kernel). The v6 one only when
	// the kernel has IPv6.
	Transparent []net.Listener
	// DNSPackets (UDP) and DNSStreams (TCP) on 127.0.0.1:D and [::1]:D:
	// where port 53 of any address lands.
	DNSPackets []net.PacketConn
	DNSStreams []net.Listener
}

// NewNetwork creates a network namespace with loopback up and, when
// c.ProxyPort is non-zero, transparent egress (setUpEgress). The namespace
// is entered on one locked thread and left before returning: the proxy
// serves the listeners from the host namespace's goroutines, so its
// upstream dials leave from the host, and the sandbox's only ways out are
// the listeners.
func NewNetwork(c NetworkConfig) (*Network, error) {
	var n *Network
	err := inNamespace(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return &os.SyscallError{Syscall: "unshare(CLONE_NEWNET)", Err: err}
		}
		return nil
	}, func() (err error) {
		n, err = setUpNetwork(c)
		return err
	})
	if err != nil && n != nil {
		n.Close() // made, but the thread could not leave it
		n = nil
	}
	return n, err
}

// setUpNetwork runs in the new namespace: loopback up, then egress.
func setUpNetwork(c NetworkConfig) (*Network, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("sandbox netns: %w", err)
	}
	n := &Network{NS: ns}
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("bring up lo in the sandbox namespace: %w", err)
	}
	if c.ProxyPort != 0 {
		if err := n.setUpEgress(c); err != nil {
			n.Close()
			return nil, err
		}
	}
	return n, nil
}

// DialContext dials addr inside the namespace: the supervisor's health
// checks and ingress reach a service on the pod's 127.0.0.1 this way. The
// socket is made on a thread that has entered the namespace, and a socket
// stays in the namespace it was made in. addr's host must be an IP
// address: nothing resolves names inside the namespace, and a lookup made
// for it would run in the host's.
func (n *Network) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return n.dial(ctx, &net.Dialer{}, network, addr)
}

// DialFrom is DialContext from the address src of the namespace's own (the
// ingress's, IngressSource).
func (n *Network) DialFrom(src netip.Addr) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return n.dial(ctx, d, network, addr)
	}
}

func (n *Network) dial(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s in the sandbox namespace: %w", addr, err)
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return nil, fmt.Errorf("dial %s in the sandbox namespace: %q is not an IP address (names are not resolved there)", addr, host)
	}
	var c net.Conn
	err = inNamespace(n.enter, func() (err error) {
		// One IP address: the dialer makes its one socket on this
		// goroutine, so on this thread.
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	if err != nil && c != nil {
		c.Close() // made, but the thread could not leave the namespace
		c = nil
	}
	return c, err
}

// enter moves the calling thread into the namespace (inNamespace).
func (n *Network) enter() error {
	if err := netns.Set(n.NS); err != nil {
		return fmt.Errorf("setns into the sandbox namespace: %w", err)
	}
	return nil
}

// inNamespace runs enter, then f, on one locked OS thread, and returns the
// thread to the namespace it came from before releasing it: enter moves it
// into a network namespace (unshare or setns), and what f makes there (a
// listener, a socket) stays there. A thread that cannot return stays
// locked and dies with its goroutine, so no other goroutine ever runs in
// the namespace by mistake.
func inNamespace(enter, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restored, err := enterRunLeave(enter, f)
		if restored {
			runtime.UnlockOSThread()
		} // else: the thread stays locked and dies with the goroutine
		ch <- err
	}()
	return <-ch
}

func enterRunLeave(enter, f func() error) (restored bool, err error) {
	orig, err := netns.Get()
	if err != nil {
		return true, fmt.Errorf("current netns: %w", err)
	}
	defer orig.Close()
	defer func() {
		// Also after a failed enter: setns to where the thread is
		// already is harmless, and proves it.
		if e := netns.Set(orig); e != nil {
			restored, err = false, errors.Join(err, fmt.Errorf("setns back to the host namespace: %w", e))
			return
		}
		restored = true
	}()
	if err := enter(); err != nil {
		return false, err
	}
	return false, f()
}

// Close releases the namespace handle and the listeners.
func (n *Network) Close() {
	if n.Listener != nil {
		n.Listener.Close()
	}
	for _, ln := range append(n.Transparent, n.DNSStreams...) {
		ln.Close()
	}
	for _, pc := range n.DNSPackets {
		pc.Close()
	}
	n.NS.Close()
}
