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
