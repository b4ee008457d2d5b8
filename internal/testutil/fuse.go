package testutil

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// HungFUSE mounts on a new temporary directory a FUSE filesystem whose
// server never answers, as one whose daemon has hung does: a look at or
// below the directory waits in the kernel (killably, as FUSE's waits are)
// until the test ends, when the connection is ended (its device closed:
// every wait fails with ENOTCONN) and the mount taken away. It needs root
// and the kernel's fuse.
func HungFUSE(t testing.TB) string {
	t.Helper()
	// allow_other: every uid's look waits, the sandbox's included, not
	// only the mounting root's.
	dir, _ := mountFUSE(t, "a hung FUSE mount", 0, ",allow_other")
	return dir
}

// StuckFUSE mounts on a new temporary directory a FUSE filesystem whose
// server takes every request and answers none, as a live but stuck one
// (sshfs on a dead link) does: a look at or below the directory waits in
// the kernel, and once its server has the request, not even SIGKILL ends
// the wait. The test's end ends the connection (its device closed), and
// with it every wait. It needs root and the kernel's fuse.
func StuckFUSE(t testing.TB) string {
	t.Helper()
	dir, fd := mountFUSE(t, "a stuck FUSE mount", 0, ",allow_other")
	serve(t, fd, 0, true)
	return dir
}

// OwnFUSE mounts on a new temporary directory a FUSE filesystem that only
// uid may enter, as a user's FUSE mount without allow_other (sshfs,
// rclone) is: the kernel refuses every other process, root's included.
// Its root is an empty directory, mode 0755, served by a goroutine until
// the test ends. It needs root and the kernel's fuse.
func OwnFUSE(t testing.TB, uid int) string {
	t.Helper()
	dir, fd := mountFUSE(t, "a FUSE mount", uid, "")
	serve(t, fd, uid, false)
	return dir
}

// serve answers the kernel on fd from a goroutine until the test ends
// (serveEmptyDir).
func serve(t testing.TB, fd, uid int, stuck bool) {
	stop, served := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(served)
		serveEmptyDir(fd, uint32(uid), stop, stuck)
	}()
	t.Cleanup(func() { // before mountFUSE's: the server is done with fd
		close(stop)
		<-served
	})
}

// mountFUSE mounts a FUSE filesystem owned by uid, with the options extra
// adds, on a new temporary directory, and returns it and the descriptor
// its server would answer on; both end with the test.
func mountFUSE(t testing.TB, what string, uid int, extra string) (string, int) {
	t.Helper()
	RequireRoot(t, what)
	dir := t.TempDir()
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	RequireFeature(t, "FUSE (/dev/fuse)", err)
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=%d,group_id=%d%s", fd, uid, uid, extra)
	if err := unix.Mount("airlock-test", dir, "fuse.airlock-test", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		RequireFeature(t, "a FUSE mount", err)
	}
	t.Cleanup(func() {
		unix.Close(fd) // the connection ends: what waits on it fails
		unix.Unmount(dir, unix.MNT_DETACH)
	})
	return dir, fd
}

// The FUSE protocol's messages (include/uapi/linux/fuse.h), as much of it
// as an empty directory needs.
const (
	fuseLookup      = 1
	fuseForget      = 2
	fuseGetattr     = 3
	fuseOpendir     = 27
	fuseInit        = 26
	fuseReaddir     = 28
	fuseReleasedir  = 29
	fuseAccess      = 34
	fuseInterrupt   = 36
	fuseBatchForget = 42
)

// serveEmptyDir answers the kernel on fd until stop: a root directory
// owned by uid, holding nothing; stuck, it answers the connection's
// opening and nothing after.
func serveEmptyDir(fd int, uid uint32, stop <-chan struct{}, stuck bool) {
	buf := make([]byte, 1<<17+4096)
	for {
		select {
		case <-stop:
			return
		default:
		}
		// poll(2), level-triggered, a tenth of a second at a time: the
		// runtime's edge-triggered poller missed requests of /dev/fuse.
		unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 100)
		n, err := unix.Read(fd, buf)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINTR) {
				continue // none yet, or one interrupted before it was read
			}
			return
		}
		if n < 40 {
			continue
		}
		opcode := binary.LittleEndian.Uint32(buf[4:])
		unique := binary.LittleEndian.Uint64(buf[8:])
		var out []byte
		errno := unix.Errno(unix.ENOSYS)
		switch {
		case opcode == fuseForget || opcode == fuseBatchForget || opcode == fuseInterrupt:
			continue // no answer is due
		case stuck && opcode != fuseInit:
			continue
		case opcode == fuseInit:
			// major 7, minor 31, max_write 128 KiB, time_gran 1; the rest 0.
			out = make([]byte, 64)
			binary.LittleEndian.PutUint32(out[0:], 7)
			binary.LittleEndian.PutUint32(out[4:], 31)
			binary.LittleEndian.PutUint32(out[20:], 1<<17)
			binary.LittleEndian.PutUint32(out[24:], 1)
			errno = 0
		case opcode == fuseGetattr:
			// fuse_attr_out: valid 0s, then fuse_attr: ino 1, mode, nlink 2, uid, gid.
			out = make([]byte, 104)
			a := out[16:]
			binary.LittleEndian.PutUint64(a[0:], 1)
			binary.LittleEndian.PutUint32(a[60:], unix.S_IFDIR|0o755)
			binary.LittleEndian.PutUint32(a[64:], 2)
			binary.LittleEndian.PutUint32(a[68:], uid)
			binary.LittleEndian.PutUint32(a[72:], uid)
			binary.LittleEndian.PutUint32(a[80:], 4096)
			errno = 0
		case opcode == fuseAccess || opcode == fuseReleasedir || opcode == fuseReaddir:
			errno = 0 // allowed; done; nothing more to list
		case opcode == fuseOpendir:
			out, errno = make([]byte, 16), 0
		case opcode == fuseLookup:
			errno = unix.ENOENT
		}
		reply := make([]byte, 16+len(out))
		binary.LittleEndian.PutUint32(reply[0:], uint32(len(reply)))
		binary.LittleEndian.PutUint32(reply[4:], uint32(-int32(errno)))
		binary.LittleEndian.PutUint64(reply[8:], unique)
		copy(reply[16:], out)
		unix.Write(fd, reply)
	}
}

// WaitsOnFUSE says whether pid or a process under it waits in the kernel
// for a FUSE request: to be sent (the connection never opened) or to be
// answered.
func WaitsOnFUSE(pid int) bool {
	// Any of its threads: a Go process's wait is on whichever thread ran
	// the goroutine that made the call, not always the main one.
	wchans, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/wchan", pid))
	for _, f := range wchans {
		wchan, _ := os.ReadFile(f)
		if w := string(wchan); strings.HasPrefix(w, "fuse_") || w == "request_wait_answer" {
			return true
		}
	}
	// Each thread lists the children it made (the sandbox's init is
	// made by a thread of its own).
	lists, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, l := range lists {
		children, _ := os.ReadFile(l)
		for _, f := range strings.Fields(string(children)) {
			if child, err := strconv.Atoi(f); err == nil && WaitsOnFUSE(child) {
				return true
			}
		}
	}
	return false
}
