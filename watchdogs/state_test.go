package watchdogs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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
			if os.Geteuid() != 0 {
				t.Skip("chown to another user needs root")
			}
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
