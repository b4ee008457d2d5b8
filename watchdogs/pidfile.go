package watchdogs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/procstat"
	"github.com/airlock-sandbox/airlock/internal/trusted"
	"golang.org/x/sys/unix"
)

// A pid file is a claim by whoever wrote it, read by a watchdog that runs
// as root and SIGKILLs what it names. So it is believed only when the
// watchdog's own user (or root) owns it, nobody else may write it, it is
// not a symlink, and the process it names started before the file was
// written: a pid reused by another process since fails that last test.
// The process is then held by a pidfd, so the check and the kill cannot
// be split by a reuse.
//
// The last test cannot tell a reused pid from a clock stepped since the
// file was written; what the watchdog remembers of the file can. Once it
// has believed a file, the process is known by its start in clock ticks
// after boot, which no clock step moves: the same file (inode and mtime)
// naming a pid whose start is another is stale, its process gone and the
// pid another's. The same file believed in an earlier boot is stale too
// (not one merely dated before the boot, as a clock stepped forward since
// it makes a live one look).

// tracked is the live process a pid file names.
type tracked struct {
	pid int
	fd  int // pidfd
}

// pidRecord is the pid file as last believed, kept in the watchdog's state
// across rounds: the file (by inode and mtime), the process it named, and
// that process's start (/proc/PID/stat's starttime) in the boot it ran in.
type pidRecord struct {
	Pid   int       `json:"pid"`
	Ticks int64     `json:"start_ticks"`
	Boot  string    `json:"boot_id"`
	Inode uint64    `json:"inode"`
	Mtime time.Time `json:"mtime"`
}

// names says whether r was taken of this very file, naming pid, in this
// boot.
func (r pidRecord) names(pid int, fi fs.FileInfo, boot string) bool {
	return r.Boot == boot && r.of(pid, fi)
}

// of says whether r was taken of this very file, naming pid, in any boot.
func (r pidRecord) of(pid int, fi fs.FileInfo) bool {
	return r.Pid == pid && r.Inode == fi.Sys().(*syscall.Stat_t).Ino && r.Mtime.Equal(fi.ModTime())
}

// ErrNoProcess: the pid file names no live process (none at all, or a
// zombie), or none of its own (the file is stale).
var ErrNoProcess = errors.New("no live process")

// pidTolerance covers the kernel's boot time, which /proc/stat gives in
// whole seconds: a process's start is known to within a second.
const pidTolerance = time.Second

// track opens the process the pid file at path names. A missing file, a
// process gone, or a stale file is ErrNoProcess; a file that cannot be
// trusted is an error naming why. rec is what was believed of the file
// before: it decides when it still describes the file, and is set anew
// whenever the file is believed.
func track(path string, rec *pidRecord) (*tracked, error) {
	pid, fi, err := readPidFile(path)
	if err != nil {
		return nil, err
	}
	written := fi.ModTime()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil, fmt.Errorf("pid file %s: process %d: %w", path, pid, ErrNoProcess)
	}
	if err != nil {
		return nil, fmt.Errorf("pid file %s: pidfd_open(%d): %w", path, pid, err)
	}
	p := &tracked{pid: pid, fd: fd}
	// Read after pidfd_open: a start that is the recorded one is that of
	// the process the pidfd holds.
	state, ticks, err := procstat.Stat(pid)
	if err != nil || procstat.Dead(state) {
		p.close()
		return nil, fmt.Errorf("pid file %s: process %d: %w", path, pid, ErrNoProcess)
	}
	boot, bootID, err := thisBoot()
	if err != nil {
		p.close()
		return nil, fmt.Errorf("pid file %s: %w", path, err)
	}
	if rec.names(pid, fi, bootID) {
		if ticks == rec.Ticks {
			return p, nil
		}
		p.close()
		// Never killed: what holds the pid now is not what the file
		// named.
		return nil, fmt.Errorf("pid file %s: process %d started %d ticks after boot, not %d as when the file was believed: it has exited and its pid is another's: %w",
			path, pid, ticks, rec.Ticks, ErrNoProcess)
	}
	if rec.Boot != "" && rec.of(pid, fi) {
		// Not by its date: a clock stepped forward since the boot
		// (NTP's first sync on a host without a clock of its own) makes
		// a file written since look older than the boot.
		p.close()
		return nil, fmt.Errorf("pid file %s: unchanged since it was believed in an earlier boot, whose processes are gone: %w", path, ErrNoProcess)
	}
	// USER_HZ is 100 on every Linux architecture Go runs on.
	start := boot.Add(time.Duration(ticks) * (time.Second / 100))
	if !start.After(written.Add(pidTolerance)) {
		*rec = pidRecord{Pid: pid, Ticks: ticks, Boot: bootID, Inode: fi.Sys().(*syscall.Stat_t).Ino, Mtime: written}
		return p, nil
	}
	p.close()
	// Not ErrNoProcess: the process may well be the one that wrote the
	// file, its start computed from a boot time the kernel moved when the
	// clock was stepped (NTP's first sync after boot), and a restart
	// beside it would fail and leave it running. Neither way is believed
	// (unless an earlier round believed this file, and so knows its
	// process): the round is blind, nothing is killed or started.
	return nil, fmt.Errorf("pid file %s: process %d started at %s, after the file was written (%s): its pid was reused, or the clock was stepped since; not believed either way",
		path, pid, start.UTC().Format(time.RFC3339), written.UTC().Format(time.RFC3339))
}

func (p *tracked) close() { unix.Close(p.fd) }

// kill SIGKILLs the process and waits until it is gone (reaped, or a
// zombie: its sockets are closed then). It waits on the pidfd, which turns
// readable when that process exits: the bare pid, reaped and reused by
// then, would read as still there.
func (p *tracked) kill(ctx context.Context) error {
	if err := unix.PidfdSendSignal(p.fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill process %d: %w", p.pid, err)
	}
	for {
		fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 10)
		if n > 0 {
			return nil
		}
		if err != nil && err != unix.EINTR {
			return fmt.Errorf("wait for process %d: poll its pidfd: %w", p.pid, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("process %d still there after SIGKILL: %w", p.pid, ctx.Err())
		}
	}
}

// readPidFile reads a pid file the watchdog may believe, and its stat
// (when it was written, its inode).
func readPidFile(path string) (pid int, fi fs.FileInfo, err error) {
	f, fi, err := openTrusted(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil, fmt.Errorf("pid file %s: %w", path, ErrNoProcess)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("pid file: %w; not trusted with a SIGKILL", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return 0, nil, fmt.Errorf("pid file %s: %w", path, err)
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 1 {
		return 0, nil, fmt.Errorf("pid file %s: %q is not a process id", path, strings.TrimSpace(string(raw)))
	}
	return pid, fi, nil
}

// openTrusted opens a file the watchdog believes (a pid file, its state)
// for reading: not through a symbolic link, without blocking (a FIFO in
// its place would hold every round until its unit's timeout), a regular
// file with no other name (a hard link's other name is another's to
// write through), owned by root or this user and writable by no one else
// (trusted.Mode). Every error names the path.
func openTrusted(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
	case !fi.Mode().IsRegular():
		err = fmt.Errorf("%s: a %v, not a regular file", path, fi.Mode().Type())
	case fi.Sys().(*syscall.Stat_t).Nlink != 1:
		err = fmt.Errorf("%s: %d names (hard links), not one", path, fi.Sys().(*syscall.Stat_t).Nlink)
	default:
		if err = trusted.Mode(fi); err != nil {
			err = fmt.Errorf("%s: %w", path, err)
		}
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// thisBoot is when this boot began (/proc/stat's btime, whole seconds, as
// the clock now reads it) and its id.
func thisBoot() (time.Time, string, error) {
	id, err := procstat.BootID()
	if err != nil {
		return time.Time{}, "", err
	}
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, "", err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				break
			}
			return time.Unix(s, 0), id, nil
		}
	}
	return time.Time{}, "", errors.New("/proc/stat: no btime")
}
