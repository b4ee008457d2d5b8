package proxy

import (
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// watchIdle closes conns (both ends of an opaque tunnel, or the client's
// socket of a WebSocket, which carries its traffic both ways) once none
// has sent or received data for idle. The relay does not read the clock
// for each chunk it moves (a cost on every read of a bulk transfer); the
// kernel's own TCP_INFO (last data sent/received) tells instead. The check runs on a
// timer, not a goroutine per tunnel; the returned stop ends it and reports
// whether the watcher closed conns, which the audit line then says.
func watchIdle(idle time.Duration, conns ...net.Conn) (stop func() (closed bool)) {
	var mu sync.Mutex
	var t *time.Timer
	stopped, closed := false, false
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(idle/4, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		for _, c := range conns {
			if idleFor(c) < idle {
				t.Reset(idle / 4)
				return
			}
		}
		closed = true
		for _, c := range conns {
			c.Close()
		}
	})
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
		return closed
	}
}

// idleFor is how long the connection has moved no data; zero when unknown
// (never close what cannot be measured).
func idleFor(c net.Conn) time.Duration {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	var info *unix.TCPInfo
	raw.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	})
	if err != nil || info == nil {
		return 0
	}
	ms := min(info.Last_data_sent, info.Last_data_recv)
	return time.Duration(ms) * time.Millisecond
}

// closingToo is a connection whose Close also closes also: what the idle
// watcher must close along with the connection it watches.
type closingToo struct {
	net.Conn
	also io.Closer
}

func (c closingToo) Close() error {
	c.also.Close()
	return c.Conn.Close()
}

// SyscallConn lets the watcher read the socket's TCP_INFO.
func (c closingToo) SyscallConn() (syscall.RawConn, error) { return syscallConn(c.Conn) }
