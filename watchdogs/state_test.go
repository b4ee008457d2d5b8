package watchdogs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func TestStateFile(t *testing.T) {
	dir := t.TempDir()
	saved := State{Strikes: 2, Restarts: []time.Time{time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)}, GaveUp: true}
	for _, tc := range []struct {
		name    string
		file    func(path string)
		want    State
		wantErr string
	}{
		{"missing is fresh", func(string) {}, State{}, ""},
		{"saved is read back", func(p string) {
			if err := saved.Save(p); err != nil {
				t.Fatal(err)
			}
		}, saved, ""},
		// Guessing a fresh state would reset the budget and let a
		// crash loop run on: refuse, and say how to start afresh.
		{"garbage is refused", func(p string) { os.WriteFile(p, []byte(`{"strikes":`), 0o600) }, State{}, "remove it to start afresh"},
		// What it says decides what a root watchdog kills and starts:
		// believed only as a pid file is.
		{"a symlink is refused", func(p string) {
			other := filepath.Join(dir, "elsewhere.json")
			saved.Save(other)
			os.Symlink(other, p)
		}, State{}, "symbolic link"},
		{"a FIFO is refused, not waited on", func(p string) { syscall.Mkfifo(p, 0o600) }, State{}, "not a regular file"},
		{"one others may write is refused", func(p string) {
			saved.Save(p)
			os.Chmod(p, 0o666)
		}, State{}, "writable by group or others"},
		{"another user's is refused", func(p string) {
			testutil.RequireRoot(t, "a state file another user owns (chown)")
			saved.Save(p)
			os.Chown(p, 65534, 65534)
		}, State{}, "owned by uid 65534"},
		{"a hard link is refused", func(p string) {
			saved.Save(p)
			os.Link(p, p+".other")
		}, State{}, "2 names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"), "state.json")
			os.MkdirAll(filepath.Dir(path), 0o700)
			tc.file(path)
			got, err := loadWithin(t, path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), path) {
					t.Fatalf("LoadState(%s) = %+v, %v; want an error naming the file and %q", path, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("LoadState(%s) = %+v, %v; want %+v", path, got, err, tc.want)
			}
			left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".state.json.*"))
			if len(left) != 0 {
				t.Errorf("temporary files left beside the state: %v", left)
			}
		})
	}
}

// A heap remembered below the start the operator gives now (raised since)
// is raised to it: a restart never lowers the gateway's heap, but by the
// cap: one remembered above it (the cap lowered since, or a state file
// that says what no step gives) is brought down to it, and that is the
// heap the restart command is given.
func TestRememberedHeapWithinStartAndCap(t *testing.T) {
	for _, tc := range []struct {
		remembered, want int
	}{
		{256, 1024},
		{2048, 2048},
		{999999, 4096},
	} {
		t.Run(strconv.Itoa(tc.remembered), func(t *testing.T) {
			dir := t.TempDir()
			env := filepath.Join(dir, "env")
			g := &Gateway{Target: ProcessTarget{Command: CommandRestart{Command: "echo $AIRLOCK_NODE_HEAP_MB $NODE_OPTIONS > " + env, Timeout: 5 * time.Second}},
				Heap: Steps{Start: 1024, Max: 4096}, Memory: Steps{Max: 8 << 30}}
			if err := g.Restore([]byte(fmt.Sprintf(`{"seen":true,"heap_mb":%d}`, tc.remembered))); err != nil {
				t.Fatal(err)
			}
			if g.mem.HeapMB != tc.want {
				t.Fatalf("heap after Restore = %d MB; want %d", g.mem.HeapMB, tc.want)
			}
			if err := g.Recover(context.Background()); err != nil {
				t.Fatal(err)
			}
			raw, _ := os.ReadFile(env)
			if got, want := strings.TrimSpace(string(raw)), fmt.Sprintf("%d --max-old-space-size=%d", tc.want, tc.want); !strings.Contains(got, want) {
				t.Errorf("the restart command's heap: %q; want %q", got, want)
			}
		})
	}
}

// loadWithin is LoadState, failing the test when it blocks (on a FIFO).
func loadWithin(t *testing.T, path string) (State, error) {
	t.Helper()
	type loaded struct {
		st  State
		err error
	}
	done := make(chan loaded, 1)
	go func() {
		st, err := LoadState(path)
		done <- loaded{st, err}
	}()
	select {
	case l := <-done:
		return l.st, l.err
	case <-time.After(5 * time.Second):
		// A writer lets the blocked open go, so the test ends.
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatalf("LoadState(%s) still blocked after 5s", path)
		return State{}, nil
	}
}

// quietWatchdog is a watchdog of probe with its state at state, reporting
// into an inbox of the test's own, at inbox.
func quietWatchdog(t *testing.T, probe Probe, state string) (w *Watchdog, inbox string) {
	t.Helper()
	inbox = filepath.Join(t.TempDir(), events.DefaultFile)
	l, err := events.Open(inbox, events.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &Watchdog{Source: "watchdog-test", Service: "svc", Probe: probe, StatePath: state, Inbox: l, Log: slog.New(slog.DiscardHandler)}, inbox
}

// runUnderWay starts a round on state that holds its lock inside its
// probe until end lets it finish, and returns the round's error.
func runUnderWay(t *testing.T, state string) (end func() error) {
	t.Helper()
	inside, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	running, _ := quietWatchdog(t, probeFunc(func(context.Context) Finding {
		close(inside)
		<-release
		return Finding{}
	}), state)
	go func() {
		_, err := running.Once(context.Background())
		first <- err
	}()
	<-inside
	return func() error {
		close(release)
		return <-first
	}
}

// once is one round of a quietWatchdog's.
func once(t *testing.T, probe Probe, state string) error {
	t.Helper()
	w, _ := quietWatchdog(t, probe, state)
	_, err := w.Once(context.Background())
	return err
}

// A run that holds the state's lock for longer than any round takes (a
// run by hand stopped with ^Z) would keep every later run busy, and the
// service unwatched, in silence: those runs fail, and say so in the inbox.
func TestStuckBehindAnotherRun(t *testing.T) {
	state := filepath.Join(t.TempDir(), "watchdog-shim.json")
	// The lock file stays from run to run: one last touched an hour ago
	// is no sign of the run that takes it now.
	long := time.Now().Add(-time.Hour)
	if err := os.WriteFile(state+".lock", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(state+".lock", long, long); err != nil {
		t.Fatal(err)
	}
	end := runUnderWay(t, state)
	defer func() {
		if err := end(); err != nil {
			t.Errorf("the first run: %v", err)
		}
	}()
	if err := once(t, probeFunc(healthy), state); !errors.Is(err, ErrBusy) {
		t.Fatalf("a run while the first is under way: %v; want busy", err)
	}
	// Taken an hour ago.
	if err := os.Chtimes(state+".lock", long, long); err != nil {
		t.Fatal(err)
	}
	w, inbox := quietWatchdog(t, probeFunc(healthy), state)
	_, err := w.Once(context.Background())
	if !errors.Is(err, ErrStuck) || errors.Is(err, ErrBusy) {
		t.Fatalf("a run while the first has held the lock for an hour: %v; want stuck, not busy", err)
	}
	evs, rerr := events.Read(inbox, time.Time{})
	if rerr != nil || len(evs) != 1 || evs[0].Kind != KindStuck || evs[0].Severity != events.Critical || !strings.Contains(evs[0].Detail, "1h0m0s") {
		t.Errorf("the inbox: %+v, %v; want one critical %s line saying how long", evs, rerr, KindStuck)
	}
}

// A run by hand beside the timer's, on the same state, does nothing and
// says it is busy: both would restart within the budget as each read it,
// and the last to save would lose what the other saw. The other
// watchdog's state beside it is no obstacle.
func TestOneRunAtATime(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "watchdog-shim.json")
	for _, tc := range []struct {
		name, state string
		busy        bool
	}{
		{"the same state", state, true},
		{"the other watchdog's state beside it", filepath.Join(dir, "watchdog-gateway.json"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			end := runUnderWay(t, state)
			probed := false
			err := once(t, probeFunc(func(context.Context) Finding {
				probed = true
				return Finding{}
			}), tc.state)
			if ferr := end(); ferr != nil {
				t.Fatalf("the first run: %v", ferr)
			}
			if errors.Is(err, ErrBusy) != tc.busy || probed == tc.busy {
				t.Fatalf("a second run meanwhile: %v, probed %v; want busy %v", err, probed, tc.busy)
			}
			if tc.busy && !strings.Contains(err.Error(), state) {
				t.Errorf("busy: %v; want it naming the state %s", err, state)
			}
			if err := once(t, probeFunc(healthy), tc.state); err != nil {
				t.Errorf("a run after the first ended: %v", err)
			}
		})
	}
	if fi, err := os.Lstat(state + ".lock"); err != nil || fi.Mode() != 0o600 {
		t.Errorf("the lock file: %v, %v; want a regular file, 0600", fi, err)
	}
}

// The lock file is opened as root in the state's directory: never through
// a symbolic link, nor one another user owns (who could hold its lock
// forever), nor another file's second name; one left readable is narrowed.
func TestStateLockFile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(lock string)
		want  string // "" takes the lock
	}{
		{"a symlink", func(l string) {
			os.WriteFile(l+".target", nil, 0o600)
			os.Symlink(l+".target", l)
		}, "too many levels of symbolic links"},
		{"a FIFO", func(l string) { syscall.Mkfifo(l, 0o600) }, "not a regular file"},
		{"a hard link", func(l string) {
			os.WriteFile(l, nil, 0o600)
			os.Link(l, l+".other")
		}, "2 names"},
		{"another user's", func(l string) {
			testutil.RequireRoot(t, "a state file another user owns (chown)")
			os.WriteFile(l, nil, 0o600)
			os.Chown(l, 65534, 65534)
		}, "owned by uid 65534"},
		{"left readable", func(l string) {
			os.WriteFile(l, nil, 0o644)
			os.Chmod(l, 0o644)
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "watchdog-shim.json")
			lock := state + ".lock"
			tc.plant(lock)
			w, inbox := quietWatchdog(t, probeFunc(healthy), state)
			_, err := w.Once(context.Background())
			if tc.want == "" {
				if fi, serr := os.Lstat(lock); err != nil || serr != nil || fi.Mode() != 0o600 {
					t.Errorf("Once = %v; lock %v (%v): want a round, the lock narrowed to 0600", err, fi, serr)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), lock) || errors.Is(err, ErrBusy) {
				t.Errorf("Once = %v; want a refusal naming %s and saying %q", err, lock, tc.want)
			}
			if evs, _ := events.Read(inbox, time.Time{}); len(evs) != 1 || evs[0].Kind != KindStateUnreadable {
				t.Errorf("inbox = %+v; want the refusal said, %s", evs, KindStateUnreadable)
			}
			if fi, err := os.Lstat(lock + ".target"); err == nil && fi.Mode() != 0o600 {
				t.Errorf("the symlink's target was changed: %v", fi.Mode())
			}
		})
	}
}

// A watchdog may run before the pod's first boot, and make the directories
// down to the pod's own (/var/lib/airlock above /var/lib/airlock/pod): each
// is 0711 as the pod makes its state directory, traversable by the pod's
// services on their way to its CA bundle.
func TestStateDirectoriesTraversable(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o022))
	for _, tc := range []struct {
		name string
		make func(t *testing.T, state string) error
	}{
		{"a round", func(t *testing.T, state string) error { return once(t, probeFunc(healthy), state) }},
		{"a save", func(_ *testing.T, state string) error { return State{}.Save(state) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			state := filepath.Join(root, "var", "lib", "airlock", "watchdog-shim.json")
			if err := tc.make(t, state); err != nil {
				t.Fatal(err)
			}
			for d := filepath.Dir(state); d != root; d = filepath.Dir(d) {
				if fi, err := os.Stat(d); err != nil || fi.Mode() != os.ModeDir|0o711 {
					t.Errorf("%s: %v (%v); want a directory, 0711", d, fi.Mode(), err)
				}
			}
		})
	}
}
