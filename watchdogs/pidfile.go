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

// tracked is the live process a pid file names.
type tracked struct {
	pid int
	fd  int // pidfd
}

// ErrNoProcess: the pid file names no live process (none at all, or a
// zombie).
var ErrNoProcess = errors.New("no live process")

// pidTolerance covers the kernel's boot time, which /proc/stat gives in
// whole seconds: a process's start is known to within a second.
const pidTolerance = time.Second

// track opens the process the pid file at path names. A missing file or a
// process gone is ErrNoProcess; a file that cannot be trusted is an error
// naming why.
func track(path string) (*tracked, error) {
	pid, written, err := readPidFile(path)
	if err != nil {
		return nil, err
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil, fmt.Errorf("pid file %s: process %d: %w", path, pid, ErrNoProcess)
	}
	if err != nil {
		return nil, fmt.Errorf("pid file %s: pidfd_open(%d): %w", path, pid, err)
	}
	start, zombie, err := processStart(pid)
	if err == nil && !zombie && !start.After(written.Add(pidTolerance)) {
		return &tracked{pid: pid, fd: fd}, nil
	}
	unix.Close(fd)
	switch {
	case err != nil || zombie:
		return nil, fmt.Errorf("pid file %s: process %d: %w", path, pid, ErrNoProcess)
	default:
		// Not ErrNoProcess: the process may well be the one that wrote
		// the file, its start computed from a boot time the kernel moved
		// when the clock was stepped (NTP's first sync after boot), and a
		// restart beside it would fail and leave it running. Neither way
		// is believed: the round is blind, nothing is killed or started.
		return nil, fmt.Errorf("pid file %s: process %d started at %s, after the file was written (%s): its pid was reused, or the clock was stepped since; not believed either way",
			path, pid, start.UTC().Format(time.RFC3339), written.UTC().Format(time.RFC3339))
	}
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

// readPidFile reads a pid file the watchdog may believe, and when it was
// written.
func readPidFile(path string) (pid int, written time.Time, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, time.Time{}, fmt.Errorf("pid file %s: %w", path, ErrNoProcess)
	}
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("pid file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("pid file: %w", err)
	}
	if err := trusted.Mode(fi); err != nil {
		return 0, time.Time{}, fmt.Errorf("pid file %s: %w: not trusted with a SIGKILL", path, err)
	}
	if !fi.Mode().IsRegular() {
		return 0, time.Time{}, fmt.Errorf("pid file %s: %v: not a regular file; not trusted with a SIGKILL", path, fi.Mode())
	}
	raw, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("pid file: %w", err)
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 1 {
		return 0, time.Time{}, fmt.Errorf("pid file %s: %q is not a process id", path, strings.TrimSpace(string(raw)))
	}
	return pid, fi.ModTime(), nil
}

// processStart is when pid started (from /proc/PID/stat's starttime, in
// clock ticks after boot) and whether it is a zombie.
func processStart(pid int) (time.Time, bool, error) {
	state, ticks, err := procstat.Stat(pid)
	if err != nil {
		return time.Time{}, false, err
	}
	boot, err := bootTime()
	if err != nil {
		return time.Time{}, false, err
	}
	// USER_HZ is 100 on every Linux architecture Go runs on.
	return boot.Add(time.Duration(ticks) * (time.Second / 100)), procstat.Dead(state), nil
}

func bootTime() (time.Time, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				break
			}
			return time.Unix(s, 0), nil
		}
	}
	return time.Time{}, errors.New("/proc/stat: no btime")
}
