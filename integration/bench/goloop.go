package main

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// goLoop is the floor for a Go proxy built as squid is, where go-relay is
// the floor for one built on goroutines: one event loop on one locked
// thread, level-triggered epoll over non-blocking sockets, from accept
// through the CONNECT, a non-blocking dial and the relay, with no
// goroutine, wake-up or allocation per message, and no identity, policy,
// audit, DNS or limits. What it costs per tunnel is the least airlock's
// opaque path could cost if it were rebuilt that way, on the same
// runtime and kernel (docs/performance.md).
func goLoop(addr string) {
	ln, _, err := loopListen(addr)
	if err != nil {
		os.Exit(1)
	}
	serveLoop(ln)
}

// loopListen opens the loop's non-blocking listener on an IPv4 addr (port
// 0 for any) and says where it listens.
func loopListen(addr string) (fd int, bound string, err error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return -1, "", errors.New("go-loop listens on an IPv4 address and port")
	}
	fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, "", err
	}
	var sa unix.Sockaddr
	if err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err == nil {
		err = unix.Bind(fd, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()})
	}
	if err == nil {
		err = unix.Listen(fd, 1024)
	}
	if err == nil {
		sa, err = unix.Getsockname(fd)
	}
	if err != nil {
		unix.Close(fd)
		return -1, "", err
	}
	in := sa.(*unix.SockaddrInet4)
	return fd, netip.AddrPortFrom(netip.AddrFrom4(in.Addr), uint16(in.Port)).String(), nil
}

// loopSide is one socket of a tunnel: the client's or the upstream's.
type loopSide struct {
	fd   int
	gen  int32 // told apart from an earlier socket with the same number
	peer *loopSide
	// state: reading the CONNECT (client), dialling (upstream), relaying.
	state int
	head  []byte // the CONNECT read so far
	pend  []byte // for this socket, not yet written: the rest of a short write
	eof   bool   // this socket's read side ended
	// watched: in the epoll set. A socket with nothing to wait for is
	// taken out: epoll reports a hang-up whatever it is asked, and one
	// left in would be read while its peer still holds what it sent
	// before (out of order), or wake the loop for ever.
	watched bool
}

const (
	sideHead = iota
	sideDial
	sideRelay
)

// loop is the event loop's state: one per listener, touched by its thread
// only.
type loop struct {
	ep    int
	sides map[int]*loopSide
	gen   int32
	buf   []byte
}

// serveLoop runs the loop on ln until the process ends. The goroutine
// keeps its thread, as squid's one process does: on two CPUs a second
// loop only competed with the load generator (measured).
func serveLoop(ln int) {
	runtime.LockOSThread()
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		os.Exit(1)
	}
	l := &loop{ep: ep, sides: map[int]*loopSide{}, buf: make([]byte, 256<<10)}
	if unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, ln, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(ln)}) != nil {
		os.Exit(1)
	}
	evs := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(ep, evs, -1)
		if err != nil {
			continue // EINTR
		}
		for _, e := range evs[:n] {
			if int(e.Fd) == ln {
				l.accept(ln)
				continue
			}
			// An event for a socket closed earlier in this batch, whose
			// number a new one may have taken since, is dropped.
			s := l.sides[int(e.Fd)]
			if s == nil || s.gen != e.Pad {
				continue
			}
			switch s.state {
			case sideHead:
				l.readHead(s)
			case sideDial:
				l.dialled(s)
			default:
				l.relay(s, e.Events)
			}
		}
	}
}

func (l *loop) watch(s *loopSide, op int, events uint32) {
	unix.EpollCtl(l.ep, op, s.fd, &unix.EpollEvent{Events: events, Fd: int32(s.fd), Pad: s.gen})
	s.watched = op != unix.EPOLL_CTL_DEL
}

// add takes a new socket into the loop. TCP_NODELAY as Go and squid set
// it: without it a tunnel's small messages wait out the delayed ACK.
func (l *loop) add(fd, state int, events uint32) *loopSide {
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	l.gen++
	s := &loopSide{fd: fd, gen: l.gen, state: state}
	l.sides[fd] = s
	l.watch(s, unix.EPOLL_CTL_ADD, events)
	return s
}

// close ends the tunnel s belongs to, both sockets.
func (l *loop) close(s *loopSide) {
	for _, x := range []*loopSide{s, s.peer} {
		if x != nil && x.fd >= 0 {
			delete(l.sides, x.fd)
			unix.Close(x.fd) // also leaves the epoll set
			x.fd = -1
		}
	}
}

func (l *loop) accept(ln int) {
	for {
		fd, _, err := unix.Accept4(ln, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		switch err {
		case nil:
		case unix.EAGAIN:
			return // the backlog is drained
		case unix.EINTR, unix.ECONNABORTED:
			continue
		default:
			// Out of descriptors, say: the listener stays readable and
			// the loop would spin, its CPU taken for the relay's.
			panic("go-loop: accept: " + err.Error())
		}
		l.add(fd, sideHead, unix.EPOLLIN)
	}
}

// readHead reads the client's CONNECT until its blank line, then dials the
// target (an address: go-loop resolves no names) without blocking.
func (l *loop) readHead(c *loopSide) {
	n, err := unix.Read(c.fd, l.buf)
	if err == unix.EAGAIN {
		return
	}
	if err != nil || n == 0 {
		l.close(c)
		return
	}
	c.head = append(c.head, l.buf[:n]...)
	end := bytes.Index(c.head, []byte("\r\n\r\n"))
	if end < 0 {
		if len(c.head) > 8<<10 {
			l.close(c)
		}
		return
	}
	f := strings.Fields(string(c.head[:bytes.IndexByte(c.head, '\r')]))
	if len(f) != 3 || f[0] != "CONNECT" {
		l.close(c)
		return
	}
	target, err := netip.ParseAddrPort(f[1])
	if err != nil || !target.Addr().Is4() {
		l.close(c)
		return
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		l.close(c)
		return
	}
	err = unix.Connect(fd, &unix.SockaddrInet4{Port: int(target.Port()), Addr: target.Addr().As4()})
	if err != nil && err != unix.EINPROGRESS {
		unix.Close(fd)
		l.close(c)
		return
	}
	u := l.add(fd, sideDial, unix.EPOLLOUT)
	// What came after the blank line is the tunnel's first bytes.
	u.pend, c.head = c.head[end+4:], nil
	u.peer, c.peer = c, u
	c.state = sideRelay
	l.rearm(c) // nothing more is read from the client until the 200
}

// dialled answers the CONNECT once the upstream's connect completes.
func (l *loop) dialled(u *loopSide) {
	if v, err := unix.GetsockoptInt(u.fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || v != 0 {
		unix.Write(u.peer.fd, []byte("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n"))
		l.close(u)
		return
	}
	if _, err := unix.Write(u.peer.fd, []byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		l.close(u)
		return
	}
	u.state = sideRelay
	l.rearm(u)
	l.rearm(u.peer)
}

// rearm watches s for what it can do now: be written to while it holds
// bytes for its socket, be read while its read side is open and its peer
// has taken everything read from it before (else the sender waits: no
// buffer grows without bound), and while the peer is dialled.
func (l *loop) rearm(s *loopSide) {
	var ev uint32
	if len(s.pend) > 0 {
		ev |= unix.EPOLLOUT
	}
	if s.readable() {
		ev |= unix.EPOLLIN
	}
	switch {
	case ev == 0 && s.watched:
		l.watch(s, unix.EPOLL_CTL_DEL, 0)
	case ev == 0:
	case s.watched:
		l.watch(s, unix.EPOLL_CTL_MOD, ev)
	default:
		l.watch(s, unix.EPOLL_CTL_ADD, ev)
	}
}

// readable says whether s may be read now: its read side is open, its
// peer is connected and has written everything read from s before.
func (s *loopSide) readable() bool {
	return !s.eof && len(s.peer.pend) == 0 && s.peer.state == sideRelay
}

// relay moves what an event on s allows: its held bytes out, or one read
// from it written to its peer at once, what the peer does not take held.
func (l *loop) relay(s *loopSide, events uint32) {
	if events&unix.EPOLLOUT != 0 {
		w, err := unix.Write(s.fd, s.pend)
		if err != nil && err != unix.EAGAIN {
			l.close(s)
			return
		}
		s.pend = s.pend[max(w, 0):]
		if len(s.pend) == 0 {
			l.rearm(s)
			l.rearm(s.peer)
		}
		return
	}
	if !s.readable() {
		// Watched for room only: a hang-up or an error without it is a
		// reset, and the tunnel is over.
		if events&(unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			l.close(s)
		}
		return
	}
	n, err := unix.Read(s.fd, l.buf)
	switch {
	case err == unix.EAGAIN:
		return
	case err != nil:
		l.close(s)
		return
	case n == 0:
		// A half-close passes on; the second one ends the tunnel.
		s.eof = true
		if s.peer.eof {
			l.close(s)
			return
		}
		unix.Shutdown(s.peer.fd, unix.SHUT_WR)
		l.rearm(s)
		return
	}
	w, err := unix.Write(s.peer.fd, l.buf[:n])
	if err != nil && err != unix.EAGAIN {
		l.close(s)
		return
	}
	if w < n {
		s.peer.pend = append([]byte(nil), l.buf[max(w, 0):n]...)
		l.rearm(s)
		l.rearm(s.peer)
	}
}
