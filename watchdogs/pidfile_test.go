package watchdogs

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/procstat"
	"github.com/airlock-sandbox/airlock/internal/testutil"
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
			p, err := track(tc.path, &pidRecord{})
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

// recordOf is what a round that believed the pid file at path would have
// recorded, the process it named having started ticks after boot.
func recordOf(t *testing.T, path string, ticks int64) pidRecord {
	t.Helper()
	pid, fi, err := readPidFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, boot, err := thisBoot()
	if err != nil {
		t.Fatal(err)
	}
	return pidRecord{Pid: pid, Ticks: ticks, Boot: boot, Inode: fi.Sys().(*syscall.Stat_t).Ino, Mtime: fi.ModTime()}
}

// What a round believed of a pid file decides the next: the same file
// naming a pid whose process started at another time is stale (the
// process it named has exited, its pid another's), so the restart goes on
// and nothing is killed; naming the same process, it is believed even when
// the clock has been stepped since. The same file believed in an earlier
// boot is stale whatever it names; one merely dated before the boot is not
// believed either way.
func TestPidFileRemembered(t *testing.T) {
	other := exec.Command("sleep", "60") // holds the pid the file names
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	_, ticks, err := procstat.Stat(other.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	boot, _, err := thisBoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// A file dated back is one written before its process started (as
	// a pid reused since, or a clock stepped since, make it look).
	write := func(name string, at time.Time) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strconv.Itoa(other.Process.Pid)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
		return p
	}
	now, before := time.Now(), time.Now().Add(-time.Minute)
	for _, tc := range []struct {
		name string
		path string
		rec  func(path string) pidRecord
		want string // "" tracks it; else the error holds this
	}{
		{"fresh, nothing recorded", write("fresh.pid", now), func(string) pidRecord { return pidRecord{} }, ""},
		{"its pid taken since it was believed", write("taken.pid", before),
			func(p string) pidRecord { return recordOf(t, p, ticks-700) }, "its pid is another's"},
		{"the same process, the clock stepped since it was believed", write("stepped.pid", before),
			func(p string) pidRecord { return recordOf(t, p, ticks) }, ""},
		{"never believed", write("never.pid", before), func(string) pidRecord { return pidRecord{} }, "not believed either way"},
		{"rewritten since it was believed", write("rewritten.pid", before), func(p string) pidRecord {
			r := recordOf(t, p, ticks-700)
			r.Mtime = r.Mtime.Add(-time.Second)
			return r
		}, "not believed either way"},
		{"believed in an earlier boot", write("otherboot.pid", before), func(p string) pidRecord {
			r := recordOf(t, p, ticks-700)
			r.Boot = "another"
			return r
		}, "believed in an earlier boot"},
		{"believed in an earlier boot, rewritten since", write("otherboot-rewritten.pid", before), func(p string) pidRecord {
			r := recordOf(t, p, ticks-700)
			r.Boot, r.Mtime = "another", r.Mtime.Add(-time.Second)
			return r
		}, "not believed either way"},
		// Dated before the boot as the clock now reads it: a clock stepped
		// forward since the boot, a live process's file.
		{"dated before this boot, never believed", write("oldboot.pid", boot.Add(-time.Hour)), func(string) pidRecord { return pidRecord{} }, "not believed either way"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.rec(tc.path)
			was := rec
			p, err := track(tc.path, &rec)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("track = %v, want the process", err)
				}
				p.close()
				if want := recordOf(t, tc.path, ticks); rec != want {
					t.Errorf("record after track = %+v, want %+v", rec, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("track = %v, want an error saying %q", err, tc.want)
			}
			if rec != was {
				t.Errorf("record after a file not believed = %+v, want it as it was, %+v", rec, was)
			}
			stale := !strings.Contains(tc.want, "not believed")
			if errors.Is(err, ErrNoProcess) != stale {
				t.Errorf("track = %v: ErrNoProcess %v, want %v", err, !stale, stale)
			}
			ran := filepath.Join(dir, "ran-"+filepath.Base(tc.path))
			r := CommandRestart{Command: "touch " + ran, PidFile: tc.path, Timeout: 5 * time.Second}
			rerr := r.recover(context.Background(), &rec)
			if _, serr := os.Stat(ran); (rerr == nil && serr == nil) != stale {
				t.Errorf("Recover = %v (command ran: %v); want the restart to go on only when the file is stale", rerr, serr == nil)
			}
			if gone(other.Process.Pid) {
				t.Fatalf("the process holding the pid was killed")
			}
		})
	}
}

// A pid file that would hold a round forever (a FIFO), or whose content
// another name of the same file may change (a hard link), is refused.
func TestPidFileNotARegularFileOfItsOwn(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.pid")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	linked := filepath.Join(dir, "linked.pid")
	os.WriteFile(linked, []byte("12345\n"), 0o644)
	if err := os.Link(linked, filepath.Join(dir, "other-name")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, want string }{
		{"a FIFO", fifo, "not a regular file"},
		{"a hard link", linked, "2 names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				var rec pidRecord
				_, err := track(tc.path, &rec)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || errors.Is(err, ErrNoProcess) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
					t.Fatalf("track = %v; want a refusal naming the file and saying %q", err, tc.want)
				}
			case <-time.After(5 * time.Second):
				// Unblock the open, so the test ends.
				if f, err := os.OpenFile(tc.path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					f.Close()
				}
				t.Fatal("track still blocked after 5s")
			}
		})
	}
}

// A watchdog remembers the pid file it believed while the service ran; once
// the service has died and its pid is another process's (taken since: the
// file, unchanged, names a process that started after it was written), the
// round restarts the service, as for a crash, and leaves that process be.
// Without the memory the file is believed neither way and nothing is ever
// restarted.
func TestTakenPidIsRestartedNotKilled(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      func(*testing.T) *procEnv
		watchdog func(*procEnv) *Watchdog
		record   func(*Watchdog) *pidRecord // where the watchdog keeps it
		want     string                     // the inbox after the round
	}{
		{"gateway", func(t *testing.T) *procEnv { return newGatewayEnv(t, "") },
			func(e *procEnv) *Watchdog { return e.gatewayWatchdog(e.start, "", heapSteps, memorySteps, wideBudget) },
			func(w *Watchdog) *pidRecord { return &w.Probe.(*Gateway).mem.PidFile },
			"gateway_crash/warning/false restart/info/true"},
		{"shim", newShimEnv,
			func(e *procEnv) *Watchdog {
				w := e.watchdog(e.start, 3, wideBudget)
				p := &PlainProcess{Health: w.Probe.(*HTTPProbe), Restart: w.Recover.(CommandRestart)}
				w.Probe, w.Recover = p, p
				return w
			},
			func(w *Watchdog) *pidRecord { return &w.Probe.(*PlainProcess).pid },
			"shim_dead/warning/false restart/info/true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.env(t)
			w := tc.watchdog(e)
			e.once(w, Healthy)
			if rec := tc.record(w); rec.Pid != e.pid() || rec.Ticks == 0 {
				t.Fatalf("remembered %+v after a healthy round; want the running pid, %d, and its start", rec, e.pid())
			}
			dead := e.signal(syscall.SIGKILL)
			testutil.WaitFor(t, "the "+e.service+" to end", func() bool { return gone(dead) && !e.answers() })

			// The pid taken: the file, as believed then, now names a
			// process that started after it was written.
			squatter := exec.Command("sleep", "60")
			if err := squatter.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { squatter.Process.Kill(); squatter.Wait() })
			_, ticks, err := procstat.Stat(squatter.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(e.pidFile, []byte(strconv.Itoa(squatter.Process.Pid)+"\n"), 0o644)
			at := time.Now().Add(-time.Minute)
			os.Chtimes(e.pidFile, at, at)
			w = tc.watchdog(e)
			st, err := LoadState(e.statePath)
			if err != nil {
				t.Fatal(err)
			}
			mem := w.Probe.(Remembering)
			if err := mem.Restore(st.Probe); err != nil {
				t.Fatal(err)
			}
			*tc.record(w) = recordOf(t, e.pidFile, ticks-700)
			if st.Probe, err = mem.Remember(); err != nil {
				t.Fatal(err)
			}
			if err := st.Save(e.statePath); err != nil {
				t.Fatal(err)
			}

			e.once(w, Recovered)
			if gone(squatter.Process.Pid) {
				t.Error("the process that took the pid was killed")
			}
			if pid := e.pid(); pid == squatter.Process.Pid || !e.answers() {
				t.Errorf("after the round: pid %d, answers %v; want a new %s answering", pid, e.answers(), e.service)
			}
			if got := e.lines(); got != tc.want {
				t.Errorf("inbox = %q, want %q", got, tc.want)
			}
		})
	}
}
