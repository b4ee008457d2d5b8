package watchdogs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

func newGatewayEnv(t *testing.T, cgroup string) *procEnv {
	t.Helper()
	testutil.RequireTool(t, "node")
	return newProcEnv(t, "gateway", "node testdata/gateway.js", "/healthz", cgroup)
}

// gatewayWatchdog is a fresh gateway watchdog (as each one-shot run makes)
// over a plain process, restarting with cmd.
func (e *procEnv) gatewayWatchdog(cmd, cgroup string, heap, memory Steps, b Budget) *Watchdog {
	w := e.watchdog(cmd, 3, b)
	w.Probe = &Gateway{
		Target: ProcessTarget{Command: CommandRestart{Command: cmd, PidFile: e.pidFile, Timeout: 10 * time.Second}, Log: e.log, Cgroup: cgroup},
		Health: NewHTTPProbe(e.url, 300*time.Millisecond, KindGatewayCrash, KindGatewayHung, nil),
		Heap:   heap, Memory: memory,
	}
	w.Recover = w.Probe.(*Gateway)
	return w
}

// ask sends a request the gateway never answers (it dies of it).
func (e *procEnv) ask(path string) {
	c := http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 30 * time.Second}
	if resp, err := c.Get(e.base + path); err == nil {
		resp.Body.Close()
	}
}

var (
	heapSteps   = Steps{Start: 32, Max: 128}
	memorySteps = Steps{Max: 256 << 20}
)

// A gateway that runs out of V8 heap is told apart by the last words in
// its log and restarted with the next heap step in NODE_OPTIONS; the step
// after that is remembered across one-shot runs, up to the cap.
func TestGatewayHeapOOMRestartsWithALargerHeap(t *testing.T) {
	t.Setenv("NODE_OPTIONS", "--max-old-space-size=32 --no-deprecation")
	e := newGatewayEnv(t, "")
	e.once(e.gatewayWatchdog(e.start, "", heapSteps, memorySteps, wideBudget), Healthy)

	for i, want := range []int{64, 128, 128} {
		old := e.pid()
		e.ask("/leak")
		testutil.WaitFor(t, "the gateway to run out of heap", func() bool { return gone(old) })
		res := e.once(e.gatewayWatchdog(e.start, "", heapSteps, memorySteps, Budget{Max: 5, Window: time.Hour}), Recovered)
		if res.Kind != KindGatewayHeapOOM {
			t.Fatalf("restart %d: kind = %q (%s), want %q", i, res.Kind, res.Detail, KindGatewayHeapOOM)
		}
		opts := testutil.Environ(t, e.pid(), "NODE_OPTIONS")
		if wantOpts := fmt.Sprintf("--no-deprecation --max-old-space-size=%d", want); opts != wantOpts {
			t.Errorf("restart %d: the new gateway's NODE_OPTIONS = %q, want %q", i, opts, wantOpts)
		}
	}
	if got, want := e.lines(), strings.Repeat("gateway_heap_oom/warning/false restart/info/true ", 3); got != strings.TrimSpace(want) {
		t.Errorf("inbox = %q, want %q", got, want)
	}
	if d := e.inboxEvents()[4].Detail; !strings.Contains(d, "JavaScript heap out of memory") || !strings.Contains(d, "at its cap or above already") {
		t.Errorf("the third finding %q: want V8's words and that the heap is at its cap", d)
	}
}

// A running gateway's output holding V8's words is not its end: one that
// logs a request's path, or was made to print V8's whole fatal line, is
// left running, its heap as it was. (Its real end, another pid in the
// pid file, is TestGatewayHeapOOMRestartsWithALargerHeap's.)
func TestGatewayHeapWordsOfALiveGateway(t *testing.T) {
	e := newGatewayEnv(t, "")
	e.once(e.gatewayWatchdog(e.start, "", heapSteps, memorySteps, wideBudget), Healthy)
	pid := e.pid()
	f, err := os.OpenFile(e.log, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`127.0.0.1 - "GET /search?q=FATAL ERROR: Reached heap limit HTTP/1.1" 404` + "\n" +
		"FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory\n")
	f.Close()
	e.once(e.gatewayWatchdog(e.start, "", heapSteps, memorySteps, wideBudget), Healthy)
	if e.pid() != pid || gone(pid) {
		t.Errorf("the gateway (pid %d) was replaced by pid %d for words in its log", pid, e.pid())
	}
}

// memoryGroup makes a memory cgroup with limit bytes, removed at cleanup.
func memoryGroup(t *testing.T, limit int64) string {
	t.Helper()
	testutil.RequireRoot(t, "a memory cgroup")
	dir, err := cgroup2.NewMemoryGroup(fmt.Sprintf("airlock-wdtest-%d", os.Getpid()), limit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sandbox.RemoveTree(dir); err != nil {
			t.Error(err)
		}
	})
	return dir
}

// A gateway the OOM killer kills at its cgroup's limit is told apart by
// the group's oom_kill count, and restarted under a doubled limit, up to
// the cap.
func TestGatewayOOMKillRestartsWithALargerLimit(t *testing.T) {
	group := memoryGroup(t, 96<<20)
	e := newGatewayEnv(t, group)
	e.once(e.gatewayWatchdog(e.start, group, heapSteps, memorySteps, wideBudget), Healthy)

	old := e.pid()
	e.ask("/hog")
	testutil.WaitFor(t, "the OOM killer to kill the gateway", func() bool { return gone(old) })
	res := e.once(e.gatewayWatchdog(e.start, group, heapSteps, memorySteps, wideBudget), Recovered)
	if res.Kind != KindGatewayOOMKill {
		t.Fatalf("kind = %q (%s), want %q", res.Kind, res.Detail, KindGatewayOOMKill)
	}
	if limit, err := cgroup2.MemoryLimit(group); err != nil || limit != 192<<20 {
		t.Errorf("the group's limit = %d, %v: want %d", limit, err, 192<<20)
	}
	raw, _ := os.ReadFile(filepath.Join(group, "cgroup.procs"))
	if !strings.Contains(" "+strings.Join(strings.Fields(string(raw)), " ")+" ", fmt.Sprintf(" %d ", e.pid())) {
		t.Errorf("the new gateway %d is not in the group (%q)", e.pid(), raw)
	}
	if got, want := e.lines(), "gateway_oom_kill/warning/false restart/info/true"; got != want {
		t.Errorf("inbox = %q, want %q", got, want)
	}
	if d := e.inboxEvents()[0].Detail; !strings.Contains(d, "192 MiB (was 96 MiB)") {
		t.Errorf("finding %q: want the step named", d)
	}
}

// A gateway killed with no sign of running out of memory is restarted as
// it was: with the heap an earlier recovery gave it.
func TestGatewayCrashRestartsAsItWas(t *testing.T) {
	t.Setenv("NODE_OPTIONS", "--max-old-space-size=32")
	e := newGatewayEnv(t, "")
	e.once(e.gatewayWatchdog(e.start, "", heapSteps, memorySteps, wideBudget), Healthy)
	old := e.pid()
	e.ask("/leak")
	testutil.WaitFor(t, "the gateway to run out of heap", func() bool { return gone(old) })
	e.once(e.gatewayWatchdog(e.start, "", heapSteps, memorySteps, wideBudget), Recovered)

	e.signal(syscall.SIGKILL)
	testutil.WaitFor(t, "the killed gateway to be gone", func() bool { return gone(e.pid()) })
	res := e.once(e.gatewayWatchdog(e.start, "", heapSteps, memorySteps, wideBudget), Recovered)
	if res.Kind != KindGatewayCrash {
		t.Fatalf("kind = %q (%s), want %q", res.Kind, res.Detail, KindGatewayCrash)
	}
	if got := testutil.Environ(t, e.pid(), "NODE_OPTIONS"); got != "--max-old-space-size=64" {
		t.Errorf("after the crash, NODE_OPTIONS = %q: want the heap the last recovery gave", got)
	}
	if got, want := e.lines(), "gateway_heap_oom/warning/false restart/info/true gateway_crash/warning/false restart/info/true"; got != want {
		t.Errorf("inbox = %q, want %q", got, want)
	}
}

// A SIGSTOPped gateway runs but never answers: hung after three timeouts
// in a row (across one-shot runs), killed and replaced.
func TestGatewayStoppedIsFoundHungAndReplaced(t *testing.T) {
	e := newGatewayEnv(t, "")
	old := e.signal(syscall.SIGSTOP)
	e.once(e.gatewayWatchdog(e.start, "", heapSteps, memorySteps, wideBudget), Suspect)
	e.once(e.gatewayWatchdog(e.start, "", heapSteps, memorySteps, wideBudget), Suspect)
	res := e.once(e.gatewayWatchdog(e.start, "", heapSteps, memorySteps, wideBudget), Recovered)
	if res.Kind != KindGatewayHung {
		t.Fatalf("kind = %q (%s), want %q", res.Kind, res.Detail, KindGatewayHung)
	}
	if !gone(old) || e.pid() == old || !e.answers() {
		t.Errorf("old %d gone %v, new %d answers %v: want the hung one killed and a new one answering", old, gone(old), e.pid(), e.answers())
	}
	if got, want := e.lines(), "gateway_hung/warning/false restart/info/true"; got != want {
		t.Errorf("inbox = %q, want %q", got, want)
	}
}

// A gateway that crashes at each start is given up on past the budget,
// with one critical line, not restarted in a loop.
func TestGatewayCrashLoopIsGivenUp(t *testing.T) {
	e := newGatewayEnv(t, "")
	e.once(e.gatewayWatchdog(e.crash, "", heapSteps, memorySteps, wideBudget), Healthy)
	e.signal(syscall.SIGKILL)
	testutil.WaitFor(t, "the killed gateway to be gone", func() bool { return gone(e.pid()) })
	now := time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)
	for _, want := range []Outcome{Failed, Failed, GaveUp, GaveUp} {
		w := e.gatewayWatchdog(e.crash, "", heapSteps, memorySteps, Budget{Max: 2, Window: time.Hour})
		w.Settle = 500 * time.Millisecond
		w.Now = func() time.Time { return now }
		// A crashing gateway still starting (a loaded machine's node)
		// runs: the round is about the one that has crashed.
		testutil.WaitFor(t, "the crashing gateway to be gone", func() bool { return gone(e.pid()) })
		e.once(w, want)
		now = now.Add(time.Minute)
	}
	const want = "gateway_crash/warning/false restart/critical/false gateway_crash/warning/false restart/critical/false gateway_crash/warning/false give_up/critical/false"
	if got := e.lines(); got != want {
		t.Errorf("inbox = %q, want %q", got, want)
	}
}

// A gateway that runs out of heap again while its restart settles: the
// round fails, and the next round still sees V8's words (settling read
// them without using them up) and takes the next heap step, not a crash
// "as it was".
func TestGatewayHeapOOMWhileSettlingIsTheNextRoundsToJudge(t *testing.T) {
	t.Setenv("NODE_OPTIONS", "--max-old-space-size=32")
	e := newGatewayEnv(t, "")
	leak := filepath.Join(t.TempDir(), "leak")
	leaking := strings.Replace(e.start, " >> ", " --leak-if "+leak+" >> ", 1)
	e.once(e.gatewayWatchdog(leaking, "", heapSteps, memorySteps, wideBudget), Healthy)

	os.WriteFile(leak, nil, 0o644)
	old := e.pid()
	e.ask("/leak")
	testutil.WaitFor(t, "the gateway to run out of heap", func() bool { return gone(old) })
	w := e.gatewayWatchdog(leaking, "", heapSteps, memorySteps, wideBudget)
	w.Settle = 10 * time.Second
	if res := e.once(w, Failed); res.Kind != KindGatewayHeapOOM {
		t.Fatalf("kind = %q, want %q", res.Kind, KindGatewayHeapOOM)
	}
	os.Remove(leak)
	testutil.WaitFor(t, "the restarted gateway to run out of heap too", func() bool { return gone(e.pid()) })
	res := e.once(e.gatewayWatchdog(leaking, "", heapSteps, memorySteps, wideBudget), Recovered)
	if res.Kind != KindGatewayHeapOOM {
		t.Fatalf("the next round: kind = %q (%s), want %q", res.Kind, res.Detail, KindGatewayHeapOOM)
	}
	if got := testutil.Environ(t, e.pid(), "NODE_OPTIONS"); got != "--max-old-space-size=128" {
		t.Errorf("NODE_OPTIONS = %q, want the step after 64", got)
	}
}

// A watchdog that cannot read its evidence (here: a --cgroup that is no
// memory cgroup) restarts nothing, says so once, and is blind.
func TestGatewayUnobservableRestartsNothing(t *testing.T) {
	e := newGatewayEnv(t, "")
	notAGroup := t.TempDir()
	for range 2 {
		e.once(e.gatewayWatchdog(e.start, notAGroup, heapSteps, memorySteps, wideBudget), Blind)
	}
	if pid := e.pid(); pid != e.pids[0] || !e.answers() {
		t.Errorf("pid %d (was %d): the gateway was restarted", pid, e.pids[0])
	}
	if got, want := e.lines(), "unobservable/warning/false"; got != want {
		t.Errorf("inbox = %q, want %q", got, want)
	}
}

// Without a pid file, a gateway refusing its health URL after an OOM kill
// is still told apart by its cgroup's count.
func TestGatewayOOMKillWithoutAPidFile(t *testing.T) {
	group := memoryGroup(t, 96<<20)
	e := newGatewayEnv(t, group)
	watchdog := func() *Watchdog {
		w := e.gatewayWatchdog(e.start, group, heapSteps, memorySteps, wideBudget)
		g := w.Probe.(*Gateway)
		t := g.Target.(ProcessTarget)
		t.Command.PidFile = ""
		g.Target = t
		return w
	}
	e.once(watchdog(), Healthy)
	old := e.pid()
	e.ask("/hog")
	testutil.WaitFor(t, "the OOM killer to kill the gateway", func() bool { return gone(old) })
	if res := e.once(watchdog(), Recovered); res.Kind != KindGatewayOOMKill {
		t.Fatalf("kind = %q (%s), want %q", res.Kind, res.Detail, KindGatewayOOMKill)
	}
}

func TestStepsNeverLowerALimit(t *testing.T) {
	for _, tc := range []struct {
		steps     Steps
		cur, want int64
		atMax     bool
	}{
		{Steps{Start: 32, Max: 128}, 32, 64, false},
		{Steps{Start: 32, Max: 128}, 100, 128, false},
		{Steps{Start: 32, Max: 128}, 128, 128, true},
		{Steps{Start: 32, Max: 128}, 512, 512, true},      // above the cap: kept, not lowered
		{Steps{Start: 32, Max: 128}, 0, 64, false},        // unknown: from Start
		{Steps{Max: 4096}, 0, 4096, false},                // no Start either: the cap
		{Steps{Start: 1024, Max: 4096}, 256, 2048, false}, // remembered below Start (raised since): from Start
	} {
		if got, at := tc.steps.next(tc.cur); got != tc.want || at != tc.atMax {
			t.Errorf("%+v.next(%d) = %d, %v; want %d, %v", tc.steps, tc.cur, got, at, tc.want, tc.atMax)
		}
	}
}

// A FIFO in the log's place is no log: the look says so at once (no heap
// evidence, the round not blind: its writer may put one there at will)
// instead of waiting for a writer that never comes.
func TestLogThatIsAFIFO(t *testing.T) {
	log := filepath.Join(t.TempDir(), "gw.log")
	if err := syscall.Mkfifo(log, 0o644); err != nil {
		t.Fatal(err)
	}
	target := ProcessTarget{Log: log}
	done := make(chan Evidence, 1)
	go func() {
		ev, err := target.Look(context.Background(), &TargetMemory{})
		if err != nil {
			t.Errorf("look: %v; want the log not read, not the look failed", err)
		}
		done <- ev
	}()
	select {
	case ev := <-done:
		if !strings.Contains(ev.LogNotRead, "not a regular file") {
			t.Errorf("look = %+v; want the log not read, not a regular file", ev)
		}
	case <-time.After(10 * time.Second):
		// Let it go: a writer opens the FIFO.
		if fd, err := syscall.Open(log, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			defer syscall.Close(fd)
		}
		t.Fatal("the probe blocked opening the FIFO")
	}
}

// The log is read as root where its writer (the gateway's user, owning
// its directory) may put anything at its name: read is only a regular file
// of its own reached through no link of that user's, and one whoever could
// have put it there could read anyway; nothing else is even opened (a
// device's open can act: opening /dev/watchdog arms it).
func TestLogReadOnlyWhereItsWriterCould(t *testing.T) {
	testutil.RequireRoot(t, "the log's owners are other users")
	const user = 65534
	base := t.TempDir()
	rootDir := filepath.Join(base, "root")
	os.Mkdir(rootDir, 0o755)
	write := func(path string, uid int, mode os.FileMode) string {
		if err := os.WriteFile(path, []byte("listening\n"+v8Line+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(path, mode)
		os.Lchown(path, uid, uid)
		return path
	}
	secret := write(filepath.Join(rootDir, "secret"), 0, 0o600)
	for _, tc := range []struct {
		name string
		// setup makes the log in dir, its user's, and returns the file
		// the log's name leads to.
		setup func(dir, log string) string
		want  string // "" reads V8's line; else the refusal says this
	}{
		{"its user's own log", func(dir, log string) string { return write(log, user, 0o600) }, ""},
		{"root's log anyone may read", func(dir, log string) string { return write(log, 0, 0o644) }, ""},
		{"a root-only file in a directory only root may write", func(dir, log string) string {
			os.Chown(dir, 0, 0)
			return write(log, 0, 0o600)
		}, ""},
		{"a root-only file", func(dir, log string) string { return write(log, 0, 0o600) }, "not read as root"},
		{"a symlink to a root-only file", func(dir, log string) string {
			os.Symlink(secret, log)
			os.Lchown(log, user, user)
			return secret
		}, "symbolic link, not followed"},
		{"a hard link to a root-only file", func(dir, log string) string {
			if err := os.Link(secret, log); err != nil {
				t.Fatal(err)
			}
			return secret
		}, "2 names"},
		{"a device", func(dir, log string) string {
			if err := syscall.Mknod(log, syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil { // /dev/null's
				t.Fatal(err)
			}
			return log
		}, "not a regular file"},
		{"a FIFO", func(dir, log string) string {
			if err := syscall.Mkfifo(log, 0o666); err != nil {
				t.Fatal(err)
			}
			return log
		}, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(base, strings.ReplaceAll(tc.name, " ", "-"))
			os.Mkdir(dir, 0o755)
			os.Chown(dir, user, user)
			log := filepath.Join(dir, "gw.log")
			real := tc.setup(dir, log)
			opened := watchOpens(t, real)
			line, err := ProcessTarget{Log: log}.heapLine(&TargetMemory{}, false)
			if tc.want == "" {
				if err != nil || line != v8Line {
					t.Fatalf("heapLine = %q, %v; want V8's line", line, err)
				}
				return
			}
			if !errors.Is(err, errLogRefused) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), log) {
				t.Errorf("heapLine = %q, %v; want a refusal naming %s and saying %q", line, err, log, tc.want)
			}
			if opened() {
				t.Errorf("%s was opened", real)
			}
		})
	}
	// The directory's path is walked as well: a link on it that its user
	// owns, or in a directory its user may write, is not followed.
	t.Run("a link on the way", func(t *testing.T) {
		for _, uid := range []int{user, 0} {
			dir := filepath.Join(base, "links-"+strconv.Itoa(uid))
			os.Mkdir(dir, 0o755)
			os.Chown(dir, user, user)
			via := filepath.Join(dir, "logs")
			os.Symlink(rootDir, via)
			os.Lchown(via, uid, uid)
			opened := watchOpens(t, secret)
			line, err := ProcessTarget{Log: filepath.Join(via, "secret")}.heapLine(&TargetMemory{}, false)
			if !errors.Is(err, errLogRefused) || !strings.Contains(err.Error(), via) {
				t.Errorf("a link owned by uid %d: heapLine = %q, %v; want a refusal naming the link", uid, line, err)
			}
			if opened() {
				t.Errorf("a link owned by uid %d: %s was opened", uid, secret)
			}
		}
	})
	// A directory only root may write is root's choice only when its user
	// may write none above it either: else that user may rename another
	// of root's directories, one that is root's alone, into its place.
	t.Run("a directory of root's renamed in by its user", func(t *testing.T) {
		home := filepath.Join(base, "home")
		os.Mkdir(home, 0o755)
		os.Chown(home, user, user)
		logs, secrets := filepath.Join(home, "logs"), filepath.Join(home, "secrets")
		os.Mkdir(logs, 0o755)
		os.Mkdir(secrets, 0o700)
		write(filepath.Join(logs, "gw.log"), 0, 0o600)
		write(filepath.Join(secrets, "gw.log"), 0, 0o600)
		// What its user may do: renames within home, theirs.
		if err := os.Rename(logs, filepath.Join(home, "old")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(secrets, logs); err != nil {
			t.Fatal(err)
		}
		opened := watchOpens(t, filepath.Join(logs, "gw.log")) // secret's, now
		line, err := ProcessTarget{Log: filepath.Join(logs, "gw.log")}.heapLine(&TargetMemory{}, false)
		if !errors.Is(err, errLogRefused) || !strings.Contains(err.Error(), "not read as root") {
			t.Errorf("heapLine = %q, %v; want it refused, not read as root", line, err)
		}
		if opened() {
			t.Errorf("%s was opened", filepath.Join(secrets, "gw.log"))
		}
	})
}

// A log whose owner holds a lease on it is not waited for (the kernel
// would hold the open until the lease is broken, 45s by default, past a
// restart's --settle): the open fails at once, and the round is blind, as
// for a log that cannot be read now, not one refused for good.
func TestLogLeasedByItsOwnerIsNotWaitedFor(t *testing.T) {
	log := filepath.Join(t.TempDir(), "gw.log")
	if err := os.WriteFile(log, []byte(v8Line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	holder, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	// The break's SIGIO comes to this process: Go's runtime ignores it.
	_, err = unix.FcntlInt(holder.Fd(), unix.F_SETLEASE, unix.F_WRLCK)
	testutil.RequireFeature(t, "a write lease (fcntl F_SETLEASE)", err)
	done := make(chan error, 1)
	go func() {
		f, _, err := openLog(log)
		if f != nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, errLogRefused) {
			t.Errorf("openLog = %v; want EWOULDBLOCK, not a refusal", err)
		}
	case <-time.After(time.Second):
		// Let it go: the lease given up, the open goes on.
		unix.FcntlInt(holder.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
		<-done
		t.Fatal("openLog waited for the lease to be broken")
	}
}

// watchOpens reports whether path is opened for reading or writing (an
// O_PATH open is neither) from now on.
func watchOpens(t *testing.T, path string) func() bool {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_OPEN|unix.IN_DONT_FOLLOW); err != nil {
		t.Fatal(err)
	}
	return func() bool {
		n, _ := unix.Read(fd, make([]byte, 4096))
		return n > 0
	}
}

// sleepGateway is a gateway of plain processes (sleep) with a pid file and
// a log, for the heap evidence's timing: restart starts another.
func sleepGateway(t *testing.T) (g *Gateway, pid func() int, appendLog func(string)) {
	t.Helper()
	dir := t.TempDir()
	pidFile, log := filepath.Join(dir, "gw.pid"), filepath.Join(dir, "gw.log")
	start := fmt.Sprintf("sleep 300 >> %s 2>&1 & echo $! > %s", log, pidFile)
	pid = func() int {
		raw, _ := os.ReadFile(pidFile)
		n, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
		return n
	}
	var started []int
	t.Cleanup(func() {
		for _, p := range started {
			syscall.Kill(p, syscall.SIGKILL)
		}
	})
	restart := CommandRestart{Command: start, PidFile: pidFile, Timeout: 10 * time.Second}
	if err := restart.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	started = append(started, pid())
	appendLog = func(line string) {
		f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(line + "\n")
		f.Close()
	}
	appendLog("listening")
	g = &Gateway{Target: ProcessTarget{Command: restart, Log: log}, Heap: Steps{Start: 256, Max: 1024}}
	if f := g.Probe(context.Background()); f.Kind != "" {
		t.Fatalf("baseline: %+v", f)
	}
	t.Cleanup(func() { syscall.Kill(pid(), syscall.SIGKILL) })
	return g, pid, appendLog
}

// A log the rules refuse (its user may make it so at will: a second name)
// is no heap evidence, not blindness: a gateway gone by its pid file is a
// crash, restarted with the heap it had (V8's line there cannot be
// believed), the line saying the log was not read and why; one running is
// healthy.
func TestGatewayWithARefusedLog(t *testing.T) {
	testutil.RequireRoot(t, "the log's directory is another user's")
	const user = 65534
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		refuse func(log string) // makes the log one the rules refuse
		why    string
	}{
		{"root's group-writable directory, its user's private log", func(log string) {
			os.Chown(filepath.Dir(log), 0, user)
			os.Chmod(filepath.Dir(log), 0o775)
			os.Chown(log, user, user)
			os.Chmod(log, 0o640)
		}, "not read as root"},
		{"a second name", func(log string) {
			if err := os.Link(log, log+".2"); err != nil {
				t.Fatal(err)
			}
		}, "2 names"},
		{"a FIFO", func(log string) {
			os.Remove(log)
			if err := syscall.Mkfifo(log, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, pid, appendLog := sleepGateway(t)
			appendLog(v8Line) // not believed: the log is refused below
			tc.refuse(g.Target.(ProcessTarget).Log)
			if f := g.Probe(ctx); f.Kind != "" {
				t.Errorf("running: %+v; want healthy", f)
			}
			old := pid()
			syscall.Kill(old, syscall.SIGKILL)
			testutil.WaitFor(t, "the gateway to end", func() bool { return gone(old) })
			f := g.Probe(ctx)
			if f.Kind != KindGatewayCrash || !strings.Contains(f.Detail, "its log was not read") || !strings.Contains(f.Detail, tc.why) {
				t.Fatalf("gone: %+v; want %s, saying the log was not read (%s)", f, KindGatewayCrash, tc.why)
			}
			if g.change != (Change{}) {
				t.Errorf("change = %+v; want it restarted as it was", g.change)
			}
			if err := g.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			if f := g.Probe(ctx); f.Kind != "" || pid() == old {
				t.Errorf("after the restart (pid %d, was %d): %+v; want it healthy", pid(), old, f)
			}
		})
	}
}

const v8Line = "FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory"

// V8's line read while the gateway still runs (it was dying: the line,
// then the stack, then the abort) is believed at the next look that finds
// it gone; the watchdog's own restart is no sign of an exit, so a line a
// gateway it started prints while it runs is not believed.
func TestHeapLineTimes(t *testing.T) {
	ctx := context.Background()
	t.Run("dying", func(t *testing.T) {
		g, pid, appendLog := sleepGateway(t)
		appendLog(v8Line)
		if f := g.Probe(ctx); f.Kind != "" {
			t.Fatalf("while it still runs: %+v; want nothing yet", f)
		}
		old := pid()
		syscall.Kill(old, syscall.SIGKILL)
		testutil.WaitFor(t, "the gateway to end", func() bool { return gone(old) })
		if f := g.Probe(ctx); f.Kind != KindGatewayHeapOOM {
			t.Fatalf("once it ended: %+v; want %s from the line read before", f, KindGatewayHeapOOM)
		}
	})
	t.Run("after the watchdog's own restart", func(t *testing.T) {
		g, pid, appendLog := sleepGateway(t)
		old := pid()
		syscall.Kill(old, syscall.SIGKILL)
		testutil.WaitFor(t, "the gateway to end", func() bool { return gone(old) })
		if f := g.Probe(ctx); f.Kind != KindGatewayCrash {
			t.Fatalf("after the kill: %+v; want %s", f, KindGatewayCrash)
		}
		if err := g.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		appendLog(v8Line)
		for i := range 2 {
			if f := g.Probe(ctx); f.Kind != "" {
				t.Fatalf("look %d after its restart, the new gateway (pid %d) running: %+v; want nothing", i, pid(), f)
			}
		}
	})
}
