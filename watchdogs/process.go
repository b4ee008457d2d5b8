package watchdogs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/nodeopts"
	"github.com/airlock-sandbox/airlock/internal/trusted"
	"golang.org/x/sys/unix"
)

// ProcessTarget is a gateway no airlock pod runs: a command starts it, its
// pid file says whether it runs, its log (where its stdout and stderr go)
// holds V8's last words, and its cgroup counts the OOM kills.
type ProcessTarget struct {
	// Restart starts a new gateway; its PidFile, when set, is how the
	// watchdog knows the gateway runs, and which process to kill before
	// the next one starts.
	Command CommandRestart
	Log     string // "": no heap evidence
	Cgroup  string // its memory cgroup (v2, or v1 on a hybrid host); "": no OOM evidence
}

// Look implements Target.
func (t ProcessTarget) Look(_ context.Context, m *TargetMemory) (Evidence, error) {
	ev := Evidence{Healthy: true, HeapMB: m.HeapMB}
	if t.Command.PidFile != "" {
		p, err := track(t.Command.PidFile, &m.PidFile)
		if err != nil && !errors.Is(err, ErrNoProcess) {
			return ev, err
		}
		ev.Known, ev.Running = true, err == nil
		if err == nil {
			// Another pid than the last look's: the one it saw has
			// exited, and something started the gateway again.
			ev.Exited = m.Pid != 0 && p.pid != m.Pid
			m.Pid = p.pid
			p.close()
		} else {
			ev.Exit = err.Error()
		}
	}
	// A first look sets the baselines: what happened before the watchdog
	// was there is not its to judge, unless the gateway is down now and
	// the evidence at hand is all that says why.
	first := !m.Seen
	m.Seen = true
	judgePast := !first || ev.Known && !ev.Running
	if t.Log != "" {
		line, err := t.heapLine(m, first && !judgePast)
		switch {
		case errors.Is(err, errLogRefused):
			// Not blind: its user may make it so at will (a second
			// name), and a gateway that died would then never be
			// restarted. The pid file and the cgroup still say
			// whether it runs and how it ended; only V8's line is
			// not known.
			ev.LogNotRead = err.Error()
		case err != nil:
			return ev, err
		case judgePast:
			ev.HeapOOM = line
		}
	}
	if t.Cgroup != "" {
		n, err := cgroup2.OOMKills(t.Cgroup)
		if err != nil {
			return ev, fmt.Errorf("the gateway's cgroup: %w", err)
		}
		switch {
		case !judgePast:
		case first || n < m.OOMKills:
			// All the group has counted: on a first look, the
			// evidence at hand; for a group made anew, its own.
			ev.OOMKills = n
		default:
			ev.OOMKills = n - m.OOMKills
		}
		m.OOMKills = n
		if ev.MemoryMax, err = cgroup2.MemoryLimit(t.Cgroup); err != nil {
			return ev, err
		}
	}
	return ev, nil
}

// maxLogRead bounds what one look reads of the log: V8's last words are at
// its end, and a gateway that logs a lot must not make the watchdog slow.
const maxLogRead = 1 << 20

// heapLine reads the log from where the last look left it (from its start
// when it was rotated or truncated; only its last maxLogRead bytes) and
// returns the last V8 heap-exhaustion line in it. skip only moves to its
// end.
func (t ProcessTarget) heapLine(m *TargetMemory, skip bool) (string, error) {
	f, fi, err := openLog(t.Log)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil // not written yet
	}
	if err != nil {
		return "", fmt.Errorf("the gateway's log: %w", err)
	}
	defer f.Close()
	ino := fi.Sys().(*syscall.Stat_t).Ino
	from := m.LogOffset
	if ino != m.LogInode || fi.Size() < from {
		from = 0
	}
	m.LogInode, m.LogOffset = ino, fi.Size()
	if skip || fi.Size() == from {
		return "", nil
	}
	from = max(from, fi.Size()-maxLogRead)
	buf := make([]byte, fi.Size()-from)
	if _, err := f.ReadAt(buf, from); err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("the gateway's log %s: %w", t.Log, err)
	}
	return heapExhausted(buf), nil
}

// openLog opens the gateway's log for reading, as root, where its writer
// (the gateway's user, who often owns its directory) may have put anything
// at that name. So the directory is reached through no link the watchdog
// does not trust (trusted.OpenDirTrust), and the name itself is opened
// O_PATH, no link followed: only once it is known to be a regular file
// with one name is it opened for reading, so no device is ever opened
// (opening /dev/watchdog arms it) and no FIFO waited on, and no other
// file's second name (a hard link) is read. What is read must also be
// what whoever could have put it there may read anyway (logReadable): the
// lines V8's match are copied into the agent's inbox. A refusal by these
// rules wraps errLogRefused; every error names the path; a missing file or
// directory wraps fs.ErrNotExist.
func openLog(path string) (*os.File, fs.FileInfo, error) {
	dirPath, base := trusted.SplitLast(path)
	dir, dirTrusted, err := trusted.OpenDirTrust(dirPath)
	if errors.Is(err, trusted.ErrUntrusted) {
		return nil, nil, refusal{err}
	}
	if err != nil {
		return nil, nil, err
	}
	defer dir.Close()
	dfi, err := dir.Stat()
	if err != nil {
		return nil, nil, err
	}
	fd, err := unix.Openat(int(dir.Fd()), base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	name := os.NewFile(uintptr(fd), path)
	defer name.Close()
	fi, err := name.Stat()
	if err != nil {
		return nil, nil, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return nil, nil, refusal{fmt.Errorf("%s: a symbolic link, not followed: the log is read only at its own name", path)}
	case !fi.Mode().IsRegular():
		return nil, nil, refusal{fmt.Errorf("%s: a %v, not a regular file", path, fi.Mode().Type())}
	case st.Nlink != 1:
		return nil, nil, refusal{fmt.Errorf("%s: %d names (hard links), not one: it may be another file's", path, st.Nlink)}
	}
	if err := logReadable(dfi.Sys().(*syscall.Stat_t), dirTrusted, st); err != nil {
		return nil, nil, refusal{fmt.Errorf("%s: %w", path, err)}
	}
	// The descriptor's own file, not the name again: another may have
	// taken the name since it was checked. Without blocking: the file's
	// owner may hold a lease on it, and an open would then wait for the
	// kernel to break it (lease-break-time, 45s), longer than a restart
	// may take to settle; it fails at once instead (EWOULDBLOCK), and the
	// round is blind, as it is when the log cannot be read.
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(name.Fd())), os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: reopen for reading: %w", path, err)
	}
	if fi, err = f.Stat(); err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// errLogRefused is wrapped by openLog's refusals by its rules: the log is
// none of the watchdog's to read, whatever the round, which is no heap
// evidence; unlike a log it could not read this time (an I/O error, a
// lease), which makes the round blind.
var errLogRefused = errors.New("the gateway's log is not one the watchdog may read")

// refusal is an openLog refusal: its error's words, wrapping errLogRefused
// as well.
type refusal struct{ err error }

func (r refusal) Error() string   { return r.err.Error() }
func (r refusal) Unwrap() []error { return []error{r.err, errLogRefused} }

// logReadable says whether the watchdog may read, as root, the file st in
// the directory ds: only one that whoever could have put it there could
// read anyway. In a directory only root may write, reached through none
// another user may write (dirTrusted: else that user may have renamed
// another of root's directories into its place), root did; in another, its
// owner's own file is (an owner may always read it), and so is one anyone
// may read. A root-only file, or another user's private one, put there by
// a user who may write the directory or one above it, is not.
func logReadable(ds *syscall.Stat_t, dirTrusted bool, st *syscall.Stat_t) error {
	if dirTrusted && ds.Uid == 0 && ds.Mode&0o022 == 0 || st.Uid == ds.Uid && st.Uid != 0 || st.Mode&0o004 != 0 {
		return nil
	}
	return fmt.Errorf("owned by uid %d, mode %04o, in a directory of uid %d, mode %04o, that a user other than root may write, or reached through one: "+
		"not read as root, for it may be a file that user could not read; let the directory's owner own the log, or make it readable by all",
		st.Uid, st.Mode&0o7777, ds.Uid, ds.Mode&0o7777)
}

// v8Fatal begins the line V8 writes when it dies: Node writes it to its
// stderr as the line's first word, where no request a gateway logs puts
// it; v8OOM are the words of that line that say it ran out of heap.
var (
	v8Fatal = []byte("FATAL ERROR:")
	v8OOM   = [][]byte{[]byte("JavaScript heap out of memory"), []byte("Reached heap limit")}
)

// heapExhausted returns the last line of out that says V8 ran out of heap,
// trimmed; "" when none does.
func heapExhausted(out []byte) string {
	for len(out) > 0 {
		i := bytes.LastIndexByte(out[:len(out)-1], '\n')
		line := out[i+1:]
		out = out[:i+1]
		if !bytes.HasPrefix(bytes.TrimLeft(line, " \t"), v8Fatal) {
			continue
		}
		for _, sig := range v8OOM {
			if bytes.Contains(line, sig) {
				s := strings.TrimSpace(string(line))
				if len(s) > 200 {
					s = s[:200]
				}
				return s
			}
		}
	}
	return ""
}

// Restart implements Target: the cgroup's limit is raised first, so the new
// gateway starts under it; the heap is given in NODE_OPTIONS.
func (t ProcessTarget) Restart(ctx context.Context, c Change, m *TargetMemory) error {
	if c.MemoryMax > 0 {
		if err := cgroup2.SetMemoryLimit(t.Cgroup, c.MemoryMax); err != nil {
			return err
		}
	}
	if c.HeapMB > 0 {
		m.HeapMB = c.HeapMB
	}
	r := t.Command
	if m.HeapMB > 0 {
		// As it was: a heap the watchdog gave it before stays.
		r.Env = append(r.Env, "NODE_OPTIONS="+nodeopts.WithHeap(os.Getenv("NODE_OPTIONS"), m.HeapMB),
			"AIRLOCK_NODE_HEAP_MB="+strconv.Itoa(m.HeapMB))
	}
	if c.MemoryMax > 0 {
		r.Env = append(r.Env, "AIRLOCK_MEMORY_MAX="+strconv.FormatInt(c.MemoryMax, 10))
	}
	// The pid this restart gives it is no sign of an exit: the next look
	// takes it as its baseline.
	m.Pid = 0
	return r.recover(ctx, &m.PidFile)
}
