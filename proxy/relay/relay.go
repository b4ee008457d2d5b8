// Package relay copies bytes between the two sockets of an opaque tunnel
// on event loops of its own: level-triggered epoll over descriptors taken
// out of Go's netpoller, one loop per two CPUs. With two goroutines per
// tunnel in the netpoller, every message costs a goroutine wake-up, a
// read, a write and a read that finds nothing (the netpoller is
// edge-triggered, so a reader must drain to EAGAIN before it may wait);
// the scheduler's part of that was a quarter of the proxy's CPU per
// tunnel. A loop reads once per readiness and writes at once, through one
// buffer per loop; a buffer of its own is taken only while the peer is
// slower than the sender.
package relay

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// bufSize is what one read moves: the size a userspace relay beat splice
// with for TLS bulk (issue 16), and what the loop's own buffer holds.
const bufSize = 256 << 10

// ErrStopped ends the pairs in flight when the loops stop.
var ErrStopped = errors.New("relay: stopped")

// Loops are the event loops pairs are spread over.
type Loops struct {
	loops []*loop
	next  atomic.Uint32
}

// Start starts n loops; when n is 0, half of GOMAXPROCS, rounded up. A
// loop holds a P for each batch of events (its reads and writes are raw
// calls) and shares the CPUs with the rest of the proxy and with the
// sandbox's own processes at either end of its tunnels, and every loop
// more splits the same events into more wake-ups: on two CPUs one loop
// cost ~9% less CPU per HTTPS request than two (five interleaved pairs,
// docs/performance.md). Only two CPUs were measured; half of a larger
// host still leaves it several loops for its tunnels' bytes.
func Start(n int) (*Loops, error) {
	if n <= 0 {
		n = (runtime.GOMAXPROCS(0) + 1) / 2
	}
	ls := &Loops{}
	for range n {
		l, err := newLoop()
		if err != nil {
			ls.Stop()
			return nil, err
		}
		ls.loops = append(ls.loops, l)
		go l.run()
	}
	return ls, nil
}

// Stop ends the loops: the pairs in flight end with ErrStopped.
func (ls *Loops) Stop() {
	for _, l := range ls.loops {
		l.stop()
	}
}

// Result is what a pair moved, and why it ended.
type Result struct {
	// AToB and BToA are the bytes read from one socket and written to the
	// other.
	AToB, BToA int64
	// Err is what ended the pair: nil when both directions ended with an
	// EOF, passed on as a half-close; else a socket's error or what
	// Abort was given.
	Err error
}

// Pair is two sockets being relayed.
type Pair struct {
	l    *loop
	fd   [2]int
	pend [2][]byte // read from side i, not yet written to the other
	base [2][]byte // the pooled buffer pend[i] is the rest of
	eof  [2]bool   // side i's read side ended
	n    [2]int64
	// ev is what each socket is watched for; hup, that it hung up while
	// what it sent waits; parked, that it is out of the epoll set
	// meanwhile (watch).
	ev          [2]uint32
	hup, parked [2]bool
	// last is the loop's clock when the pair last moved data, read by
	// IdleFor from other goroutines.
	last  atomic.Int64
	done  chan struct{}
	res   Result
	ended bool
}

// Relay hands a and b to a loop, which copies each to the other until both
// have ended (an EOF each way, each passed on as a half-close), either
// fails, or Abort. a and b are closed here: their descriptors belong to
// the loop from now on, which closes them when the pair ends.
func (ls *Loops) Relay(a, b *net.TCPConn) (*Pair, error) {
	p := &Pair{done: make(chan struct{})}
	var err error
	if p.fd[0], err = take(a); err != nil {
		b.Close()
		return nil, err
	}
	if p.fd[1], err = take(b); err != nil {
		unix.Close(p.fd[0])
		return nil, err
	}
	p.l = ls.loops[ls.next.Add(1)%uint32(len(ls.loops))]
	p.last.Store(time.Now().UnixNano())
	if !p.l.submit(func() { p.l.add(p) }) {
		unix.Close(p.fd[0])
		unix.Close(p.fd[1])
		return nil, ErrStopped
	}
	return p, nil
}

// take moves c's socket out of Go's netpoller: a duplicate descriptor
// (the same socket, still non-blocking) for the loop, and c closed.
func take(c *net.TCPConn) (int, error) {
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("relay: %w", err)
	}
	fd := -1
	var derr error
	if err := raw.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, fmt.Errorf("relay: %w", err)
	}
	if derr != nil {
		return -1, fmt.Errorf("relay: dup socket: %w", derr)
	}
	return fd, nil
}

// Done is closed when the pair has ended and its sockets are closed.
func (p *Pair) Done() <-chan struct{} { return p.done }

// Result is what the pair moved; valid once Done is closed.
func (p *Pair) Result() Result { return p.res }

// Abort ends the pair with err, closing both sockets, unless it has ended
// (as every pair has once the loops stopped).
func (p *Pair) Abort(err error) {
	p.l.submit(func() {
		if !p.ended {
			p.end(err)
		}
	})
}

// IdleFor is how long the pair has moved no data, to the loop's clock,
// which it reads once per wake-up, not per read.
func (p *Pair) IdleFor() time.Duration {
	return time.Duration(time.Now().UnixNano() - p.last.Load())
}

// loop is one event loop. Its pairs and socks are touched only by its own
// goroutine; other goroutines submit functions for it to run.
type loop struct {
	epfd  int
	poll  *os.File // epfd in Go's netpoller: the loop waits there, not in a blocking syscall
	wake  int      // eventfd: a submitted function is waiting
	socks map[int]*Pair
	buf   []byte
	now   int64

	mu      sync.Mutex
	queue   []func()
	stopped bool
}

func newLoop() (*loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("relay: epoll_create1: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("relay: eventfd: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, fmt.Errorf("relay: epoll_ctl: %w", err)
	}
	// Non-blocking, so that os.NewFile registers it with the netpoller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, fmt.Errorf("relay: %w", err)
	}
	return &loop{epfd: epfd, poll: os.NewFile(uintptr(epfd), "relay-epoll"), wake: wake,
		socks: map[int]*Pair{}, buf: make([]byte, bufSize)}, nil
}

// submit runs f on the loop, unless the loop has stopped (false). The
// eventfd is written only when the queue was empty: a wake-up is already
// on its way otherwise.
func (l *loop) submit(f func()) bool {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return false
	}
	first := len(l.queue) == 0
	l.queue = append(l.queue, f)
	l.mu.Unlock()
	if first {
		unix.Write(l.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	}
	return true
}

func (l *loop) stop() {
	l.submit(func() {
		for _, p := range l.socks {
			if !p.ended {
				p.end(ErrStopped)
			}
		}
		l.mu.Lock()
		l.stopped = true
		l.mu.Unlock()
	})
}

func (l *loop) run() {
	raw, err := l.poll.SyscallConn()
	if err != nil {
		panic(err) // an *os.File always has one
	}
	events := make([]unix.EpollEvent, 256)
	for {
		var n int
		var werr error
		raw.Read(func(fd uintptr) bool {
			n, werr = epollPoll(int(fd), events)
			return n > 0 || (werr != nil && werr != unix.EINTR)
		})
		if werr != nil && werr != unix.EINTR {
			panic(fmt.Sprintf("relay: epoll_wait: %v", werr))
		}
		l.now = time.Now().UnixNano()
		woken := false
		for _, ev := range events[:n] {
			if int(ev.Fd) == l.wake {
				woken = true
			} else if p := l.socks[int(ev.Fd)]; p != nil {
				p.ready(int(ev.Fd), ev.Events)
			}
		}
		// Last: a pair added now may reuse the descriptor of one that
		// ended in this batch, whose later events would be taken for its.
		if woken && l.runQueue() {
			// A pair added behind the stop, in the same batch, ends
			// too: its sockets would leak, its Done never close.
			for _, p := range l.socks {
				if !p.ended {
					p.end(ErrStopped)
				}
			}
			l.poll.Close()
			unix.Close(l.wake)
			return
		}
	}
}

// runQueue runs what was submitted; true once the loop is stopped.
func (l *loop) runQueue() bool {
	var b [8]byte
	unix.Read(l.wake, b[:])
	l.mu.Lock()
	q := l.queue
	l.queue = nil
	l.mu.Unlock()
	for _, f := range q {
		f()
	}
	l.mu.Lock()
	stopped, late := l.stopped, l.queue
	if stopped {
		l.queue = nil
	}
	l.mu.Unlock()
	if stopped {
		// Submitted while the stop ran, before it set stopped (nothing
		// can be after): a pair added now ends with the others in run,
		// never left queued on a loop that is gone.
		for _, f := range late {
			f()
		}
	}
	return stopped
}

// add registers p's sockets; whatever is already readable shows at once
// (level-triggered).
func (l *loop) add(p *Pair) {
	for i, fd := range p.fd {
		l.socks[fd] = p
		p.ev[i] = unix.EPOLLIN
		if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			p.end(fmt.Errorf("relay: epoll_ctl: %w", err))
			return
		}
	}
}

// ready acts on fd's events: reads what it sent, writes what waits for it.
// An error or hang-up that neither reveals ends the pair: the socket can
// take no more.
func (p *Pair) ready(fd int, events uint32) {
	i := 0
	if fd == p.fd[1] {
		i = 1
	}
	o := 1 - i
	if events&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 && p.pend[o] != nil {
		p.flush(o)
	}
	if !p.ended && events&(unix.EPOLLIN|unix.EPOLLERR|unix.EPOLLHUP) != 0 && !p.eof[i] && p.pend[i] == nil {
		p.read(i)
	}
	if p.ended {
		return
	}
	if events&unix.EPOLLERR != 0 {
		errno, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil || errno == 0 {
			errno = int(unix.ECONNRESET)
		}
		p.end(os.NewSyscallError("relay", syscall.Errno(errno)))
		return
	}
	// A hang-up without an error is both halves shut, cleanly: the peer
	// sent its FIN, the proxy passed the other side's on. What it sent
	// is read once what it sent before is written; until then epoll,
	// which reports a hang-up whatever it is asked, would wake the loop
	// for it again and again: the socket leaves the set meanwhile.
	if events&unix.EPOLLHUP != 0 && p.pend[i] != nil {
		p.hup[i] = true
	}
	p.watch()
}

// read reads what side i sent and writes it to the other side at once.
func (p *Pair) read(i int) {
	buf := p.l.buf
	n, err := rawIO(unix.SYS_READ, p.fd[i], buf)
	switch {
	case err == unix.EAGAIN || err == unix.EINTR:
		return
	case err != nil:
		p.end(os.NewSyscallError("read", err))
		return
	case n == 0:
		p.eof[i] = true
		if p.eof[1-i] {
			p.end(nil)
			return
		}
		// The half-close goes on: the other side reads its EOF.
		if err := unix.Shutdown(p.fd[1-i], unix.SHUT_WR); err != nil && err != unix.ENOTCONN {
			p.end(os.NewSyscallError("shutdown", err))
		}
		return
	}
	p.last.Store(p.l.now)
	p.write(i, buf[:n], true)
}

// write writes data, read from side i, to the other side; what the socket
// does not take now waits in a buffer of the pair's own (copied, when
// data is the loop's buffer).
func (p *Pair) write(i int, data []byte, loopBuf bool) {
	o := 1 - i
	for len(data) > 0 {
		m, err := rawIO(unix.SYS_WRITE, p.fd[o], data)
		if m > 0 {
			p.n[i] += int64(m)
			data = data[m:]
		}
		if err == unix.EAGAIN {
			break
		}
		if err != nil && err != unix.EINTR {
			p.end(os.NewSyscallError("write", err))
			return
		}
	}
	switch {
	case len(data) == 0:
		if p.base[i] != nil {
			putBuf(p.base[i])
		}
		p.pend[i], p.base[i] = nil, nil
	case loopBuf:
		p.base[i] = getBuf()
		p.pend[i] = p.base[i][:copy(p.base[i], data)]
	default:
		p.pend[i] = data
	}
}

// flush writes what side i sent that waited for the other side.
func (p *Pair) flush(i int) {
	p.last.Store(p.l.now)
	p.write(i, p.pend[i], false)
}

// watch asks the loop for what each socket can do next: read, while what
// it sent last is written and it has not ended; write, while something
// waits for it.
// A change costs an epoll_ctl; a message written at once changes nothing.
func (p *Pair) watch() {
	for i, fd := range p.fd {
		var ev uint32
		if !p.eof[i] && p.pend[i] == nil {
			ev |= unix.EPOLLIN
		}
		if p.pend[1-i] != nil {
			ev |= unix.EPOLLOUT
		}
		out := p.hup[i] && p.pend[i] != nil
		var err error
		switch {
		case out && !p.parked[i]:
			err = unix.EpollCtl(p.l.epfd, unix.EPOLL_CTL_DEL, fd, nil)
			p.parked[i] = true
		case out:
		case p.parked[i]:
			err = unix.EpollCtl(p.l.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: ev, Fd: int32(fd)})
			p.parked[i], p.hup[i] = false, false
		case ev != p.ev[i]:
			err = unix.EpollCtl(p.l.epfd, unix.EPOLL_CTL_MOD, fd, &unix.EpollEvent{Events: ev, Fd: int32(fd)})
		}
		if err != nil {
			p.end(fmt.Errorf("relay: epoll_ctl: %w", err))
			return
		}
		p.ev[i] = ev
	}
}

// end closes both sockets (which takes them out of the epoll set) and
// tells the caller.
func (p *Pair) end(err error) {
	p.ended = true
	for i, fd := range p.fd {
		delete(p.l.socks, fd)
		unix.Close(fd)
		if p.base[i] != nil {
			putBuf(p.base[i])
		}
		p.pend[i], p.base[i] = nil, nil
	}
	p.res = Result{AToB: p.n[0], BToA: p.n[1], Err: err}
	close(p.done)
}

// bufs hold what a slow receiver has not taken yet, one per such pair.
var bufs = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

func getBuf() []byte { return *(bufs.Get().(*[]byte)) }

func putBuf(b []byte) { bufs.Put(&b) }

// rawIO is read(2) or write(2) on a non-blocking socket without the
// scheduler's entersyscall and exitsyscall: neither call waits, yet a
// loopback write runs the receiver's TCP stack too (tens of µs), long
// enough for sysmon to find the P "in a system call", hand it to another
// thread and wake that one: thread wake-ups and switches the relay does
// not need on a host with few CPUs.
func rawIO(nr uintptr, fd int, b []byte) (int, error) {
	n, _, errno := unix.RawSyscall(nr, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// epollPoll is epoll_wait(2) with a zero timeout, raw for rawIO's reason:
// epoll_pwait with no signal mask, as arm64 has no epoll_wait.
func epollPoll(epfd int, events []unix.EpollEvent) (int, error) {
	n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
