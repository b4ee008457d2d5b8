// Package origdst reads the tuple a redirected TCP connection's client
// sent. A connection that nftables' redirect (or any DNAT) brought to a
// local listener looks, from the accepted socket, like one to the
// listener's own address, and its source port may be remapped; conntrack
// remembers the original. The kernel hands out its destination through
// SO_ORIGINAL_DST (IPv4) and IP6T_SO_ORIGINAL_DST (IPv6), Of; the whole
// tuple takes a ctnetlink query, Table.Original.
package origdst

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// soOriginalDst is SO_ORIGINAL_DST at SOL_IP and IP6T_SO_ORIGINAL_DST at
// SOL_IPV6: both are 80 (x/sys/unix names only the first).
const soOriginalDst = 80

// Of returns the destination a redirected TCP connection's client asked
// for. c is an accepted connection (a *net.TCPConn) of a listener that is
// either IPv4 or IPv6, never dual-stack: a v4 client of a v6 socket keeps
// its conntrack entry under IPv4, which the v6 query does not find. A
// connection that was not redirected gives its own destination; one that
// conntrack does not track gives an error wrapping ENOENT.
func Of(c syscall.Conn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	var ap netip.AddrPort
	var opErr error
	if err := rc.Control(func(fd uintptr) { ap, opErr = of(int(fd)) }); err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	return ap, opErr
}

func of(fd int) (netip.AddrPort, error) {
	domain, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return netip.AddrPort{}, os.NewSyscallError("getsockopt(SO_DOMAIN)", err)
	}
	switch domain {
	case unix.AF_INET:
		var sa unix.RawSockaddrInet4
		if err := getsockopt(fd, unix.SOL_IP, unsafe.Pointer(&sa), unsafe.Sizeof(sa)); err != nil {
			return netip.AddrPort{}, os.NewSyscallError("getsockopt(SO_ORIGINAL_DST)", err)
		}
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port(sa.Port)), nil
	case unix.AF_INET6:
		var sa unix.RawSockaddrInet6
		if err := getsockopt(fd, unix.SOL_IPV6, unsafe.Pointer(&sa), unsafe.Sizeof(sa)); err != nil {
			return netip.AddrPort{}, os.NewSyscallError("getsockopt(IP6T_SO_ORIGINAL_DST)", err)
		}
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), port(sa.Port)), nil
	}
	return netip.AddrPort{}, fmt.Errorf("original destination: socket family %d is neither IPv4 nor IPv6", domain)
}

func getsockopt(fd, level int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), soOriginalDst, uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// port converts a sockaddr's port, stored in network byte order, to a
// number.
func port(raw uint16) uint16 {
	return binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&raw))[:])
}
