package identity

import (
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/eintr"
	"golang.org/x/sys/unix"
)

// procDir is an open /proc/<pid> directory. Everything read through it
// belongs to that one process: once it exits, reads fail (ESRCH) even if
// the pid is reused, which is the PID-reuse guard without a second look.
type procDir struct {
	pid int
	fd  int
}

func openProc(pid int) (procDir, error) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	return procDir{pid: pid, fd: fd}, err
}

func (d procDir) close() { unix.Close(d.fd) }

// read reads a small file of the process with one read(2): procfs renders
// stat and status whole into a buffer that fits them.
func (d procDir) read(name string, buf []byte) ([]byte, error) {
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return readOnce(fd, buf)
}

// readOnce reads fd with one read(2) and closes it.
func readOnce(fd int, buf []byte) ([]byte, error) {
	defer unix.Close(fd)
	n, err := eintr.Retry(func() (int, error) { return unix.Read(fd, buf) })
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// exe returns the executable's path as the kernel names it.
func (d procDir) exe() (string, error) {
	var small [256]byte
	for buf := small[:]; ; buf = make([]byte, unix.PathMax) {
		n, err := unix.Readlinkat(d.fd, "exe", buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) || len(buf) == unix.PathMax {
			return string(buf[:n]), nil
		}
	}
}

// readProc reads a small /proc file by path with one read(2).
func readProc(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return readOnce(fd, buf)
}
