package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/budget"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
)

// spawnEnv is an orchestrator home beside a pod test's bundle and
// upstream: kinds whose binary is testdata/subagent.py (python3 is the
// process the proxy sees), served by the preset egress_ok (python3 may GET
// api.test's /v1/**).
type spawnEnv struct {
	*podEnv
	home, agent, task string
}

func newSpawnEnv(t *testing.T) *spawnEnv {
	e := &spawnEnv{podEnv: newPodEnv(t)}
	e.home = filepath.Join(e.dir, "home")
	os.MkdirAll(filepath.Join(e.home, "kinds"), 0o755)
	e.agent = filepath.Join(e.dir, "subagent.py")
	raw, err := os.ReadFile("testdata/subagent.py")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(e.agent, raw, 0o755)
	e.task = filepath.Join(e.dir, "task.md")
	os.WriteFile(e.task, []byte("say hello"), 0o644)
	return e
}

// kind writes kinds/<name>.yaml running the sub-agent in mode with args.
func (e *spawnEnv) kind(t *testing.T, name, timeout string, tokens int, args ...string) {
	t.Helper()
	quoted := []string{`"{{.PromptFile}}"`}
	for _, a := range args {
		quoted = append(quoted, fmt.Sprintf("%q", a))
	}
	src := fmt.Sprintf(`name: %s
binary: {path: %s}
args: [%s]
preset: egress_ok
substrate: local
timeout: %s
tokens: %d
prompt: "task {{.ID}}: {{.Text}}"
`, name, e.agent, strings.Join(quoted, ", "), timeout, tokens)
	if err := os.WriteFile(filepath.Join(e.home, "kinds", name+".yaml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// pin pins kind name's binary (the sub-agent script) to its sha256: the
// sandbox checks it on the file it execs and runs that file.
func (e *spawnEnv) pin(t *testing.T, name string) {
	t.Helper()
	path := filepath.Join(e.home, "kinds", name+".yaml")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(e.agent)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	pinned := strings.Replace(string(src), "binary: {path: "+e.agent+"}", "binary: {path: "+e.agent+", sha256: "+hex.EncodeToString(sum[:])+"}", 1)
	if pinned == string(src) {
		t.Fatalf("%s has no binary line to pin:\n%s", path, src)
	}
	if err := os.WriteFile(path, []byte(pinned), 0o644); err != nil {
		t.Fatal(err)
	}
}

// spawn runs `airlock spawn` with the env's bundle and proxy settings.
func (e *spawnEnv) spawn(t *testing.T, daily int, args ...string) (int, string, string) {
	t.Helper()
	base := []string{"spawn", "--home", e.home, "--task-file", e.task, "--substrate", "local",
		"--daily-tokens", fmt.Sprint(daily), "--policy", e.bundle, "--log-level", "warn"}
	if !slices.Contains(args, "--pod-socket") { // the pod's proxy has its own
		base = append(base, "--upstream-ca", e.upstreamCA, "--ca-dir", filepath.Join(e.dir, "ca"),
			"--resolve", fmt.Sprintf("api.test:%d:127.0.0.2", e.tlsPort), "--allow-range", "127.0.0.2/32")
	}
	args = append(base, args...)
	cmd := exec.Command(airlockBin, args...)
	cmd.Env = cleanEnv()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return exitCode(err), stdout.String(), stderr.String()
}

func (e *spawnEnv) ledger(t *testing.T) ([]ledger.Entry, int) {
	t.Helper()
	entries, torn, err := ledger.Read(orchestrator.Home{Dir: e.home}.Ledger())
	if err != nil {
		t.Fatal(err)
	}
	return entries, torn
}

func statuses(entries []ledger.Entry, task string) []ledger.Status {
	var out []ledger.Status
	for _, en := range entries {
		if en.Task == task {
			out = append(out, en.Status)
		}
	}
	return out
}

// A local spawn runs the sub-agent (pinned: the sandbox checks the digest
// on the script it execs) in its sandbox: its allowed request
// reaches the upstream, its denied one is refused and audited in the
// task's own audit log as the kind's preset and binary; the ledger goes
// queued → running → done past a torn line a crash left; result.json holds
// the last line and its usage, which settles the budget; collect merges
// the result into the day's memory file once.
func TestSpawnLocal(t *testing.T) {
	e := newSpawnEnv(t)
	api := fmt.Sprintf("https://api.test:%d", e.tlsPort)
	e.kind(t, "fetcher", "2m", 100, "net", api+"/v1/hello", api+"/v2/secret")
	e.pin(t, "fetcher")
	h := orchestrator.Home{Dir: e.home}
	os.MkdirAll(filepath.Dir(h.Ledger()), 0o700)
	os.WriteFile(h.Ledger(), []byte(`{"ts":"2026-01-01T00:00:00Z","task":"torn`), 0o600)

	code, out, errs := e.spawn(t, 1000, "--kind", "fetcher")
	if code != 0 {
		t.Fatalf("airlock spawn = %d\n%s%s", code, out, errs)
	}
	var printed spawn.Result
	if err := json.Unmarshal([]byte(out), &printed); err != nil {
		t.Fatalf("spawn printed %q: %v", out, err)
	}
	id := printed.Task
	entries, torn := e.ledger(t)
	if got := statuses(entries, id); fmt.Sprint(got) != "[queued running done]" || torn != 1 {
		t.Fatalf("ledger of %s: %v (torn %d); want [queued running done], the torn line skipped", id, got, torn)
	}
	last := entries[len(entries)-1]
	if last.Exit == nil || *last.Exit != 0 || last.Usage == nil || last.Usage.Tokens != 42 || last.Kind != "fetcher" || last.Substrate != "local" {
		t.Errorf("done line %+v; want exit 0, 42 tokens, kind fetcher, substrate local", last)
	}

	dir := h.Subagent(id)
	checkFetched(t, dir, id, "local")
	for _, f := range []struct {
		name    string
		private bool // the operator's alone: no access for the sub-agent's uid
	}{{"prompt.txt", false}, {"task", false}, {"kind.yaml", false}, {"stdout.log", true}, {"stderr.log", true},
		{"audit.jsonl", true}, {"result.json", true}, {"work", false}} {
		fi, err := os.Stat(filepath.Join(dir, f.name))
		if err != nil {
			t.Errorf("the spawn dir lacks %s: %v", f.name, err)
		} else if private := fi.Mode().Perm()&0o077 == 0; private != f.private || fi.Mode().Perm()&0o007 != 0 {
			t.Errorf("%s is mode %v; want private %v, and nothing for other users", f.name, fi.Mode().Perm(), f.private)
		}
	}
	checkSecretDenied(t, filepath.Join(dir, "audit.jsonl"), "spawn-"+id, "fetcher", e.python)
	day, err := budget.Budget{Dir: h.Budget(), Daily: 1000}.Today()
	if err != nil || day.Spent != 42 || day.Reserved != 0 {
		t.Errorf("budget today %+v (%v); want 42 spent, nothing reserved", day, err)
	}

	for i, want := range []string{"1 result(s) added", "0 result(s) added"} {
		out, err := exec.Command(airlockBin, "collect", "--today", "--home", e.home).CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			t.Fatalf("collect #%d: %v %s; want %q", i+1, err, out, want)
		}
	}
	memory, _ := os.ReadFile(h.Memory(orchestrator.Today(time.Now())))
	if n := strings.Count(string(memory), "<!-- airlock-task: "+id+" -->"); n != 1 || !strings.Contains(string(memory), `"tokens":42`) {
		t.Errorf("memory file has %s's section %d times; want once, with its result:\n%s", id, n, memory)
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(raw)), "\n")
}

// A sub-agent past its kind's timeout is killed with its whole tree: exit
// 124, ledger and result timeout, and no process of it is left.
func TestSpawnTimeout(t *testing.T) {
	e := newSpawnEnv(t)
	marker := fmt.Sprintf("spawn-timeout-%d", time.Now().UnixNano())
	e.kind(t, "sleeper", "2s", 100, "sleep", marker)
	code, out, errs := e.spawn(t, 1000, "--kind", "sleeper")
	if code != spawn.ExitTimeout {
		t.Fatalf("airlock spawn = %d; want 124\n%s%s", code, out, errs)
	}
	var res spawn.Result
	json.Unmarshal([]byte(out), &res)
	entries, _ := e.ledger(t)
	if got := statuses(entries, res.Task); fmt.Sprint(got) != "[queued running timeout]" || res.Exit != 124 {
		t.Fatalf("ledger %v, result %+v; want a timeout with exit 124", got, res)
	}
	testutil.WaitFor(t, "no process of the timed-out sub-agent left", func() bool { return len(withArg(marker)) == 0 })
}

// Over budget nothing is launched: exit 77, no sub-agent directory, the
// task queued (its line names the spawn and the day, before anything is
// reserved) then refused in the ledger, an inbox event.
func TestSpawnOverBudget(t *testing.T) {
	e := newSpawnEnv(t)
	e.kind(t, "quick", "1m", 100, "quick")
	code, out, errs := e.spawn(t, 99, "--kind", "quick")
	if code != spawn.ExitOverBudget || !strings.Contains(errs, "daily token budget exhausted") {
		t.Fatalf("airlock spawn = %d; want 77 naming the budget\n%s%s", code, out, errs)
	}
	h := orchestrator.Home{Dir: e.home}
	if _, err := os.Stat(filepath.Dir(h.Subagent("x"))); !os.IsNotExist(err) {
		t.Errorf("subagents/ exists (%v): something was prepared", err)
	}
	entries, _ := e.ledger(t)
	if len(entries) != 2 || entries[0].Status != ledger.Queued || entries[1].Status != ledger.Refused {
		t.Errorf("ledger %+v; want the task queued, then refused", entries)
	}
	evs, err := events.Read(h.Inbox(), time.Time{})
	if err != nil || len(evs) != 1 || evs[0].Kind != "budget_exhausted" || evs[0].Source != "orchestrator" {
		t.Errorf("inbox %+v (%v); want one budget_exhausted event", evs, err)
	}
}

// The home's budget.yaml is the day's limit, out of the spawner's hands:
// --daily-tokens above it is a usage error (exit 2) before anything is
// reserved or written; without the flag the file's limit applies (the
// kind's 100 tokens over its 99: exit 77); with a lower flag, the flag's.
func TestSpawnHomeLimit(t *testing.T) {
	e := newSpawnEnv(t)
	e.kind(t, "quick", "1m", 100, "quick")
	h := orchestrator.Home{Dir: e.home}
	if err := os.WriteFile(h.BudgetLimit(), []byte("daily_tokens: 99\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := e.spawn(t, 1000000, "--kind", "quick")
	if code != spawn.ExitUsage || !strings.Contains(errs, "1000000 tokens asked, and "+h.BudgetLimit()+" sets 99") {
		t.Fatalf("airlock spawn --daily-tokens 1000000 = %d; want 2 naming the home's limit\n%s%s", code, out, errs)
	}
	if entries, _ := e.ledger(t); len(entries) != 0 {
		t.Errorf("ledger %+v after a usage error; want nothing", entries)
	}
	for _, tc := range []struct{ daily, limit int }{{0, 99}, {50, 50}} {
		code, out, errs = e.spawn(t, tc.daily, "--kind", "quick")
		if want := fmt.Sprintf("limit %d tokens", tc.limit); code != spawn.ExitOverBudget || !strings.Contains(errs, want) {
			t.Fatalf("airlock spawn --daily-tokens %d = %d; want 77 saying %q\n%s%s", tc.daily, code, want, out, errs)
		}
	}
}

// A day's budget file that cannot be believed refuses as an exhausted
// budget does (exit 77, the task refused, an event): a scheduler that stops
// for the day at 77 does not retry into it, and nothing is launched.
func TestSpawnUnusableBudget(t *testing.T) {
	e := newSpawnEnv(t)
	e.kind(t, "quick", "1m", 100, "quick")
	h := orchestrator.Home{Dir: e.home}
	if err := os.MkdirAll(h.Budget(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.Budget(), time.Now().UTC().Format(time.DateOnly)+".json"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := e.spawn(t, 1000, "--kind", "quick")
	if code != spawn.ExitOverBudget || !strings.Contains(errs, "unreadable, refusing") {
		t.Fatalf("airlock spawn = %d; want 77 naming the unreadable budget\n%s%s", code, out, errs)
	}
	entries, _ := e.ledger(t)
	if len(entries) != 2 || entries[0].Status != ledger.Queued || entries[1].Status != ledger.Refused {
		t.Errorf("ledger %+v; want the task queued, then refused", entries)
	}
	evs, err := events.Read(h.Inbox(), time.Time{})
	if err != nil || len(evs) != 1 || evs[0].Kind != "budget_unusable" {
		t.Errorf("inbox %+v (%v); want one budget_unusable event", evs, err)
	}
}

// Flags that cannot work are usage errors (exit 2) before anything is
// reserved or written: a git kind with no remote, a remote with no
// dispatcher, the proxy's own flags beside --pod-socket (its proxy is the
// pod's). A dry run of a git kind needs no remote.
func TestSpawnRefusesUnworkableFlags(t *testing.T) {
	e := newSpawnEnv(t)
	e.kind(t, "quick", "1m", 100, "quick")
	gitKind, err := os.ReadFile(filepath.Join(e.home, "kinds", "quick.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	gitKind = []byte(strings.Replace(strings.Replace(string(gitKind), "substrate: local", "substrate: git", 1), "name: quick", "name: remote", 1))
	if err := os.WriteFile(filepath.Join(e.home, "kinds", "remote.yaml"), gitKind, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a git kind, dry run", []string{"--kind", "remote", "--substrate", "git", "--dry-run"}, 0, "a dry run"},
		{"a git kind without a remote", []string{"--kind", "remote", "--substrate", "git"}, 2, "needs --git-remote"},
		{"a remote without a dispatcher", []string{"--kind", "remote", "--substrate", "git", "--git-remote", e.dir}, 2, "needs a dispatcher"},
		{"proxy flags beside --pod-socket", []string{"--kind", "quick", "--pod-socket", filepath.Join(e.dir, "none.sock"), "--resolve", "a.test:1:127.0.0.2"}, 2, "--resolve: with --pod-socket the pod decides"},
	} {
		code, out, errs := e.spawn(t, 1000, tc.args...)
		if code != tc.code || !strings.Contains(out+errs, tc.want) {
			t.Errorf("%s: airlock spawn = %d; want %d saying %q\n%s%s", tc.name, code, tc.code, tc.want, out, errs)
		}
	}
	if entries, _ := e.ledger(t); len(entries) != 0 {
		t.Errorf("ledger %+v; want nothing written", entries)
	}
}

// 20 spawns at once against a budget of 3 estimates: exactly 3 run, 17 are
// refused, and the day never holds more than the budget.
func TestSpawnConcurrentNeverOverspends(t *testing.T) {
	e := newSpawnEnv(t)
	e.kind(t, "quick", "1m", 100, "quick")
	codes, outs := make([]int, 20), make([]string, 20)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out, errs string
			codes[i], out, errs = e.spawn(t, 300, "--kind", "quick")
			outs[i] = out + errs
		}()
	}
	wg.Wait()
	n := map[int]int{}
	for i, c := range codes {
		n[c]++
		if c != 0 && c != spawn.ExitOverBudget {
			t.Errorf("spawn #%d = %d:\n%s", i, c, outs[i])
		}
	}
	if n[0] != 3 || n[spawn.ExitOverBudget] != 17 {
		t.Fatalf("exit codes %v; want 3 × 0 and 17 × 77", n)
	}
	h := orchestrator.Home{Dir: e.home}
	day, err := budget.Budget{Dir: h.Budget(), Daily: 300}.Today()
	if err != nil || day.Spent != 300 || day.Reserved != 0 {
		t.Errorf("budget today %+v (%v); want 300 spent", day, err)
	}
	runs, _ := filepath.Glob(filepath.Join(filepath.Dir(h.Subagent("x")), "*"))
	if len(runs) != 3 {
		t.Errorf("%d sub-agent directories; want 3", len(runs))
	}
}

// --dry-run prints what the kind's preset allows, all of it and nothing
// else (the whole output is compared: a line too many is reach the preset
// does not give), and spawns nothing.
func TestSpawnDryRun(t *testing.T) {
	e := newSpawnEnv(t)
	e.kind(t, "quick", "1m", 100, "quick")
	code, out, errs := e.spawn(t, 1000, "--kind", "quick", "--dry-run")
	if code != 0 {
		t.Fatalf("airlock spawn --dry-run = %d\n%s%s", code, out, errs)
	}
	hash, err := exec.Command(airlockBin, "policy", "hash", e.bundle).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`kind quick on the local substrate: a dry run, nothing spawned
preset egress_ok (policy %s)
allows:
  api
    binaries: %s (unpinned)
    hosts:    api.test
    ports:    %d
    methods:  GET
    paths:    /v1/**
    tls:      inspected (every request decided)
`, strings.TrimSpace(string(hash)), e.python, e.tlsPort)
	if out != want {
		t.Errorf("dry run printed:\n%s\nwant:\n%s", out, want)
	}
	if _, err := os.Stat(orchestrator.Home{Dir: e.home}.Ledger()); !os.IsNotExist(err) {
		t.Errorf("a dry run wrote the ledger (%v)", err)
	}
}

// A bundle that is not the pinned one is exit 10 before anything else:
// no budget, no ledger, no directory.
func TestSpawnRefusesAnotherBundle(t *testing.T) {
	e := newSpawnEnv(t)
	e.kind(t, "quick", "1m", 100, "quick")
	code, out, errs := e.spawn(t, 1000, "--kind", "quick", "--policy-sha256", "sha256:"+strings.Repeat("0", 64))
	if code != 10 {
		t.Fatalf("airlock spawn with another pin = %d; want 10\n%s%s", code, out, errs)
	}
	for _, p := range []string{"queue", "budget", "subagents"} {
		if _, err := os.Stat(filepath.Join(e.home, p)); !os.IsNotExist(err) {
			t.Errorf("%s exists (%v): the spawn went past the pin", p, err)
		}
	}
}

// A sub-agent that exits 0 but whose last line is not a JSON object
// failed: exit 1, ledger and result failed quoting the line, the budget
// settled at the estimate, a spawn_failed event.
func TestSpawnUnusableResult(t *testing.T) {
	e := newSpawnEnv(t)
	e.kind(t, "garbage", "1m", 100, "garbage")
	code, out, errs := e.spawn(t, 1000, "--kind", "garbage")
	var res spawn.Result
	json.Unmarshal([]byte(out), &res)
	if code != 1 || res.Status != ledger.Failed || res.Exit != 0 || !strings.Contains(res.Detail, `"not json"`) {
		t.Fatalf("airlock spawn = %d, result %+v; want 1, failed quoting the line\n%s", code, res, errs)
	}
	entries, _ := e.ledger(t)
	if got := statuses(entries, res.Task); fmt.Sprint(got) != "[queued running failed]" {
		t.Errorf("ledger %v", got)
	}
	h := orchestrator.Home{Dir: e.home}
	day, _ := budget.Budget{Dir: h.Budget(), Daily: 1000}.Today()
	evs, _ := events.Read(h.Inbox(), time.Time{})
	if day.Spent != 100 || len(evs) != 1 || evs[0].Kind != "spawn_failed" {
		t.Errorf("budget %+v, inbox %+v; want the estimate spent and one spawn_failed", day, evs)
	}
}

// start starts `airlock spawn` of kind in the background (a budget of
// 1000), its stdout to stdout; it is killed when the test ends.
func (e *spawnEnv) start(t *testing.T, kind string, stdout io.Writer) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(airlockBin, "spawn", "--home", e.home, "--task-file", e.task, "--kind", kind,
		"--daily-tokens", "1000", "--policy", e.bundle, "--ca-dir", filepath.Join(e.dir, "ca"), "--log-level", "warn")
	cmd.Env = cleanEnv()
	cmd.Stdout = stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A failure before the test's own stop must not leave it running.
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd
}

// A stopped `airlock spawn` (SIGTERM) takes its sub-agent and sandbox with
// it and records the task as failed, never leaving it running.
func TestSpawnStopped(t *testing.T) {
	e := newSpawnEnv(t)
	marker := fmt.Sprintf("spawn-stopped-%d", time.Now().UnixNano())
	e.kind(t, "sleeper", "10m", 100, "sleep", marker)
	var stdout strings.Builder
	cmd := e.start(t, "sleeper", &stdout)
	testutil.WaitFor(t, "the sub-agent's sleep", func() bool { return len(withArg(marker)) >= 2 })
	cmd.Process.Signal(syscall.SIGTERM)
	code := exitCode(cmd.Wait())
	var res spawn.Result
	json.Unmarshal([]byte(stdout.String()), &res)
	if code == 0 || code == spawn.ExitTimeout || res.Status != ledger.Failed || !strings.Contains(res.Detail, "stopped before it ended") {
		t.Fatalf("stopped spawn = %d, result %+v; want failed, stopped", code, res)
	}
	entries, _ := e.ledger(t)
	if got := statuses(entries, res.Task); fmt.Sprint(got) != "[queued running failed]" {
		t.Errorf("ledger %v", got)
	}
	testutil.WaitFor(t, "no process of the stopped sub-agent left", func() bool { return len(withArg(marker)) == 0 })
}

// The sandbox is launched in the spawn's own process (no second airlock
// process compiling the bundle again: the sandbox's init is the spawn's
// child), and dies with it: a SIGKILLed spawn leaves no process of its
// sub-agent and no cgroup of its sandbox.
func TestSpawnKilledTakesItsSandbox(t *testing.T) {
	e := newSpawnEnv(t)
	marker := fmt.Sprintf("spawn-killed-%d", time.Now().UnixNano())
	e.kind(t, "sleeper", "10m", 100, "sleep", marker)
	cmd := e.start(t, "sleeper", nil)
	testutil.WaitFor(t, "the sub-agent and its child", func() bool { return len(withArg(marker)) >= 2 })
	between := 0
	for pid := withArg(marker)[0]; pid != cmd.Process.Pid; pid = parentOf(t, pid) {
		if pid <= 1 {
			t.Fatalf("the sub-agent is not a descendant of airlock spawn (%d)", cmd.Process.Pid)
		}
		if argv := cmdline(pid); len(argv) > 1 && argv[1] == "launch" {
			t.Errorf("process %d between the sub-agent and airlock spawn is %q: a second airlock launches it", pid, argv)
		}
		between++
	}
	if between > 3 { // the sub-agent's child, the sub-agent, the sandbox's init
		t.Errorf("%d processes from the sub-agent up to airlock spawn; want the sandbox's init alone between", between)
	}
	runs, _ := filepath.Glob(filepath.Join(e.home, "subagents", "*"))
	if len(runs) != 1 {
		t.Fatalf("%d sub-agent directories; want 1", len(runs))
	}
	id := "spawn-" + filepath.Base(runs[0])
	if len(cgroupsOf(id)) == 0 {
		t.Fatalf("no cgroup airlock-%s while it runs", id)
	}
	cmd.Process.Kill()
	cmd.Wait()
	testutil.WaitFor(t, "no process of the killed spawn's sub-agent left", func() bool { return len(withArg(marker)) == 0 })
	testutil.WaitFor(t, "no cgroup of the killed spawn's sandbox left", func() bool { return len(cgroupsOf(id)) == 0 })
}

// A SIGKILLed spawn cannot record its task's end: spawn poll leaves the
// task alone while its spawner lives, then, once it is gone, ends it failed
// with exit 1 and "spawner gone" in the ledger, result.json and the inbox,
// settles its reservation at the estimate, and never settles it twice.
func TestSpawnKilledIsReconciled(t *testing.T) {
	e := newSpawnEnv(t)
	marker := fmt.Sprintf("spawn-reconciled-%d", time.Now().UnixNano())
	e.kind(t, "sleeper", "10m", 100, "sleep", marker)
	cmd := e.start(t, "sleeper", nil)
	testutil.WaitFor(t, "the sub-agent's sleep", func() bool { return len(withArg(marker)) >= 2 })
	poll := func() string {
		t.Helper()
		out, err := exec.Command(airlockBin, "spawn", "poll", "--home", e.home).CombinedOutput()
		if err != nil {
			t.Fatalf("spawn poll: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := poll(); out != "" {
		t.Fatalf("spawn poll while the spawn runs printed %q; want nothing settled", out)
	}
	entries, _ := e.ledger(t)
	id := entries[0].Task
	cmd.Process.Kill()
	cmd.Wait()

	out := poll()
	if !strings.HasPrefix(out, id+"\tfailed\texit 1\tspawner gone: airlock spawn (pid "+fmt.Sprint(cmd.Process.Pid)+")") {
		t.Fatalf("spawn poll after the kill printed %q; want %s failed, exit 1, spawner gone", out, id)
	}
	entries, _ = e.ledger(t)
	last := entries[len(entries)-1]
	if got := statuses(entries, id); fmt.Sprint(got) != "[queued running failed]" || last.Exit == nil || *last.Exit != 1 ||
		!strings.HasPrefix(last.Detail, "spawner gone") {
		t.Fatalf("ledger %v, last line %+v; want failed, exit 1, spawner gone", got, last)
	}
	h := orchestrator.Home{Dir: e.home}
	if res, err := spawn.ReadResult(h.Subagent(id)); err != nil || res.Status != ledger.Failed || res.Exit != 1 {
		t.Errorf("result.json %+v (%v); want failed, exit 1", res, err)
	}
	day, err := budget.Budget{Dir: h.Budget(), Daily: 1000}.Today()
	if err != nil || day.Spent != 100 || day.Reserved != 0 {
		t.Errorf("budget today %+v (%v); want the estimate of 100 spent, nothing reserved", day, err)
	}
	evs, _ := events.Read(h.Inbox(), time.Time{})
	if len(evs) != 1 || evs[0].Kind != "spawn_failed" || !strings.Contains(evs[0].Detail, "spawner gone") {
		t.Errorf("inbox %+v; want one spawn_failed naming the spawner gone", evs)
	}
	if out := poll(); out != "" {
		t.Errorf("a second spawn poll printed %q; want nothing settled twice", out)
	}
}

// parentOf is pid's parent (PPid in /proc/PID/status).
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "PPid:"); ok {
			var ppid int
			fmt.Sscan(v, &ppid)
			return ppid
		}
	}
	t.Fatalf("/proc/%d/status has no PPid", pid)
	return 0
}

func cmdline(pid int) []string {
	raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
}

// A sandbox whose command cannot be run (its interpreter is missing) is
// exit 1, the task failed with the setup step named, and nothing of the
// sandbox left behind.
func TestSpawnSetupFailure(t *testing.T) {
	e := newSpawnEnv(t)
	e.agent = filepath.Join(e.dir, "broken.sh")
	os.WriteFile(e.agent, []byte("#!/nonexistent/interpreter\n"), 0o755)
	e.kind(t, "broken", "1m", 100)
	code, out, errs := e.spawn(t, 1000, "--kind", "broken")
	if code != 1 || !strings.Contains(errs, `setup step "exec" failed`) {
		t.Fatalf("airlock spawn = %d; want 1 naming the failed step\n%s%s", code, out, errs)
	}
	entries, _ := e.ledger(t)
	last := entries[len(entries)-1]
	if got := statuses(entries, last.Task); fmt.Sprint(got) != "[queued running failed]" || !strings.Contains(last.Detail, `setup step "exec" failed`) {
		t.Errorf("ledger %v, last line %+v; want failed naming the step", got, last)
	}
	if left := cgroupsOf("spawn-" + last.Task); len(left) != 0 {
		t.Errorf("the failed sandbox's cgroups are left: %v", left)
	}
}

// checkSecretDenied checks that the audit log at path holds sandbox's
// denial of /v2/secret (path_not_allowed), decided by the kind's preset
// (egress_ok) for binary. Other sandboxes' lines (a pod's log) are not
// looked at.
// checkFetched checks the result.json of a done "fetcher" spawn (the
// sub-agent in net mode): its prompt, its allowed and denied requests, the
// usage it reported and its substrate.
func checkFetched(t *testing.T, dir, id, substrate string) spawn.Result {
	t.Helper()
	res, err := spawn.ReadResult(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Prompt  string
		Allowed struct{ Status int }
		Denied  struct {
			Status int
			Body   string
		}
	}
	json.Unmarshal(res.Result, &got)
	if res.Status != ledger.Done || res.Substrate != substrate || res.Usage == nil || res.Usage.Tokens != 42 || got.Prompt != "task "+id+": say hello" ||
		got.Allowed.Status != 200 || got.Denied.Status != 403 || !strings.Contains(got.Denied.Body, "path_not_allowed") {
		t.Fatalf("result.json %+v, result %+v", res, got)
	}
	return res
}

// kind is what the line must call the sandbox: the sub-agent's kind.
func checkSecretDenied(t *testing.T, path, sandbox, kind, binary string) {
	t.Helper()
	denied := false
	for _, l := range readLines(t, path) {
		var a struct {
			auditLine
			Sandbox, Preset, Kind string
		}
		json.Unmarshal([]byte(l), &a)
		if a.Sandbox != sandbox || a.Reason != "path_not_allowed" || a.Path != "/v2/secret" {
			continue
		}
		if a.Preset != "egress_ok" || a.Kind != kind || a.Binary != binary {
			t.Errorf("%s: the denial is attributed to %+v, want preset egress_ok, kind %s, binary %s", path, a, kind, binary)
			continue
		}
		denied = true
	}
	if !denied {
		t.Errorf("%s has no denial of /v2/secret by sandbox %s", path, sandbox)
	}
}
