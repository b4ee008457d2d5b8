package watchdogs

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestInstall(t *testing.T) {
	files := []File{{"a.service", []byte("a\n")}, {"b.timer", []byte("b\n")}}
	for _, tc := range []struct {
		name     string
		existing map[string]string // file name → content before Install
		force    bool
		changed  []bool // per file; nil: refused
		errWant  string
	}{
		{"fresh directory", nil, false, []bool{true, true}, ""},
		{"same content is left as it is", map[string]string{"a.service": "a\n"}, false, []bool{false, true}, ""},
		{"other content is refused, and nothing is written", map[string]string{"b.timer": "mine\n"}, false, nil, "b.timer exists with other content (--force replaces it)"},
		{"--force replaces it", map[string]string{"b.timer": "mine\n"}, true, []bool{true, true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "units")
			if tc.existing != nil {
				os.Mkdir(dir, 0o755)
			}
			for name, data := range tc.existing {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Install(dir, files, tc.force)
			if tc.changed == nil {
				if err == nil || !strings.Contains(err.Error(), tc.errWant) {
					t.Fatalf("Install = %v, %v; want %q", got, err, tc.errWant)
				}
				if _, err := os.Stat(filepath.Join(dir, "a.service")); !os.IsNotExist(err) {
					t.Errorf("a.service was written though b.timer was refused: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var changed []bool
			for i, w := range got {
				changed = append(changed, w.Changed)
				if w.Path != filepath.Join(dir, files[i].Name) {
					t.Errorf("Written[%d].Path = %s", i, w.Path)
				}
				raw, err := os.ReadFile(w.Path)
				if err != nil || string(raw) != string(files[i].Data) {
					t.Errorf("%s = %q, %v; want %q", w.Path, raw, err, files[i].Data)
				}
				if fi, err := os.Stat(w.Path); err == nil && w.Changed && fi.Mode().Perm() != 0o644 {
					t.Errorf("%s has mode %v; want 0644", w.Path, fi.Mode().Perm())
				}
			}
			if !reflect.DeepEqual(changed, tc.changed) {
				t.Errorf("changed = %v; want %v", changed, tc.changed)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != len(files) {
				t.Errorf("%s holds %d entries; want %d (a temporary file left?)", dir, len(entries), len(files))
			}
		})
	}
}
