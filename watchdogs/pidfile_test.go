package watchdogs

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A pid file is trusted with a SIGKILL only when it could not have been
// written by someone else, and only for the process that was there when
// it was written.
func TestPidFileTrust(t *testing.T) {
	victim := exec.Command("sleep", "60")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	dir := t.TempDir()
	write := func(name string, mode os.FileMode, age time.Duration) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(strconv.Itoa(victim.Process.Pid)+"\n"), mode)
		os.Chmod(p, mode)
		at := time.Now().Add(-age)
		os.Chtimes(p, at, at)
		return p
	}
	link := filepath.Join(dir, "link.pid")
	os.Symlink(write("target.pid", 0o644, 0), link)
	for _, tc := range []struct {
		name, path string
		want       string // "" tracks it; else the error holds this
	}{
		{"its own", write("own.pid", 0o644, 0), ""},
		{"written before the process started: a reused pid", write("old.pid", 0o644, time.Hour), "its pid was reused"},
		{"others may write it", write("open.pid", 0o666, 0), "writable by group or others"},
		{"a symlink", link, "symbolic link"},
		{"none", filepath.Join(dir, "none.pid"), "no live process"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := track(tc.path)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("track = %v, want the process", err)
				}
				p.close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("track = %v, want an error saying %q", err, tc.want)
			}
			// The restart goes on without a kill, or is refused, but
			// the process is never killed.
			r := CommandRestart{Command: "true", PidFile: tc.path, Timeout: 5 * time.Second}
			rerr := r.Recover(context.Background())
			if errors.Is(err, ErrNoProcess) != (rerr == nil) {
				t.Errorf("Recover = %v: want it to go on only when the file names no live process of its own", rerr)
			}
			if gone(victim.Process.Pid) {
				t.Fatalf("the process was killed")
			}
		})
	}
}
