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
		{"written before the process started: a reused pid, or a clock stepped", write("old.pid", 0o644, time.Hour), "its pid was reused, or the clock was stepped"},
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

// A live gateway whose pid file looks older than it (a clock stepped
// forward since the file was written, as NTP's first sync after boot
// does; simulated by dating the file back) is not taken for a crash: the
// round is blind, and nothing is restarted beside it.
func TestClockStepIsBlindNotACrash(t *testing.T) {
	gw := exec.Command("sleep", "60")
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { gw.Process.Kill(); gw.Wait() }()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "gw.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(gw.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute)
	os.Chtimes(pidFile, at, at)
	restarted := filepath.Join(dir, "restarted")
	g := &Gateway{Target: ProcessTarget{Command: CommandRestart{Command: "touch " + restarted, PidFile: pidFile, Timeout: 5 * time.Second}},
		Heap: Steps{Max: 4096}, Memory: Steps{Max: 8 << 30}}
	f := g.Probe(context.Background())
	if f.Kind != KindUnobservable || !f.Blind || !strings.Contains(f.Detail, "clock was stepped") {
		t.Errorf("finding %+v; want a blind round naming the clock", f)
	}
	if err := g.Recover(context.Background()); err == nil {
		t.Error("Recover went on; want it refused, the pid file not believed")
	}
	if _, err := os.Stat(restarted); err == nil {
		t.Error("the restart command ran beside the live gateway")
	}
	if gone(gw.Process.Pid) {
		t.Error("the live gateway was killed")
	}
}
