package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// relayCopy moves src's bytes to dst until src's EOF through a user-space
// buffer that a direction takes from a pool only while bytes are in flight:
// a quiet tunnel holds its two sockets and nothing else, and a burst of
// short tunnels reuses a few buffers instead of allocating (and zeroing)
// two per tunnel.
//
// It copies rather than splices. With TLS inside the tunnel (HTTPS, what
// agents send), splice moved fewer MB/s than a 256 KiB buffer and cost the
// two ends more CPU per MB (docs/performance.md has the measurements).
func relayCopy(dst, src *net.TCPConn) (int64, error) {
	rs, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	rd, err := dst.SyscallConn()
	if err != nil {
		return 0, err
	}
	var written int64
	for {
		var buf *relayBuf
		var n int
		var rerr error
		// Read calls the function again once src is readable whenever it
		// returns false: the buffer goes back to the pool before each wait.
		err := rs.Read(func(fd uintptr) bool {
			if buf == nil {
				buf = relayBufs.get()
			}
			for {
				n, rerr = unix.Read(int(fd), buf[:])
				if rerr != unix.EINTR {
					break
				}
			}
			if rerr == unix.EAGAIN {
				relayBufs.put(buf)
				buf = nil
				return false
			}
			return true
		})
		if err := errors.Join(err, rerr); err != nil || n <= 0 {
			if buf != nil {
				relayBufs.put(buf)
			}
			return written, err // n == 0: src's EOF
		}
		off := 0
		var werr error
		err = rd.Write(func(fd uintptr) bool {
			for off < n {
				m, err := unix.Write(int(fd), buf[off:n])
				switch {
				case m > 0:
					off += m
				case err == unix.EINTR:
				case err == unix.EAGAIN:
					return false
				default:
					werr = err
					if werr == nil {
						werr = io.ErrShortWrite
					}
					return true
				}
			}
			return true
		})
		written += int64(off)
		relayBufs.put(buf)
		if err := errors.Join(err, werr); err != nil {
			return written, err
		}
	}
}

// relayBufSize is what one read may move. 256 KiB carried the most TLS
// bulk per CPU in the measurements; smaller buffers mean more syscalls per
// MB on both sides of the proxy.
const relayBufSize = 256 << 10

type relayBuf [relayBufSize]byte

// bufPool pools relay buffers and counts those taken: a test checks that
// quiet tunnels hold none.
type bufPool struct {
	pool  sync.Pool
	inUse atomic.Int64
}

var relayBufs = &bufPool{pool: sync.Pool{New: func() any { return new(relayBuf) }}}

func (b *bufPool) get() *relayBuf {
	b.inUse.Add(1)
	return b.pool.Get().(*relayBuf)
}

func (b *bufPool) put(p *relayBuf) {
	b.inUse.Add(-1)
	b.pool.Put(p)
}
