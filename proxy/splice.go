package proxy

import (
	"errors"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// spliceCopy moves src's bytes to dst through a kernel pipe until src's
// EOF, as io.Copy between two TCP connections does, but with the proxy's
// own pipes. Go's are pooled in a sync.Pool that closes a spare only when
// the garbage collector gets to it, so after a burst of tunnels thousands
// of idle pipes (two descriptors each) stay open for minutes, and a
// tunnel holds its two pipes for its whole life, busy or not. Here a
// direction takes a pipe only while bytes are in flight: a quiet tunnel
// holds its two sockets and nothing else, and spares beyond maxSparePipes
// are closed at once.
func spliceCopy(dst, src *net.TCPConn) (int64, error) {
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
		var p *pipe
		var n int64
		var serr error
		// Read calls the function again once src is readable whenever it
		// returns false: the pipe goes back to the pool before each wait.
		rerr := rs.Read(func(fd uintptr) bool {
			if p == nil {
				if p, serr = pipes.get(); serr != nil {
					return true
				}
			}
			for {
				n, serr = unix.Splice(int(fd), nil, p.w, nil, maxSplice, unix.SPLICE_F_NONBLOCK|unix.SPLICE_F_MOVE)
				if serr != unix.EINTR {
					break
				}
			}
			if serr == unix.EAGAIN {
				pipes.put(p, 0)
				p = nil
				return false
			}
			return true
		})
		if err := errors.Join(rerr, serr); err != nil || n == 0 {
			if p != nil {
				pipes.put(p, 0)
			}
			return written, err // n == 0: src's EOF
		}
		left := int(n)
		var werr error
		rerr = rd.Write(func(fd uintptr) bool {
			for left > 0 {
				m, err := unix.Splice(p.r, nil, int(fd), nil, left, unix.SPLICE_F_NONBLOCK|unix.SPLICE_F_MOVE)
				switch {
				case m > 0:
					left -= int(m)
					written += int64(m)
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
		pipes.put(p, left)
		if err := errors.Join(rerr, werr); err != nil {
			return written, err
		}
	}
}

// maxSplice is the most moved per splice, and the pipe's capacity, as in
// Go's own splice.
const maxSplice = 1 << 20

// maxSparePipes bounds the pipes kept open for reuse; more are closed as
// they are given back.
const maxSparePipes = 64

type pipe struct{ r, w int }

// pipePool holds spare pipes, at most cap(spare) of them.
type pipePool struct{ spare chan *pipe }

var pipes = pipePool{spare: make(chan *pipe, maxSparePipes)}

func (pp pipePool) get() (*pipe, error) {
	select {
	case p := <-pp.spare:
		return p, nil
	default:
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, os.NewSyscallError("pipe2", err)
	}
	// A larger pipe moves more per pair of splices; without it (an
	// unprivileged process past /proc/sys/fs/pipe-max-size) it still works.
	unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, maxSplice)
	return &pipe{r: fds[0], w: fds[1]}, nil
}

// put gives p back, unless it still holds bytes (a write failed halfway)
// or the pool is full: then it is closed.
func (pp pipePool) put(p *pipe, left int) {
	if left == 0 {
		select {
		case pp.spare <- p:
			return
		default:
		}
	}
	unix.Close(p.r)
	unix.Close(p.w)
}
