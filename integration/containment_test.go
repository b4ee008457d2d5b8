package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"golang.org/x/sys/unix"
)

// Nothing outlives its sandbox: on every way the launcher ends (the
// command exits and leaves background processes, or the launcher gets
// SIGTERM, SIGINT, SIGHUP or SIGKILL), every process the command started
// is gone and the sandbox's cgroups are removed, a fork bomb under
// --pids-max included.
func TestLaunchLeavesNothingBehind(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (PID namespace, cgroups)")
	for i, tc := range []struct {
		name   string
		signal syscall.Signal // 0: the command exits by itself
		script string         // SLEEP is sleep for a unique duration, to find survivors by
		flags  []string
		again  bool // the command ignores the signal: send it once more
	}{
		{"command exits, background left", 0, "SLEEP & (SLEEP &); echo ready; read go; exit 0", nil, false},
		{"fork bomb under pids-max", 0, "(for i in $(seq 120); do SLEEP & done) 2>/dev/null; echo ready; read go; exit 0", []string{"--pids-max", "50"}, false},
		{"SIGTERM", syscall.SIGTERM, "SLEEP & (SLEEP &); echo ready; SLEEP", nil, false},
		// sh defers SIGINT until its foreground job ends: the stop
		// timeout kills it.
		{"SIGINT", syscall.SIGINT, "SLEEP & echo ready; SLEEP", nil, false},
		{"SIGTERM ignored, then the stop timeout", syscall.SIGTERM, "trap '' TERM; SLEEP & echo ready; while :; do sleep 1; done", nil, false},
		{"SIGHUP", syscall.SIGHUP, "SLEEP & echo ready; SLEEP", []string{"--pids-max", "50"}, false},
		{"SIGKILL", syscall.SIGKILL, "SLEEP & (SLEEP &); echo ready; SLEEP", []string{"--pids-max", "50"}, false},
		{"SIGTERM ignored, then a second one", syscall.SIGTERM, "trap '' TERM; SLEEP & echo ready; while :; do sleep 1; done", []string{"--stop-timeout", "1h"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := fmt.Sprintf("%d.%d%02d", 4000+i, os.Getpid(), i)
			id := fmt.Sprintf("contain-%d-%d", os.Getpid(), i)
			args := append([]string{"launch", "--net", "none", "--sandbox-id", id, "--stop-timeout", "1s", "--log-level", "error"}, tc.flags...) // a later flag wins
			args = append(args, "--", "/bin/sh", "-c", strings.ReplaceAll(tc.script, "SLEEP", "sleep "+marker))
			cmd := exec.Command(airlockBin, args...)
			// Commands that exit by themselves wait for a line, so the
			// test sees their processes before they are left behind.
			in, _ := cmd.StdinPipe()
			startReady(t, cmd)
			if len(withArg(marker)) == 0 {
				t.Fatal("no sandboxed process found by its marker: the test would prove nothing")
			}
			in.Write([]byte("go\n"))
			if tc.signal != 0 {
				cmd.Process.Signal(tc.signal)
				if tc.again {
					// The command ignores the first: the launcher
					// waits for it, then kills on the second.
					time.Sleep(200 * time.Millisecond)
					if len(withArg(marker)) == 0 {
						t.Fatal("an ignored SIGTERM ended the sandbox anyway")
					}
					cmd.Process.Signal(tc.signal)
				}
			}
			cmd.Wait()
			groups := cgroupsOf(id)
			if tc.signal == syscall.SIGKILL {
				// The kernel kills the namespace and the reaper removes
				// the groups after the launcher is gone: wait for both.
				waitFor(t, 10*time.Second, func() bool { return len(withArg(marker)) == 0 && len(cgroupsOf(id)) == 0 })
				return
			}
			if left := withArg(marker); len(left) > 0 {
				t.Errorf("processes outlived the launcher: %v", left)
			}
			if len(groups) > 0 {
				t.Errorf("cgroups left behind: %v", groups)
			}
		})
	}
}

// A launcher with a proxy of its own that is SIGKILLed leaves no CA
// bundle directory behind either: the reaper that removes its groups
// removes that too.
func TestLaunchKilledLeavesNoCABundle(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (namespaces, cgroups)")
	dir := t.TempDir()
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("ca-killed-%d", os.Getpid())
	cmd := exec.Command(airlockBin, "launch", "--net", "proxy", "--preset", "strict", "--sandbox-id", id,
		"--ca-dir", filepath.Join(dir, "ca"), "--audit-log", filepath.Join(dir, "audit.jsonl"), "--log-level", "error",
		"--", "/bin/sh", "-c", "echo ready; exec sleep 60")
	cmd.Env = cleanEnv("TMPDIR=" + tmp)
	startReady(t, cmd)
	bundles := func() []string {
		m, _ := filepath.Glob(filepath.Join(tmp, "airlock-ca-*"))
		return m
	}
	if len(bundles()) != 1 {
		cmd.Process.Kill()
		t.Fatalf("CA bundle directories in the launcher's TMPDIR: %v, want one: the test would prove nothing", bundles())
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	waitFor(t, 10*time.Second, func() bool { return len(bundles()) == 0 && len(cgroupsOf(id)) == 0 },
		"the CA bundle's directory and the groups to be removed after the launcher's SIGKILL")
}

// The sandbox has its own /proc: it sees its own processes only, never the
// host's, nor the launcher's command line.
func TestLaunchSeesOnlyItsOwnProcesses(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (PID and mount namespaces)")
	marker := fmt.Sprintf("marker-%d", os.Getpid())
	out, err := exec.Command(airlockBin, "launch", "--net", "none", "--sandbox-id", marker, "--log-level", "error", "--",
		"/bin/sh", "-c", "echo pid=$$; ls /proc | grep -c '^[0-9]'; cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo; grep -E '^(Uid|CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/1/status").CombinedOutput()
	if err != nil {
		t.Fatalf("launch: %v\n%s", err, out)
	}
	lines := strings.SplitN(string(out), "\n", 4)
	if len(lines) < 4 {
		t.Fatalf("output %q", out)
	}
	if lines[0] == fmt.Sprintf("pid=%d", os.Getpid()) || lines[0] == "pid=1" {
		t.Errorf("%s: the command should be a child of the sandbox's init", lines[0])
	}
	// init, sh, ls, grep (cat may or may not have started): a handful,
	// where the host has hundreds.
	var n int
	fmt.Sscan(lines[1], &n)
	if n == 0 || n > 8 {
		t.Errorf("the sandbox sees %d processes: want only its own", n)
	}
	if strings.Contains(lines[2], marker) {
		t.Errorf("the sandbox read the launcher's command line: %s", lines[2])
	}
	if !strings.Contains(lines[2], "__airlock-sandbox-stage2 init") {
		t.Errorf("PID 1 of the sandbox is not airlock's init: %s", lines[2])
	}
	// The init gave up root once the command stage was started.
	for _, want := range []string{"Uid:\t998\t998\t998\t998", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(lines[3], want+"\n") {
			t.Errorf("the init's status lacks %q:\n%s", want, lines[3])
		}
	}
}

// An OOM kill says so, in the exit message and in --json-status.
func TestLaunchReportsOOMKill(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (memory cgroup)")
	// The system's python3 (CI installs it): one the sandbox's uid may
	// execute, unlike a per-user install under /root.
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		testutil.RequireTool(t, "/usr/bin/python3")
	}
	status := filepath.Join(t.TempDir(), "status.json")
	cmd := exec.Command(airlockBin, "launch", "--net", "none", "--memory-max", "40000000", "--json-status", status, "--log-level", "error",
		"--", python, "-c", "x = []\nwhile True: x.append(bytearray(1 << 20))")
	msg, err := cmd.CombinedOutput()
	if code := exitCode(err); code != 137 || !strings.Contains(string(msg), "OOM killer") {
		t.Fatalf("exit %d, %s; want 137 and the OOM killer named", code, msg)
	}
	var st struct {
		ExitCode  int   `json:"exit_code"`
		OOMKilled bool  `json:"oom_killed"`
		OOMKills  int64 `json:"oom_kills"`
	}
	raw, _ := os.ReadFile(status)
	if err := json.Unmarshal(raw, &st); err != nil || !st.OOMKilled || st.OOMKills < 1 || st.ExitCode != 137 {
		t.Fatalf("json status %s (%v)", raw, err)
	}
	// A command that is killed by a plain SIGKILL is not an OOM kill.
	cmd = exec.Command(airlockBin, "launch", "--net", "none", "--memory-max", "40000000", "--json-status", status, "--log-level", "error",
		"--", "/bin/sh", "-c", "kill -KILL $$")
	msg, err = cmd.CombinedOutput()
	raw, _ = os.ReadFile(status)
	if code := exitCode(err); code != 137 || strings.Contains(string(msg), "OOM") || !strings.Contains(string(raw), `"oom_killed":false`) {
		t.Fatalf("plain SIGKILL: exit %d, %s, status %s", code, msg, raw)
	}
}

// startReady starts a launch whose sandboxed command says "ready" on its
// stdout first, and waits for that line.
func startReady(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	out, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		cmd.Process.Kill()
		t.Fatalf("the sandboxed command did not start: %q %s", line, stderr.String())
	}
}

// withArg lists the processes with arg in their command line.
func withArg(arg string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		raw, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(raw), arg) && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// cgroupsOf lists the groups of sandbox id, v2 and v1 alike.
func cgroupsOf(id string) []string {
	found, _ := filepath.Glob("/sys/fs/cgroup/*/airlock-" + id)
	if mnt, err := cgroup2.Mount(); err == nil && mnt == "/sys/fs/cgroup" { // a unified host
		if _, err := os.Stat(filepath.Join(mnt, "airlock-"+id)); err == nil {
			found = append(found, filepath.Join(mnt, "airlock-"+id))
		}
	}
	return found
}

// waitFor polls cond until it holds; what, when given, says what was
// awaited (a format and its arguments).
func waitFor(t *testing.T, d time.Duration, cond func() bool, what ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			if len(what) > 0 {
				t.Fatalf("not within %v: %s", d, fmt.Sprintf(what[0].(string), what[1:]...))
			}
			t.Fatalf("not within %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ^C in the terminal reaches the sandboxed command once (the terminal sends
// it to the whole foreground group: the launcher and the init pass on
// nothing of it), and the command that handles it keeps running: the
// launcher does not take it for an order to stop the sandbox.
func TestLaunchTerminalInterruptOnce(t *testing.T) {
	master, wait := launchOnPty(t, "--stop-timeout", "1s", "--", "/bin/sh", "-c",
		`trap "echo INT" INT; echo ready; i=0; while [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done; echo done`)
	master.Write([]byte{3}) // ^C
	got, err := wait("one ^C")
	if n := strings.Count(got, "INT"); n != 1 || exitCode(err) != 0 || !strings.Contains(got, "done") {
		t.Fatalf("one ^C: the command saw SIGINT %d times, launcher exit %d, output %q; want once, 0, and the command running to its end", n, exitCode(err), got)
	}
}

// launchOnPty starts airlock launch with args on a new terminal it leads
// (its session's leader, in the terminal's foreground: no shell's job
// control above it), and returns once the command has printed "ready".
// wait waits for the launch to end (30s at most; what says what was being
// waited for) and returns everything the terminal showed and its error.
func launchOnPty(t *testing.T, args ...string) (master *os.File, wait func(what string) (string, error)) {
	t.Helper()
	testutil.RequireRoot(t, "airlock launch (PID namespace)")
	master, slave := testutil.OpenPty(t)
	cmd := exec.Command(airlockBin, append([]string{"launch", "--net", "none", "--log-level", "error"}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var mu sync.Mutex
	var out strings.Builder
	shown := func() string {
		mu.Lock()
		defer mu.Unlock()
		return out.String()
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	waitFor(t, 20*time.Second, func() bool { return strings.Contains(shown(), "ready") }, "the sandboxed command's ready, the terminal shows %q", shown())
	return master, func(what string) (string, error) {
		t.Helper()
		select {
		case err := <-done:
			<-read
			return shown(), err
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("%s: the launch never ended; the terminal shows %q", what, shown())
			return "", nil
		}
	}
}

// ptyShell is an interactive bash with job control on a new terminal:
// master writes to it, await returns the terminal's output once it holds
// marker (20s at most).
func ptyShell(t *testing.T) (master *os.File, await func(marker string) string) {
	t.Helper()
	bash := testutil.RequireTool(t, "bash")
	master, slave := testutil.OpenPty(t)
	sh := exec.Command(bash, "--norc", "--noprofile", "-i")
	sh.Stdin, sh.Stdout, sh.Stderr = slave, slave, slave
	sh.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "TERM=dumb", "PS1=$ "}
	sh.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Process.Kill(); sh.Wait() })
	slave.Close()
	var mu sync.Mutex
	var out strings.Builder
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	shows := func() string {
		mu.Lock()
		defer mu.Unlock()
		return out.String()
	}
	return master, func(marker string) string {
		t.Helper()
		waitFor(t, 20*time.Second, func() bool { return strings.Contains(shows(), marker) }, "%q from the terminal, which shows %q", marker, shows())
		return shows()
	}
}

// typeLaunch types, at a ptyShell, a launch of script (sh -c, quoted for
// the shell), then after (" &", " | cat"). Markers in scripts are split
// (READY""MARK): the terminal's echo of the line is not taken for them.
func typeLaunch(master io.Writer, script, after string) {
	fmt.Fprintf(master, "%s launch --net none --log-level error -- /bin/sh -c '%s'%s\n", airlockBin, strings.ReplaceAll(script, "'", `'\''`), after)
}

// A launch begun in the background (`&`) leads a session of its own for
// the sandbox; brought to the foreground (`fg`), its ^C reaches the
// launcher's group only, and the launcher passes it on: the command sees
// it once. (Markers are split in what is typed, so that the terminal's
// echo of the line is not taken for them.)
func TestLaunchInterruptAfterFg(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (PID namespace)")
	master, waitFor := ptyShell(t)
	fmt.Fprintf(master, "%s launch --net none --stop-timeout 1s --log-level error -- /bin/sh -c 'trap \"echo GOT\"\"INT\" INT; echo READY\"\"MARK; i=0; while [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done' &\n", airlockBin)
	waitFor("READYMARK")
	io.WriteString(master, "fg\n")
	time.Sleep(500 * time.Millisecond) // bash gives the job the terminal
	master.Write([]byte{3})            // ^C
	io.WriteString(master, "echo EXIT\"\"CODE=$?\n")
	got := waitFor("EXITCODE=")
	if n := strings.Count(got, "GOTINT"); n != 1 {
		t.Fatalf("^C after fg: the command saw SIGINT %d times; want once. The terminal:\n%s", n, got)
	}
}

// A sandbox launched in the foreground gets a terminal of its own, relayed
// to the user's: its size is the user's terminal's, and after ^Z (the
// launch suspended, the user back at the shell) none of its processes
// reads what the user types next, not even one that left the terminal's
// job control (setsid) holding its standard input and ignoring the job
// control signals. After fg it runs on to its end. (Markers are split in
// what is typed.)
func TestLaunchForegroundTerminalIsItsOwn(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (PID namespace)")
	master, waitFor := ptyShell(t)
	if err := unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 31, Col: 101}); err != nil {
		t.Fatal(err)
	}
	script := `exec 3<&0; setsid /bin/sh -c 'trap "" TSTP TTIN TTOU; while read -r l <&3; do echo "STO""LE[$l]"; done' & echo "SIZE[$(stty size)]"; echo READY""MARK; sleep 2; echo END""MARK`
	typeLaunch(master, script, "")
	got := waitFor("READYMARK")
	if !strings.Contains(got, "SIZE[31 101]") {
		t.Errorf("the sandbox's terminal is not the user's size (31 101). The terminal:\n%s", got)
	}
	master.Write([]byte{0x1a}) // ^Z
	waitFor("Stopped")
	io.WriteString(master, "echo typed-by-the-user\n")
	got = waitFor("typed-by-the-user\r\ntyped-by-the-user")
	io.WriteString(master, "fg\n")
	got = waitFor("ENDMARK")
	if strings.Contains(got, "STOLE[") {
		t.Errorf("a process of the sandbox read what the user typed at the shell after ^Z. The terminal:\n%s", got)
	}
}

// After ^Z, bg resumes the sandbox in the background: its output still
// reaches the terminal, and the launch is not stopped again for reading it
// (it reads the terminal only in the foreground); fg gives it the
// terminal's input again. (Markers are split in what is typed.)
func TestLaunchSuspendedThenBackground(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (PID namespace)")
	master, waitFor := ptyShell(t)
	typeLaunch(master, `echo READY""MARK; sleep 1; echo BG""MARK; read line; echo "GOT[$line]"`, "")
	waitFor("READYMARK")
	master.Write([]byte{0x1a}) // ^Z
	waitFor("Stopped")
	io.WriteString(master, "bg\n")
	got := waitFor("BGMARK")
	if strings.Contains(got, "tty input") {
		t.Fatalf("after ^Z and bg the launch stopped for reading the terminal. The terminal:\n%s", got)
	}
	io.WriteString(master, "fg\n")
	time.Sleep(500 * time.Millisecond) // bash gives the job the terminal
	io.WriteString(master, "typed-after-fg\n")
	// The shell's prompt again: the launch has ended. Typed before it,
	// while the sandbox is on its way out, a line is the sandbox's, as
	// over ssh, and goes with it.
	waitFor("GOT[typed-after-fg]\r\n$ ")
	io.WriteString(master, "echo EXIT\"\"CODE=$?\n")
	if got = waitFor("EXITCODE="); !strings.Contains(got, "EXITCODE=0") {
		t.Fatalf("the launch did not end well after fg. The terminal:\n%s", got)
	}
}

// A launch's terminal passes the sandbox's queries to the user's terminal
// while it holds the foreground (the answers are the sandbox's), and not
// after ^Z and bg, when they would be the shell's input: typed as if by
// the user.
func TestLaunchInTheBackgroundAsksTheTerminalNothing(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (PID namespace)")
	master, waitFor := ptyShell(t)
	typeLaunch(master, `printf "\033[6nFG""MARK\n"; sleep 1; printf "\033[6nBG""MARK\n"`, "")
	if got := waitFor("FGMARK"); !strings.Contains(got, "\x1b[6nFGMARK") {
		t.Fatalf("in the foreground the sandbox's query did not reach the terminal. The terminal:\n%q", got)
	}
	master.Write([]byte{0x1a}) // ^Z
	waitFor("Stopped")
	io.WriteString(master, "bg\n")
	if got := waitFor("BGMARK"); strings.Contains(got, "\x1b[6nBGMARK") {
		t.Fatalf("after ^Z and bg the sandbox's query reached the terminal, whose answer is the shell's input. The terminal:\n%q", got)
	}
}

// A query the sandbox writes as it exits is answered by the terminal
// after the relay has stopped reading it: the launch reads the answer
// itself before it gives the terminal back, and none of it is left for
// the shell to read as typed. The terminal here answers the sandbox's
// cursor report only once the sandbox is gone (after the launch's own
// requests, or its exit), then the launch's, apart.
func TestLaunchExitLeavesNoAnswerToTheShell(t *testing.T) {
	pt := launchAsTerminal(t, "--", "/bin/sh", "-c", `printf "\033[6n"`)
	answered := make(chan struct{})
	var launch []query
	go func() {
		defer close(answered)
		sandbox := <-pt.asked
		select {
		case q := <-pt.asked: // the launch's own, as it ends
			launch = append(launch, q)
			for more := true; more; { // the rest of what it wrote at once
				select {
				case q := <-pt.asked:
					launch = append(launch, q)
				case <-time.After(50 * time.Millisecond):
					more = false
				}
			}
		case <-pt.exited:
		}
		time.Sleep(100 * time.Millisecond)
		io.WriteString(pt.master, sandbox.answer)
		for i := range launch {
			time.Sleep(10 * time.Millisecond) // a write of its own: read apart, or not
			io.WriteString(pt.master, launch[i].answer)
			launch[i].answered = time.Now()
		}
	}()
	pt.waitEnded(t)
	select {
	case <-answered:
	case <-time.After(5 * time.Second):
		t.Fatalf("the terminal was asked nothing; it shows %q", pt.shown())
	}
	pt.leftNothing(t, "an answer (to the sandbox's query, or to the launch's own as it ended)", pt.timing(launch))
}

// What a sandbox asks just before it exits is answered into the
// launch's drain, not the shell, over a slow link too:
//   - a cursor report of its own just before the query whose answer it
//     wants typed into the shell does not end the drain (over ssh its
//     report comes back alone, well before the rest, and looks like one
//     the launch asked for);
//   - a terminal that has answered during the session is waited for past
//     the drain's shortest bound, so neither the answer to the sandbox's
//     last query nor the launch's own reports reach the shell.
func TestLaunchExitDrainsSlowAnswers(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		delay        time.Duration
	}{
		{"its own report first", `printf '\033[6n'; sleep 0.06; printf '\033[c'`, 150 * time.Millisecond},
		{"a terminal that answered, slower than 300 ms", `printf '\033[6n'; sleep 1; printf '\033[c'`, 400 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pt := launchAsTerminal(t, "--", "/bin/sh", "-c", tc.script)
			answered := pt.answer(tc.delay)
			pt.waitEnded(t)
			var qs []query
			select {
			case qs = <-answered:
				if len(qs) < 3 {
					t.Fatalf("the terminal was asked %d things; want the sandbox's two, then the launch's. It shows %q", len(qs), pt.shown())
				}
				t.Log(pt.timing(qs))
			case <-time.After(10 * time.Second):
				t.Fatalf("the terminal's answers never ended; it shows %q", pt.shown())
			}
			pt.leftNothing(t, "an answer", pt.timing(qs))
		})
	}
}

// A sandbox that leaves a synchronized update on as it exits (kitty's
// mode 2026, during which the terminal holds all it reads, queries
// included, for up to 2 s) does not have the launch's request held with
// its query, and both answered into the shell once the launch has given
// up waiting: the request ends the update first.
func TestLaunchExitEndsASynchronizedUpdate(t *testing.T) {
	pt := launchAsTerminal(t, "--", "/bin/sh", "-c", `printf '\033[?2026h\033[c'`)
	answered := make(chan []query, 1)
	go func() { // at once, until well past the update's 2 s after the launch's end
		var qs []query
		exited, quiet := pt.exited, (<-chan time.Time)(nil)
		for {
			select {
			case q := <-pt.asked:
				io.WriteString(pt.master, q.answer)
				q.answered = time.Now()
				qs = append(qs, q)
			case <-exited:
				exited, quiet = nil, time.After(syncUpdateFor+500*time.Millisecond)
			case <-quiet:
				answered <- qs
				return
			}
		}
	}()
	pt.waitEnded(t)
	var qs []query
	select {
	case qs = <-answered:
		t.Log(pt.timing(qs))
	case <-time.After(10 * time.Second):
		t.Fatalf("the terminal's answers never ended; it shows %q", pt.shown())
	}
	pt.leftNothing(t, "answers held by a synchronized update", pt.timing(qs))
}

// Colours and text ask the terminal nothing, and the launch, ending after
// them, asks it nothing either: where nothing answers (script(1), a CI's
// pty) its request would show, and hold the end.
func TestLaunchExitAfterColoursAsksNothing(t *testing.T) {
	pt := launchAsTerminal(t, "--", "/bin/sh", "-c", `printf '\033[31mred\033[0m\n'`)
	pt.waitEnded(t)
	waitFor(t, 5*time.Second, func() bool { return strings.Contains(pt.shown(), "\x1b[31mred\x1b[0m") }, "the sandbox's colours, the terminal shows %q", pt.shown())
	time.Sleep(100 * time.Millisecond) // the reader's turn
	if len(pt.asked) > 0 || strings.Contains(pt.shown(), "\x1b[6n") {
		t.Errorf("after colours only the launch asked the terminal for a cursor report as it ended; it shows %q", pt.shown())
	}
	pt.sameModes(t)
}

// A terminal that answers no query (the launch's own at its exit
// included) holds the launch's end briefly at most, and gets its modes
// back.
func TestLaunchExitOnAnAnswerlessTerminal(t *testing.T) {
	pt := launchAsTerminal(t, "--", "/bin/sh", "-c", `printf "\033[6n"`)
	var asked time.Time
	select {
	case q := <-pt.asked:
		asked = q.at
	case <-time.After(20 * time.Second):
		t.Fatalf("the sandbox's query never reached the terminal, which shows %q", pt.shown())
	}
	pt.waitEnded(t)
	// The sandbox's teardown included, which takes a fraction of this.
	took := time.Since(asked)
	t.Logf("the launch ended %v after the sandbox's query", took)
	if took > time.Second {
		t.Errorf("the launch ended %v after the sandbox's last query to a terminal that answers none; want within a second", took)
	}
	pt.leftNothing(t, "what the terminal answered", "")
}

// ptyTerminal is a terminal whose emulator is the test (launchAsTerminal).
type ptyTerminal struct {
	master, slave *os.File
	modes         *unix.Termios // the terminal's, before the launch
	asked         chan query    // what the terminal was asked, in order
	exited        chan struct{} // closed when the launch has ended
	err           error         // the launch's, once exited
	ended         time.Time     // when, once exited
	shown         func() string // all the terminal showed so far
}

// query is a request the terminal read.
type query struct {
	at       time.Time // when
	answer   string    // what the terminal types in answer
	answered time.Time // when it did
}

// launchAsTerminal starts airlock launch with args on a new terminal it
// leads, in its foreground, as launchOnPty does; the test plays the
// terminal (the master) and, once the launch has ended, the shell that
// reads the terminal next (the slave, kept open).
func launchAsTerminal(t *testing.T, args ...string) *ptyTerminal {
	t.Helper()
	testutil.RequireRoot(t, "airlock launch (PID namespace)")
	master, slave := testutil.OpenPty(t)
	modes, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	size := unix.Winsize{Row: 30, Col: 100}
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &size); err != nil {
		t.Fatal(err)
	}
	pt := &ptyTerminal{master: master, slave: slave, modes: modes, asked: make(chan query, 64), exited: make(chan struct{})}
	cmd := exec.Command(airlockBin, append([]string{"launch", "--net", "none", "--log-level", "error"}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	var mu sync.Mutex
	var out strings.Builder
	pt.shown = func() string {
		mu.Lock()
		defer mu.Unlock()
		return out.String()
	}
	chunks := make(chan []byte, 64)
	go func() {
		defer close(chunks)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if n > 0 {
				chunks <- bytes.Clone(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		screen := vt{rows: int(size.Row), cols: int(size.Col), row: 1, col: 1}
		for {
			var p []byte
			var ok bool
			select {
			case p, ok = <-chunks:
				if !ok {
					return
				}
			case <-screen.heldUntil():
			}
			now := time.Now()
			screen.read(p, func(answer string) { pt.asked <- query{at: now, answer: answer} })
		}
	}()
	go func() {
		pt.err = cmd.Wait()
		pt.ended = time.Now()
		close(pt.exited)
	}()
	return pt
}

// answer answers what the terminal is asked rtt after it read it, in
// order, as a terminal over a link that slow does; once the launch has
// ended and nothing more comes, it sends them, answered.
func (pt *ptyTerminal) answer(rtt time.Duration) <-chan []query {
	answered := make(chan []query, 1)
	go func() {
		var qs []query
		for {
			var q query
			select {
			case q = <-pt.asked:
			case <-pt.exited:
				select {
				case q = <-pt.asked:
				case <-time.After(200 * time.Millisecond):
					answered <- qs
					return
				}
			}
			time.Sleep(time.Until(q.at.Add(rtt)))
			io.WriteString(pt.master, q.answer)
			q.answered = time.Now()
			qs = append(qs, q)
		}
	}()
	return answered
}

// timing tells when the launch ended against the last of qs, the
// launch's request: an answer past the drain's bound (300 ms after it, or
// 2 s if the terminal answered during the session) is the shell's,
// whatever the launch does.
func (pt *ptyTerminal) timing(qs []query) string {
	if len(qs) == 0 {
		return "the launch asked nothing as it ended"
	}
	q := qs[len(qs)-1]
	return fmt.Sprintf("the launch ended %v after the terminal read its last request, %v after it answered it", pt.ended.Sub(q.at), pt.ended.Sub(q.answered))
}

// vt is as much of a terminal as the queries need: where the cursor is
// (CUP, clamped to the screen as terminals do; DECSC, DECRC), and the
// answers to a cursor report's request and to primary device attributes'.
// Like kitty, it holds what it reads, queries included, unparsed while a
// synchronized update (mode 2026) is on, until it ends or for 2 s: a
// request that joins the held ones is answered only then.
type vt struct {
	rows, cols, row, col int
	saved                [2]int
	at                   byte // 0: in text; ESC: after ESC; '[': in a CSI
	csi                  []byte
	held                 []byte    // read during a synchronized update
	holding              time.Time // when it began; zero: none on
}

// syncUpdateFor is how long kitty holds a synchronized update unended.
const syncUpdateFor = 2 * time.Second

// heldUntil fires when a synchronized update left on is given up.
func (v *vt) heldUntil() <-chan time.Time {
	if v.holding.IsZero() {
		return nil
	}
	return time.After(time.Until(v.holding.Add(syncUpdateFor)))
}

func (v *vt) read(p []byte, asked func(answer string)) {
	if !v.holding.IsZero() {
		v.held = append(v.held, p...)
		end := bytes.Index(v.held, []byte("\x1b[?2026l"))
		if end < 0 && time.Since(v.holding) < syncUpdateFor {
			return
		}
		p, v.held, v.holding = v.held, nil, time.Time{}
	}
	for i, b := range p {
		if !v.holding.IsZero() { // the rest is held
			v.held = append(v.held, p[i:]...)
			return
		}
		switch {
		case v.at == 0x1b && b == '[':
			v.at, v.csi = '[', v.csi[:0]
		case v.at == 0x1b && b == '7':
			v.at, v.saved = 0, [2]int{v.row, v.col}
		case v.at == 0x1b && b == '8':
			v.at, v.row, v.col = 0, v.saved[0], v.saved[1]
		case v.at == '[' && b >= 0x20 && b <= 0x3f:
			v.csi = append(v.csi, b)
		case v.at == '[':
			v.at = 0
			params := string(v.csi)
			switch {
			case b == 'H':
				r, c, _ := strings.Cut(params, ";")
				v.row, v.col = clampTo(r, v.rows), clampTo(c, v.cols)
			case b == 'n' && params == "6":
				asked(fmt.Sprintf("\x1b[%d;%dR", v.row, v.col))
			case b == 'c' && (params == "" || params == "0"):
				asked("\x1b[?62;22c")
			case b == 'h' && params == "?2026":
				v.holding = time.Now()
			}
		case b == 0x1b:
			v.at = 0x1b
		default:
			v.at = 0
		}
	}
}

// clampTo is a CUP parameter as a terminal of n rows (or columns) takes it.
func clampTo(param string, n int) int {
	i, _ := strconv.Atoi(param)
	return min(max(i, 1), n)
}

// waitEnded waits for the launch to end (30s at most), which must succeed.
func (pt *ptyTerminal) waitEnded(t *testing.T) {
	t.Helper()
	select {
	case <-pt.exited:
		if pt.err != nil {
			t.Fatalf("launch: %v; the terminal shows %q", pt.err, pt.shown())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the launch never ended; the terminal shows %q", pt.shown())
	}
}

// leftNothing says whether the launch, ended, left the shell nothing to
// read from the terminal (what: what it would be) and the terminal's
// modes as they were.
func (pt *ptyTerminal) leftNothing(t *testing.T, what, timing string) {
	t.Helper()
	if left := pt.typeahead(t); left != "" {
		t.Errorf("once the launch ended the shell read %q from the terminal: %s typed into the shell's input. The terminal shows %q; %s", left, what, pt.shown(), timing)
	}
	pt.sameModes(t)
}

// typeahead is what the shell would read from the terminal now, the
// launch ended: all its input holds, a line or not.
func (pt *ptyTerminal) typeahead(t *testing.T) string {
	t.Helper()
	time.Sleep(50 * time.Millisecond) // what the terminal typed reaches the line discipline
	fd := int(pt.slave.Fd())
	now, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	// Not canonical, and echoing nothing, as a shell's line editor reads:
	// a part of a line is read too, within 0.2s.
	rd := *now
	rd.Lflag &^= unix.ICANON | unix.ECHO
	rd.Cc[unix.VMIN], rd.Cc[unix.VTIME] = 0, 2
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &rd); err != nil {
		t.Fatal(err)
	}
	defer unix.IoctlSetTermios(fd, unix.TCSETS, now)
	buf := make([]byte, 256)
	n, _ := unix.Read(fd, buf)
	return string(buf[:max(n, 0)])
}

// sameModes says whether the terminal has the modes it had before the
// launch.
func (pt *ptyTerminal) sameModes(t *testing.T) {
	t.Helper()
	now, err := unix.IoctlGetTermios(int(pt.slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if *now != *pt.modes {
		t.Errorf("the launch left the terminal's modes %+v; want them as they were, %+v", *now, *pt.modes)
	}
}

// ^Z suspends a launch whose sandbox reads none of what is typed (a busy
// full-screen program): the relay does not wait on the sandbox to read the
// keys before it, so it sees the ^Z behind them. (Markers are split in
// what is typed.)
func TestLaunchSuspendBehindUnreadKeys(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (PID namespace)")
	master, waitFor := ptyShell(t)
	// Raw, as a full-screen program's: the pty takes no more keys once
	// its buffers are full (a line discipline in canonical mode drops
	// them instead).
	typeLaunch(master, `stty raw -echo; echo READY""MARK; sleep 60`, "")
	waitFor("READYMARK")
	go func() {
		// Past what the pty holds (its line, its port's buffers): a
		// relay that waited on the sandbox to read would not even take
		// all of it.
		master.Write(bytes.Repeat([]byte("a"), 256<<10))
		master.Write([]byte{0x1a}) // ^Z
	}()
	waitFor("Stopped")
	io.WriteString(master, "kill -9 %1\n")
}

// Without a shell's job control above the launch (it leads its session,
// as under ssh -t or tmux), nothing would resume a suspended launch: ^Z
// is the sandbox's own then, a SIGTSTP from its terminal, and the sandbox
// runs on.
func TestLaunchSuspendWithoutJobControl(t *testing.T) {
	master, wait := launchOnPty(t, "--", "/bin/sh", "-c",
		`trap "echo GOT""TSTP" TSTP; echo ready; i=0; while [ $i -lt 20 ]; do sleep 0.1; i=$((i+1)); done; echo done`)
	master.Write([]byte{0x1a}) // ^Z
	got, err := wait("^Z without job control (the sandbox frozen for good?)")
	if exitCode(err) != 0 || !strings.Contains(got, "GOTTSTP") || !strings.Contains(got, "done") {
		t.Fatalf("^Z without job control: launcher exit %d, output %q; want the command's own SIGTSTP, and it running to its end", exitCode(err), got)
	}
}

// In a pipeline (its output read by another program, which may read the
// terminal too, as a pager does) a launch leaves the terminal alone: the
// sandbox gets none, and reads nothing from it. (Markers are split in
// what is typed.)
func TestLaunchInAPipelineHasNoTerminal(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (PID namespace)")
	master, waitFor := ptyShell(t)
	typeLaunch(master, `tty; read line; echo "READ[$line]"; echo END""MARK`, " | cat")
	got := waitFor("ENDMARK")
	if !strings.Contains(got, "not a tty") || !strings.Contains(got, "READ[]") {
		t.Fatalf("a launch in a pipeline gave the sandbox a terminal, or input from it; want neither. The terminal:\n%s", got)
	}
}

// The host's terminals are not in the sandbox's /dev/pts, not even one its
// uid owns (--user as the user whose terminal it is): the sandbox has a
// devpts of its own, and can read nothing typed into the user's.
func TestLaunchSeesNoHostTerminal(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (PID namespace)")
	master, slave := testutil.OpenPty(t)
	if err := slave.Chown(61000, 61000); err != nil {
		t.Fatal(err)
	}
	name := slave.Name()
	io.WriteString(master, "typed-at-the-host\n")
	out, err := exec.Command(airlockBin, "launch", "--net", "none", "--user", "61000:61000", "--log-level", "error", "--",
		"/bin/sh", "-c", "ls /dev/pts; timeout 1 cat "+name+"; echo END").CombinedOutput()
	if err != nil {
		t.Fatalf("launch: %v\n%s", err, out)
	}
	got := string(out)
	if strings.Contains(got, "typed-at-the-host") || strings.TrimSpace(strings.Split(got, "\n")[0]) != "ptmx" {
		t.Fatalf("the sandbox sees the host's terminals (%s was %s's); want a /dev/pts of its own, holding only ptmx:\n%s", name, "61000", got)
	}
}

// The sandbox's /dev holds the devices programs use, and the ptys it makes
// itself, at most 64 (the kernel's pool of them is every sandbox's and
// container's): not the host's others, not even one its uid owns (a
// virtual console of the user logged in there).
func TestLaunchSeesOnlyItsDevices(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (PID namespace)")
	// The system's python3, which the sandbox's uid may execute.
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s: %v (.ci/run installs it)", python, err)
	}
	dev := fmt.Sprintf("/dev/airlock-test-%d", os.Getpid())
	if err := unix.Mknod(dev, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dev) })
	if err := os.Chown(dev, 61000, 61000); err != nil {
		t.Fatal(err)
	}
	script := `test -e ` + dev + ` && echo HOST-DEVICE-VISIBLE
echo x > /dev/null && head -c 1 /dev/urandom >/dev/null && echo DEVICES-OK
` + python + ` -c '
import os
n = 0
try:
    while True:
        os.openpty()
        n += 1
except OSError:
    print("PTYS", n)
'`
	out, err := exec.Command(airlockBin, "launch", "--net", "none", "--user", "61000:61000", "--log-level", "error", "--", "/bin/sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("launch: %v\n%s", err, out)
	}
	got := string(out)
	if strings.Contains(got, "HOST-DEVICE-VISIBLE") || !strings.Contains(got, "DEVICES-OK") || !strings.Contains(got, "PTYS 64") {
		t.Fatalf("the sandbox's /dev: %q; want the host's device %s absent, /dev/null and /dev/urandom there, and 64 ptys at most", got, dev)
	}
}

// What the host has mounted under a path the sandbox is given (a chroot's
// /dev, /dev/pts, /proc and /run) shows no more than the sandbox's own
// /dev, /proc and hidden socket directories do: no device there opens (a
// terminal its uid owns, a disk), and the host's processes and sockets
// are not there.
func TestLaunchSeesNoHostViewsElsewhere(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (PID namespace)")
	// In /tmp, whatever TMPDIR says: a chroot there is kept in the
	// sandbox's own /tmp, given or started in.
	dir, err := os.MkdirTemp("/tmp", "airlock-chroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("readable\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A host daemon's socket, in /run, and a user's program's, in /tmp.
	sock := fmt.Sprintf("/run/airlock-test-%d.sock", os.Getpid())
	tmpSock := fmt.Sprintf("/tmp/airlock-test-%d.sock", os.Getpid())
	for _, s := range []string{sock, tmpSock} {
		ln, err := net.Listen("unix", s)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
	}
	mounts := []struct {
		name, source, fstype string
		flags                uintptr
	}{
		{"pts", "/dev/pts", "", unix.MS_BIND},
		{"dev", "devtmpfs", "devtmpfs", 0},
		{"proc", "proc", "proc", 0},
		{"run", "/run", "", unix.MS_BIND},
		{"tmp", "/tmp", "", unix.MS_BIND},
	}
	for _, m := range mounts {
		at := filepath.Join(dir, m.name)
		if err := os.Mkdir(at, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(m.source, at, m.fstype, m.flags, ""); err != nil {
			t.Fatalf("mount %s on %s: %v", m.source, at, err)
		}
		t.Cleanup(func() { unix.Unmount(at, unix.MNT_DETACH) })
	}
	// A terminal of the host's that the sandbox's uid owns.
	_, pts := testutil.OpenPty(t)
	if err := pts.Chown(61000, 61000); err != nil {
		t.Fatal(err)
	}
	there := []string{filepath.Join(dir, "proc/1/cmdline"), filepath.Join(dir, "run", filepath.Base(sock)),
		filepath.Join(dir, "tmp", filepath.Base(tmpSock))}
	opens := []string{filepath.Join(dir, "dev/zero"), filepath.Join(dir, "pts", filepath.Base(pts.Name()))}
	for _, p := range slices.Concat(there, opens) {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the host's view: %v", err)
		}
	}
	look := `for p in ` + strings.Join(there, " ") + `; do test -e $p && echo "VISIBLE $p"; done
for p in ` + strings.Join(opens, " ") + `; do (exec 3<$p) 2>/dev/null && echo "OPENED $p"; done
`
	script := look + `head -c 1 /dev/zero >/dev/null && cat ` + filepath.Join(dir, "file")
	out, err := exec.Command(airlockBin, "launch", "--net", "none", "--user", "61000:61000", "--ro", dir, "--log-level", "error", "--", "/bin/sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("launch: %v\n%s", err, out)
	}
	if got := string(out); strings.Contains(got, "VISIBLE") || strings.Contains(got, "OPENED") || !strings.Contains(got, "readable") {
		t.Fatalf("the sandbox, given %s to read: %q; want its own /dev/zero and its file read, none of %q there and none of %q opened", dir, got, there, opens)
	}
	// Nor when the sandbox starts there (in /tmp, kept as given paths are).
	cmd := exec.Command(airlockBin, "launch", "--net", "none", "--user", "61000:61000", "--log-level", "error", "--", "/bin/sh", "-c", look+"true")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil || strings.Contains(string(out), "VISIBLE") || strings.Contains(string(out), "OPENED") {
		t.Fatalf("the sandbox, started in %s: %v, %q; want none of %q there and none of %q opened", dir, err, out, there, opens)
	}
	// Named, such a path refuses the launch, saying why.
	for _, c := range []struct{ path, why string }{
		{filepath.Join(dir, "run"), "shows the host's sockets in /run"},
		// A path below a mount that is the host's /tmp.
		{filepath.Join(dir, "tmp", filepath.Base(dir)), "shows the host's sockets in /tmp"},
		{filepath.Join(dir, "dev/zero"), "a device outside /dev"},
	} {
		out, err := exec.Command(airlockBin, "launch", "--net", "none", "--user", "61000:61000", "--ro", c.path, "--log-level", "error", "--", "/bin/true").CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.why) {
			t.Errorf("launch --ro %s: %v, %q; want it refused: %s", c.path, err, out, c.why)
		}
	}
}

// A sandbox launched in the background gets no descriptor of the
// terminal: its output is copied there, but it cannot read what the user
// types next (even ignoring SIGTTIN, even after setsid), take the
// terminal over, nor open /dev/tty. (Markers are split in what is typed.)
func TestLaunchInBackgroundHasNoTerminal(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (PID namespace)")
	master, waitFor := ptyShell(t)
	typeLaunch(master, `trap "" TTIN TTOU; (exec 3</dev/tty) 2>/dev/null && echo HAS""TTY || echo NO""TTY; echo READY""MARK; read line; echo "READ[$line]"; sleep 1; echo END""MARK`, " &")
	waitFor("READYMARK")
	time.Sleep(300 * time.Millisecond)
	io.WriteString(master, "echo typed-by-the-user\n")
	got := waitFor("ENDMARK")
	if !strings.Contains(got, "NOTTY") || strings.Contains(got, "HASTTY") {
		t.Errorf("a background sandbox opened /dev/tty; want no controlling terminal. The terminal:\n%s", got)
	}
	if !strings.Contains(got, "READ[]") {
		t.Errorf("a background sandbox read from the terminal; want nothing to read. The terminal:\n%s", got)
	}
	if !strings.Contains(got, "typed-by-the-user\r\ntyped-by-the-user") {
		t.Errorf("the user's line did not reach the shell whole (echoed, then its output). The terminal:\n%s", got)
	}
}

// A POSIX message queue of the host's is not in the sandbox's
// /dev/mqueue, though /dev/mqueue is there: an mqueue mount shows the
// queues of the IPC namespace it was made in, and the host's, bound in,
// would list them and open any its uid may read.
func TestLaunchSeesNoHostMessageQueues(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (IPC namespace)")
	// The host's mqueue mount, where systemd makes it (this host may
	// have none).
	if _, err := os.Stat("/dev/mqueue"); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir("/dev/mqueue", 0o1777); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove("/dev/mqueue") })
		if err := unix.Mount("mqueue", "/dev/mqueue", "mqueue", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount("/dev/mqueue", unix.MNT_DETACH) })
	}
	name := fmt.Sprintf("airlock-test-%d", os.Getpid())
	path, err := unix.BytePtrFromString(name)
	if err != nil {
		t.Fatal(err)
	}
	fd, _, errno := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafe.Pointer(path)), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o644, 0, 0, 0)
	if errno != 0 {
		t.Fatalf("mq_open(%s): %v", name, errno)
	}
	unix.Close(int(fd))
	t.Cleanup(func() { unix.Syscall(unix.SYS_MQ_UNLINK, uintptr(unsafe.Pointer(path)), 0, 0) })
	if _, err := os.Stat("/dev/mqueue/" + name); err != nil {
		t.Fatalf("the host's queue: %v", err)
	}
	out, err := exec.Command(airlockBin, "launch", "--net", "none", "--log-level", "error", "--",
		"/bin/sh", "-c", "test -d /dev/mqueue && echo HAS-MQUEUE; ls -A /dev/mqueue").CombinedOutput()
	if err != nil {
		t.Fatalf("launch: %v\n%s", err, out)
	}
	if got := string(out); strings.Contains(got, name) || !strings.Contains(got, "HAS-MQUEUE") {
		t.Fatalf("the sandbox's /dev/mqueue: %q; want it there, without the host's queue %s", got, name)
	}
}

// The sandbox has its own IPC namespace: a System V message queue of the
// host's (or of another sandbox, all of which run as one uid by default)
// is not there to read or write, a channel past every other boundary.
func TestLaunchHasItsOwnIPC(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (IPC namespace)")
	ipcmk := testutil.RequireTool(t, "ipcmk")
	made, err := exec.Command(ipcmk, "-Q", "-p", "0666").Output()
	if err != nil {
		t.Fatal(err)
	}
	_, id, _ := strings.Cut(strings.TrimSpace(string(made)), ": ")
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("ipcmk said %q: no queue id", made)
	}
	ipcrm := testutil.RequireTool(t, "ipcrm")
	t.Cleanup(func() {
		if out, err := exec.Command(ipcrm, "-q", id).CombinedOutput(); err != nil {
			t.Errorf("remove the test's queue %s: %v %s", id, err, out)
		}
	})
	out, err := exec.Command(airlockBin, "launch", "--net", "none", "--log-level", "error", "--",
		"/bin/sh", "-c", "cat /proc/sysvipc/msg").CombinedOutput()
	if err != nil {
		t.Fatalf("launch: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 {
		t.Errorf("the sandbox sees message queues (the host made %s):\n%s", id, out)
	}
}

// A launch whose setup waits in the kernel for good (a path it was given
// on a FUSE mount whose server never answers) still stops as a launch
// does: at a second stop signal, or --stop-timeout after the first. It
// exits 125 saying why, writes so to --json-status, and leaves no process
// and no group behind.
func TestLaunchStopsAHungSetup(t *testing.T) {
	hung := testutil.HungFUSE(t)
	for i, tc := range []struct {
		name    string
		signals []syscall.Signal
		why     string
	}{
		{"a second SIGINT", []syscall.Signal{syscall.SIGINT, syscall.SIGINT}, "a second stop signal"},
		{"SIGTERM, then the stop timeout", []syscall.Signal{syscall.SIGTERM}, "not stopped within --stop-timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("hung-%d-%d", os.Getpid(), i)
			status := filepath.Join(t.TempDir(), "status.json")
			cmd := exec.Command(airlockBin, "launch", "--net", "none", "--sandbox-id", id, "--stop-timeout", "1s", "--json-status", status,
				"--ro", hung, "--", "/bin/true")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			waitFor(t, 20*time.Second, func() bool {
				select {
				case err := <-exited:
					t.Fatalf("airlock launch ended (%v) before it waited on the hung mount: %s", err, stderr.String())
				default:
				}
				return testutil.WaitsOnFUSE(cmd.Process.Pid)
			}, "a process of the launch waiting on the hung mount")
			for _, sig := range tc.signals {
				cmd.Process.Signal(sig)
				time.Sleep(100 * time.Millisecond)
			}
			select {
			case <-exited:
			case <-time.After(time.Minute):
				cmd.Process.Kill()
				t.Fatalf("airlock launch still setting up a minute after %v: %s", tc.signals, stderr.String())
			}
			if code := cmd.ProcessState.ExitCode(); code != 125 || !strings.Contains(stderr.String(), "setup stopped before the command ran: "+tc.why) {
				t.Errorf("a hung setup stopped: exit %d, %s; want 125, saying %q", code, stderr.String(), tc.why)
			}
			raw, _ := os.ReadFile(status)
			var st struct {
				Started  bool   `json:"started"`
				Error    string `json:"error"`
				ExitCode int    `json:"exit_code"`
			}
			if err := json.Unmarshal(raw, &st); err != nil || st.Started || st.ExitCode != 125 || !strings.Contains(st.Error, tc.why) {
				t.Errorf("--json-status of a stopped setup: %s (%v); want not started, 125, why", raw, err)
			}
			if left := cgroupsOf(id); len(left) > 0 {
				t.Errorf("cgroups left behind: %v", left)
			}
		})
	}
}
