package watchdogs

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"), "state.json")
			os.MkdirAll(filepath.Dir(path), 0o700)
			tc.file(path)
			got, err := LoadState(path)
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
// is raised to it: a restart never lowers the gateway's heap.
func TestRememberedHeapNeverBelowStart(t *testing.T) {
	g := &Gateway{Heap: Steps{Start: 1024, Max: 4096}}
	if err := g.Restore([]byte(`{"seen":true,"heap_mb":256}`)); err != nil {
		t.Fatal(err)
	}
	if g.mem.HeapMB != 1024 {
		t.Fatalf("heap after Restore = %d MB; want the start, 1024", g.mem.HeapMB)
	}
	if err := g.Restore([]byte(`{"seen":true,"heap_mb":2048}`)); err != nil || g.mem.HeapMB != 2048 {
		t.Fatalf("heap after Restore = %d MB, %v; want 2048, as remembered", g.mem.HeapMB, err)
	}
}
