package identity

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/eintr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// sockDiag asks NETLINK_SOCK_DIAG for one TCP socket by its exact 4-tuple.
// Not a dump: a request without NLM_F_DUMP makes the kernel look the socket
// up in its hash table, where a dump (what most libraries send) walks every
// socket of the namespace.
type sockDiag struct {
	mu  sync.Mutex // one request in flight per socket
	fd  int
	seq uint32
	buf []byte
}

const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	tcpListen        = 10 // TCP_LISTEN
	tcpTimeWait      = 6  // TCP_TIME_WAIT
	// connectedStates asks for every TCP state but LISTEN and TIME_WAIT:
	// neither is a client connection with an owner.
	connectedStates = 0xfff &^ (1<<tcpListen | 1<<tcpTimeWait)
	inetDiagReqLen  = 56 // struct inet_diag_req_v2
	inetDiagMsgLen  = 72 // struct inet_diag_msg
	noCookie        = ^uint32(0)
)

// diagSocket is the kernel's answer: the socket's inode, owner uid and
// cookie (the id BPF programs see for the same socket).
type diagSocket struct {
	inode  uint32
	uid    uint32
	cookie uint64
}

// openSockDiag opens the netlink socket inside ns (sock_diag only sees the
// namespace its socket was created in). A closed handle means the current
// namespace.
func openSockDiag(ns netns.NsHandle) (*sockDiag, error) {
	if !ns.IsOpen() {
		return newSockDiag()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("current netns: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		return nil, fmt.Errorf("setns to the listener's netns: %w", err)
	}
	d, derr := newSockDiag()
	if err := netns.Set(orig); err != nil {
		// This thread is in the wrong namespace now; it must not be
		// reused. Keeping it locked makes the runtime retire it.
		runtime.LockOSThread()
		if d != nil {
			unix.Close(d.fd)
		}
		return nil, fmt.Errorf("setns back: %w", err)
	}
	return d, derr
}

func newSockDiag() (*sockDiag, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("socket(NETLINK_SOCK_DIAG): %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind(NETLINK_SOCK_DIAG): %w", err)
	}
	tv := unix.Timeval{Sec: 2}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return &sockDiag{fd: fd, buf: make([]byte, 8192)}, nil
}

func (d *sockDiag) Close() { unix.Close(d.fd) }

var errNoSocket = errors.New("no such socket")

// lookup finds the TCP socket whose source is src and destination dst.
func (d *sockDiag) lookup(src, dst netip.AddrPort) (diagSocket, error) {
	family := uint8(unix.AF_INET)
	if src.Addr().Is6() || dst.Addr().Is6() {
		family = unix.AF_INET6
		src, dst = mapped(src), mapped(dst)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	req := make([]byte, unix.NLMSG_HDRLEN+inetDiagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], sockDiagByFamily)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], d.seq)
	r := req[unix.NLMSG_HDRLEN:]
	r[0], r[1] = family, unix.IPPROTO_TCP
	ne.PutUint32(r[4:], connectedStates)
	putSockID(r[8:], src, dst)
	// The receive timeout makes a signal end a wait with EINTR (never
	// restarted): a lookup is repeated then, not failed into a denial.
	if err := eintr.Do(func() error { return unix.Sendto(d.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}) }); err != nil {
		return diagSocket{}, fmt.Errorf("sock_diag send: %w", err)
	}
	for {
		n, err := eintr.Retry(func() (int, error) {
			n, _, err := unix.Recvfrom(d.fd, d.buf, 0)
			return n, err
		})
		if err != nil {
			return diagSocket{}, fmt.Errorf("sock_diag receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(d.buf[:n])
		if err != nil {
			return diagSocket{}, fmt.Errorf("sock_diag parse: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != d.seq {
				continue // a late answer to an earlier, timed-out request
			}
			switch m.Header.Type {
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if errno := -int32(ne.Uint32(m.Data)); errno != 0 {
						if unix.Errno(errno) == unix.ENOENT {
							return diagSocket{}, errNoSocket
						}
						return diagSocket{}, fmt.Errorf("sock_diag: %w", unix.Errno(errno))
					}
				}
				return diagSocket{}, errNoSocket
			case sockDiagByFamily:
				if len(m.Data) < inetDiagMsgLen {
					return diagSocket{}, errors.New("sock_diag: short answer")
				}
				// The kernel's exact lookup falls back to a listening
				// socket bound to the source address: only an answer for
				// this very connection counts.
				want := make([]byte, 48)
				if family == unix.AF_INET && m.Data[0] == unix.AF_INET6 {
					// A dual-stack socket (AF_INET6, as Java's are)
					// connected to an IPv4 address: the kernel finds it
					// by the IPv4 ends and names them IPv4-mapped.
					putSockID(want, mapped(src), mapped(dst))
				} else {
					putSockID(want, src, dst)
				}
				if m.Data[1] == tcpListen || !bytes.Equal(m.Data[4:4+36], want[:36]) {
					return diagSocket{}, errNoSocket
				}
				return diagSocket{
					uid:    ne.Uint32(m.Data[64:]),
					inode:  ne.Uint32(m.Data[68:]),
					cookie: uint64(ne.Uint32(m.Data[44:])) | uint64(ne.Uint32(m.Data[48:]))<<32,
				}, nil
			}
		}
	}
}

// mapped is a in its 16-byte form (an IPv4 address IPv4-mapped).
func mapped(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16(a.Addr().As16()), a.Port())
}

// putSockID writes a struct inet_diag_sockid: ports and addresses in
// network byte order, then interface and cookie.
func putSockID(b []byte, src, dst netip.AddrPort) {
	binary.BigEndian.PutUint16(b[0:], src.Port())
	binary.BigEndian.PutUint16(b[2:], dst.Port())
	s, t := src.Addr().AsSlice(), dst.Addr().AsSlice()
	copy(b[4:20], s)
	copy(b[20:36], t)
	binary.NativeEndian.PutUint32(b[36:], 0) // any interface
	binary.NativeEndian.PutUint32(b[40:], noCookie)
	binary.NativeEndian.PutUint32(b[44:], noCookie)
}
