package sandbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/eintr"
	"golang.org/x/sys/unix"
)

// A pinned command (Config.CommandSHA256) is checked on the very file the
// command stage execs: it opens the binary once, inside the sandbox's
// view, hashes what it reads through that descriptor and execs the same
// descriptor. A path swapped after anyone checked it (a rename, a new
// symlink) cannot put another file under the kernel. What the pin cannot
// cover: a writer of that very inode changing it between the hash and the
// exec; keep pinned binaries writable by root only.
//
// The exec goes through syscall.Exec (the Go runtime's exec, which also
// gives back the file-descriptor limit the runtime raised), so the kernel
// names the process after the link: its comm (ps, top, the OOM killer's
// log) is the descriptor's number; its argv and /proc/PID/exe are the
// binary's.
//
// Scripts: for `#!` the kernel hands the interpreter /proc/self/fd/N, the
// descriptor the digest was checked on, so that descriptor is left open
// across the exec (an ELF binary's is closed by it). The interpreter
// itself is not pinned, and one that resolves its script's path and
// re-opens it by name (node does) reads by path again.

// isSHA256Hex reports whether s has a pin's form: sha256sum's output, 64
// lower-case hex digits. Checked by hand: a package-level regexp would be
// compiled at the start of every process of the sandbox's stage binary.
func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// pinned is the descriptor of the verified command, -1 when unpinned.
var pinned = -1

// pinnedScript says the verified command starts with "#!".
var pinnedScript bool

// openPinned opens c.Command[0] (absolute: Validate insists) and checks
// its sha256 against c.CommandSHA256; a mismatch names the path and both
// digests. It runs while the stage is still root, so a binary the
// sandbox's uid may execute but not read can still be pinned.
func openPinned(c *Config) error {
	if c.CommandSHA256 == "" {
		return nil
	}
	path := c.Command[0]
	// O_NONBLOCK: a FIFO (or a device) put where the binary was would
	// hold the open, and the launch, until a writer came; it is opened at
	// once, and refused for what it is. O_NOCTTY: a terminal there does
	// not become the stage's.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return &os.PathError{Op: "open pinned binary", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "fstat pinned binary", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("pinned binary %s is not a regular file", path)
	}
	// Read through the raw descriptor (no *os.File, whose finalizer
	// would close it before the exec).
	h := sha256.New()
	buf := make([]byte, 64<<10)
	for {
		n, err := eintr.Retry(func() (int, error) { return unix.Read(fd, buf) })
		if err != nil {
			return &os.PathError{Op: "hash pinned binary", Path: path, Err: err}
		}
		if n == 0 {
			break
		}
		h.Write(buf[:n])
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != c.CommandSHA256 {
		return fmt.Errorf("pinned binary %s has sha256 %s, want %s: refused", path, got, c.CommandSHA256)
	}
	head := make([]byte, 2)
	n, _ := unix.Pread(fd, head, 0)
	pinned, pinnedScript = fd, bytes.Equal(head[:max(n, 0)], []byte("#!"))
	return nil
}

// execPinned execs the descriptor openPinned verified, through its
// /proc/self/fd link (the kernel opens the file the descriptor holds,
// never a path's current file), with argv and env. It returns only on
// failure.
func execPinned(argv, env []string) error {
	if pinnedScript {
		if _, err := unix.FcntlInt(uintptr(pinned), unix.F_SETFD, 0); err != nil {
			return &os.SyscallError{Syscall: "fcntl(F_SETFD)", Err: err}
		}
	}
	return syscall.Exec("/proc/self/fd/"+strconv.Itoa(pinned), argv, env)
}
