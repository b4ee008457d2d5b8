package watchdogs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/durable"
	"github.com/airlock-sandbox/airlock/internal/trusted"
	"golang.org/x/sys/unix"
)

// State is what one watchdog remembers between rounds. A one-shot run (a
// timer's) starts from the file and writes it back, so "three timeouts in
// a row" and "three restarts in thirty minutes" span runs.
type State struct {
	// Strikes is how many rounds in a row found a suspicion (a probe
	// timeout) that becomes a fault only after Watchdog.StrikesToFault.
	Strikes int `json:"strikes"`
	// Restarts are the times of the recoveries still inside the budget's
	// window, oldest first.
	Restarts []time.Time `json:"restarts"`
	// GaveUp is set once the give_up line is written, so a timer that
	// keeps firing past the budget says it once, not every round (until
	// the service is healthy, or a restart is tried again).
	GaveUp bool `json:"gave_up"`
	// Blind is set once a blind round is said, until the probe sees again.
	Blind bool `json:"blind,omitempty"`
	// Probe is what a Remembering probe keeps.
	Probe json.RawMessage `json:"probe,omitempty"`
	// Metrics are the counters the next round's metrics go on from
	// (Metrics.Observe); nil without metrics.
	Metrics *Counts `json:"metrics,omitempty"`
}

// LoadState reads the state file; a missing file is a fresh state. A file
// that does not parse is an error: guessing would reset the budget and let
// a crash loop run on. It is believed as a pid file is (openTrusted): what
// it remembers decides what a root watchdog kills and starts.
func LoadState(path string) (State, error) {
	var st State
	f, _, err := openTrusted(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("watchdog state: %w", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(f)
	if err != nil {
		return st, fmt.Errorf("watchdog state %s: %w", path, err)
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, fmt.Errorf("watchdog state %s: %w (remove it to start afresh)", path, err)
	}
	return st, nil
}

// Save writes the state atomically (durable.WriteFile).
func (st State) Save(path string) error {
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := makeStateDir(path); err != nil {
		return err
	}
	if err := durable.WriteFile(path, raw, 0o600); err != nil {
		return fmt.Errorf("watchdog state: %w", err)
	}
	return nil
}

// makeStateDir makes the directory of the state file at path, 0711 as the
// pod makes its own state directory (supervisor's stateDir): traversable,
// not listable. The watchdogs may run before the pod's first boot, and
// make a directory on the way to the pod's (/var/lib/airlock, above
// /var/lib/airlock/pod): one they made 0700 would keep the pod's services
// from the CA bundle in it.
func makeStateDir(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return fmt.Errorf("watchdog state %s: %w", path, err)
	}
	return nil
}

// ErrBusy: another run of the watchdog holds its state's lock (a run by
// hand beside the timer's); this one did nothing.
var ErrBusy = errors.New("another run of this watchdog is under way")

// ErrStuck: another run has held the state's lock for longer than
// stuckAfter, which no round takes (a run by hand stopped with ^Z, or
// hung): every run finds it busy, and nothing is watched. Unlike ErrBusy
// it fails the run, and says so in the inbox.
var ErrStuck = errors.New("the watchdog is stuck behind another run")

// stuckAfter is how long a run may hold the state's lock before the runs
// that find it held say the watchdog is stuck: past a round's probes,
// restart and settle, however slow.
const stuckAfter = 30 * time.Minute

// ExitBusy is the exit status of a one-shot run that found another under
// way (sysexits' EX_TEMPFAIL): no failure of the service it watches, and
// its systemd unit takes it for a success.
const ExitBusy = 75

// stateLock is the lock of a state file, held for a whole round: two runs
// at once would each restart within the budget as they read it, and the
// last to write the state would lose what the other saw. It is a file of
// its own beside the state (path.lock), for the state is replaced whole
// (renamed over) by each save, and a lock of the replaced file would bar
// no one. The file also holds what the last run said of a state it could
// not read (see said).
type stateLock struct{ f *os.File }

// lockState takes the lock of the state file at path, making its directory
// (makeStateDir) first: in the directory as the trusted walk reaches it
// (trusted.OpenDir), not through a symbolic link as its own name, a
// regular file with one name that root or this user owns, 0600 (anyone
// who may open it may hold its lock). One another run holds is ErrBusy.
func lockState(path string) (*stateLock, error) {
	if err := makeStateDir(path); err != nil {
		return nil, err
	}
	dirPath, base := trusted.SplitLast(path)
	dir, err := trusted.OpenDir(dirPath)
	if err != nil {
		return nil, fmt.Errorf("watchdog state %s: %w", path, err)
	}
	defer dir.Close()
	lockPath := path + ".lock"
	fd, err := unix.Openat(int(dir.Fd()), base+".lock", unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("watchdog state lock: %w", &os.PathError{Op: "open", Path: lockPath, Err: err})
	}
	f := os.NewFile(uintptr(fd), lockPath)
	fi, err := f.Stat()
	switch {
	case err != nil:
	case !fi.Mode().IsRegular():
		err = fmt.Errorf("watchdog state lock %s: a %v, not a regular file", lockPath, fi.Mode().Type())
	case fi.Sys().(*syscall.Stat_t).Nlink != 1:
		err = fmt.Errorf("watchdog state lock %s: %d names (hard links), not one", lockPath, fi.Sys().(*syscall.Stat_t).Nlink)
	default:
		if err = trusted.Owner(fi); err != nil {
			err = fmt.Errorf("watchdog state lock %s: %w", lockPath, err)
		} else if fi.Mode().Perm() != 0o600 {
			err = f.Chmod(0o600)
		}
	}
	if err == nil {
		err = durable.Flock(f, unix.LOCK_EX|unix.LOCK_NB)
		switch held := time.Since(fi.ModTime()); {
		case errors.Is(err, unix.EWOULDBLOCK) && held > stuckAfter:
			err = fmt.Errorf("watchdog state %s: %w: another run has held %s for %v (one stopped, a ^Z, or hung): nothing is watched until it ends", path, ErrStuck, lockPath, held.Round(time.Second))
		case errors.Is(err, unix.EWOULDBLOCK):
			err = fmt.Errorf("watchdog state %s: %w (it holds %s): this run does nothing", path, ErrBusy, lockPath)
		case err != nil:
			err = fmt.Errorf("watchdog state lock %s: flock: %w", lockPath, err)
		default:
			// When this run took it, for a run that finds it held.
			err = unix.Futimes(fd, nil)
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &stateLock{f}, nil
}

// said is what the last run said of a state it could not read ("": it
// read it, or said nothing).
func (l *stateLock) said() string {
	raw, _ := io.ReadAll(io.NewSectionReader(l.f, 0, 1<<16))
	return string(raw)
}

// say records what this run said of the state ("" once it reads it
// again), so that a streak of runs that cannot read it says so once.
func (l *stateLock) say(what string) error {
	if l.said() == what {
		return nil
	}
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("watchdog state lock: %w", err)
	}
	if _, err := l.f.WriteAt([]byte(what), 0); err != nil {
		return fmt.Errorf("watchdog state lock: %w", err)
	}
	return nil
}

// unlock drops the lock (closing the file does).
func (l *stateLock) unlock() { l.f.Close() }
