package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/budget"
	"github.com/airlock-sandbox/airlock/orchestrator/gitsub"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
)

// gitEnv is a spawn env whose git substrate's remote is a bare repository
// in a temp dir.
type gitEnv struct {
	*spawnEnv
	remote string
}

func newGitEnv(t *testing.T) *gitEnv {
	for _, tool := range []string{"jq", "timeout", "sha256sum"} {
		testutil.RequireTool(t, tool)
	}
	return &gitEnv{spawnEnv: newSpawnEnv(t), remote: testutil.GitRemote(t)}
}

// runner is a dispatch command that runs the shipped runner script on this
// host, as a CI runner would: with sandboxed, under the airlock binary
// under test with the env's bundle and proxy settings (what an operator
// gives a runner); else with no airlock on its PATH, the plain mode
// allowed.
func (e *gitEnv) runner(t *testing.T, sandboxed bool) string {
	t.Helper()
	script, err := filepath.Abs("../orchestrator/runner/airlock-spawn-runner.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !sandboxed {
		return "PATH=/usr/bin:/bin AIRLOCK_RUNNER_ALLOW_UNSANDBOXED=1 exec /bin/sh " + script
	}
	launch := fmt.Sprintf("--upstream-ca %s --ca-dir %s --resolve api.test:%d:127.0.0.2 --allow-range 127.0.0.2/32 --log-level warn",
		e.upstreamCA, filepath.Join(e.dir, "ca"), e.tlsPort)
	return fmt.Sprintf("AIRLOCK_RUNNER_AIRLOCK=%s AIRLOCK_POLICY=%s AIRLOCK_RUNNER_LAUNCH_ARGS='%s' exec /bin/sh %s",
		airlockBin, e.bundle, launch, script)
}

// airlock runs the binary with env added to a clean environment.
func (e *gitEnv) airlock(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(airlockBin, args...)
	cmd.Env = cleanEnv(env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return exitCode(err), stdout.String(), stderr.String()
}

// spawnGit runs `airlock spawn` on the git substrate.
func (e *gitEnv) spawnGit(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	return e.airlock(t, env, append([]string{"spawn", "--home", e.home, "--task-file", e.task, "--substrate", "git",
		"--daily-tokens", "1000", "--policy", e.bundle, "--git-remote", e.remote, "--poll-every", "100ms", "--log-level", "warn"}, args...)...)
}

// spawnScript spawns, on the git substrate with a sandboxed runner, a kind
// named name whose sub-agent is script, given one argument (a template:
// {{.Dir}}, {{.PromptFile}}); the spawn must succeed.
func (e *gitEnv) spawnScript(t *testing.T, name, arg, script string) spawn.Result {
	t.Helper()
	agent := filepath.Join(e.dir, name+".sh")
	os.WriteFile(agent, []byte(script), 0o755)
	os.WriteFile(filepath.Join(e.home, "kinds", name+".yaml"), []byte(fmt.Sprintf(`name: %s
binary: {path: %s}
args: [%q]
preset: egress_ok
substrate: git
timeout: 2m
tokens: 10
prompt: "{{.Text}}"
`, name, agent, arg)), 0o644)
	code, out, errs := e.spawnGit(t, nil, "--kind", name, "--dispatch-cmd", e.runner(t, true))
	var res spawn.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 {
		t.Fatalf("spawn = %d %q %s", code, out, errs)
	}
	return res
}

// A sync git spawn whose runner has airlock: the sub-agent runs in a
// sandbox on the runner decided by the kind's preset of the very bundle
// the spawn verified (its pin travels in manifest.json), so its allowed
// request passes and its denied one is refused and audited, on the branch
// and, once copied back, in the task's directory. The ledger goes queued →
// running → done and the budget is settled at the usage reported.
func TestSpawnGitSync(t *testing.T) {
	e := newGitEnv(t)
	api := fmt.Sprintf("https://api.test:%d", e.tlsPort)
	e.kind(t, "fetcher", "2m", 100, "net", api+"/v1/hello", api+"/v2/secret")
	code, out, errs := e.spawnGit(t, nil, "--kind", "fetcher", "--dispatch-cmd", e.runner(t, true))
	if code != 0 {
		t.Fatalf("airlock spawn --substrate git = %d\n%s%s", code, out, errs)
	}
	var printed spawn.Result
	if err := json.Unmarshal([]byte(out), &printed); err != nil {
		t.Fatalf("spawn printed %q: %v", out, err)
	}
	id := printed.Task
	h := orchestrator.Home{Dir: e.home}
	entries, _ := e.ledger(t)
	if got := statuses(entries, id); fmt.Sprint(got) != "[queued running done]" {
		t.Fatalf("ledger of %s: %v; want [queued running done]", id, got)
	}
	res := checkFetched(t, h.Subagent(id), id, "git")
	if strings.Contains(res.Detail, "WARNING") {
		t.Errorf("a sandboxed run warns: %q", res.Detail)
	}
	checkSecretDenied(t, filepath.Join(h.Subagent(id), "audit.jsonl"), "spawn-"+id, "fetcher", e.python)
	// The branch is the job record: the result is on it too.
	if onBranch := testutil.Git(t, "", "--git-dir", e.remote, "show", gitsub.Branch(id)+":spawns/"+id+"/result.json"); !strings.Contains(onBranch, `"status": "done"`) {
		t.Errorf("result.json on %s: %s", gitsub.Branch(id), onBranch)
	}
	day, err := budget.Budget{Dir: h.Budget(), Daily: 1000}.Today()
	if err != nil || day.Spent != 42 || day.Reserved != 0 {
		t.Errorf("budget today %+v (%v); want 42 spent, nothing reserved", day, err)
	}
}

// On the runner the sandboxed sub-agent writes only spawns/<id>/work (its
// .Dir): the files the runner commits as its record (logs, audit lines,
// result) are beyond its reach.
func TestSpawnGitSubagentWritesOnlyWork(t *testing.T) {
	e := newGitEnv(t)
	res := e.spawnScript(t, "writer", "{{.Dir}}", `#!/bin/sh
if rm -f "$1/../stdout.log" && echo forged > "$1/../stdout.log"; then tamper=allowed; else tamper=denied; fi
if echo out > "$1/out.txt"; then work=ok; else work=failed; fi
echo "{\"tamper\":\"$tamper\",\"work\":\"$work\"}"
`)
	var got struct{ Tamper, Work string }
	json.Unmarshal(res.Result, &got)
	if got.Tamper != "denied" || got.Work != "ok" {
		t.Errorf("the sub-agent's writes: %+v; want replacing its stdout.log denied, its work dir ok", got)
	}
	if onBranch := testutil.Git(t, "", "--git-dir", e.remote, "show", gitsub.Branch(res.Task)+":spawns/"+res.Task+"/work/out.txt"); onBranch != "out" {
		t.Errorf("work/out.txt on the branch: %q", onBranch)
	}
}

// A runner whose airlock serves another bundle than the one the spawn
// verified (here its embedded presets) refuses to run the sub-agent: the
// pin in manifest.json is enforced there (its launcher exits 10, which
// result.json and the ledger keep), never widened to what the runner
// happens to have. The spawn exits 1: a remote exit code of 10 cannot be
// told from a sub-agent's own, which must not pass for airlock's integrity
// refusal.
func TestSpawnGitRunnerOtherBundle(t *testing.T) {
	e := newGitEnv(t)
	e.kind(t, "quick", "2m", 100, "quick")
	other := strings.Replace(e.runner(t, true), "AIRLOCK_POLICY="+e.bundle+" ", "", 1)
	code, out, errs := e.spawnGit(t, nil, "--kind", "quick", "--dispatch-cmd", other)
	if code != 1 {
		t.Fatalf("spawn with a runner on another bundle = %d %q %s; want 1", code, out, errs)
	}
	var res spawn.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Status != ledger.Failed || res.Exit != 10 {
		t.Errorf("result %+v (%v); want failed, exit 10", res, err)
	}
	if stderr, err := os.ReadFile(filepath.Join(orchestrator.Home{Dir: e.home}.Subagent(res.Task), "stderr.log")); err != nil || !strings.Contains(string(stderr), "does not match pinned") {
		t.Errorf("the runner's stderr.log = %q, %v; want the pin refused", stderr, err)
	}
}

// An async git spawn returns its task id at once, running; `spawn poll`
// copies the runner's result back, ends it in the ledger and settles the
// budget at the estimate (the sub-agent reported no usage); the result
// says loudly that this runner had no airlock. `spawn gc` then deletes its
// branch once past retention and reports a branch no ledger line knows.
func TestSpawnGitAsyncPollGC(t *testing.T) {
	e := newGitEnv(t)
	e.kind(t, "quick", "2m", 100, "quick")
	dayBefore := orchestrator.Today(time.Now())
	code, out, errs := e.spawnGit(t, nil, "--kind", "quick", "--async", "--dispatch-cmd", e.runner(t, false))
	if code != 0 {
		t.Fatalf("airlock spawn --async = %d\n%s%s", code, out, errs)
	}
	id := strings.TrimSpace(out)
	entries, _ := e.ledger(t)
	if got := statuses(entries, id); fmt.Sprint(got) != "[queued running]" {
		t.Fatalf("ledger of %s after --async: %v; want [queued running]", id, got)
	}
	// The manifest records the day the estimate is reserved on: poll
	// settles there, even after midnight.
	var m gitsub.Manifest
	if b, err := os.ReadFile(filepath.Join(orchestrator.Home{Dir: e.home}.Subagent(id), "manifest.json")); err != nil || json.Unmarshal(b, &m) != nil ||
		(m.ReservedDay != dayBefore && m.ReservedDay != orchestrator.Today(time.Now())) {
		t.Errorf("manifest.json's reserved_day = %q (%v), want the day of the spawn", m.ReservedDay, err)
	}
	poll := []string{"spawn", "poll", "--home", e.home, "--git-remote", e.remote}
	code, out, errs = e.airlock(t, nil, poll...)
	if code != 0 || !strings.Contains(out, id+"\tdone\texit 0\tWARNING: airlock is not on this runner") || !strings.Contains(out, "1 result(s) added") {
		t.Fatalf("spawn poll = %d %q %s", code, out, errs)
	}
	entries, _ = e.ledger(t)
	if got := statuses(entries, id); fmt.Sprint(got) != "[queued running done]" {
		t.Errorf("ledger of %s after poll: %v", id, got)
	}
	h := orchestrator.Home{Dir: e.home}
	res, err := spawn.ReadResult(h.Subagent(id))
	if err != nil || res.Status != ledger.Done || !strings.Contains(res.Detail, "WITHOUT its preset's egress policy (egress_ok)") {
		t.Errorf("result.json %+v, %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(h.Subagent(id), "stdout.log")); err != nil {
		t.Error(err)
	}
	day, err := budget.Budget{Dir: h.Budget(), Daily: 1000}.Today()
	if err != nil || day.Spent != 100 || day.Reserved != 0 {
		t.Errorf("budget today %+v (%v); want the estimate (100) spent, nothing reserved", day, err)
	}
	if memory, _ := os.ReadFile(h.Memory(orchestrator.Today(time.Now()))); !strings.Contains(string(memory), "<!-- airlock-task: "+id+" -->") {
		t.Errorf("poll did not collect %s into today's memory:\n%s", id, memory)
	}
	if code, out, _ = e.airlock(t, nil, poll...); code != 0 || out != "" {
		t.Errorf("a second poll = %d %q, want nothing to do", code, out)
	}

	stray := testutil.Git(t, "", "--git-dir", e.remote, "rev-parse", "main")
	testutil.Git(t, "", "--git-dir", e.remote, "update-ref", "refs/heads/spawn/stray", stray)
	code, out, errs = e.airlock(t, nil, "spawn", "gc", "--home", e.home, "--git-remote", e.remote, "--keep-done", "1ns")
	if code != 0 || !strings.Contains(out, "deleted\tspawn/"+id+"\n") || !strings.Contains(out, "drift\tspawn/stray") {
		t.Fatalf("spawn gc = %d %q %s", code, out, errs)
	}
	if refs := testutil.Git(t, "", "--git-dir", e.remote, "branch", "--list", "spawn/*"); strings.TrimSpace(refs) != "spawn/stray" {
		t.Errorf("spawn branches left: %q", refs)
	}
}

// A runner that never runs (the dispatcher starts nothing): once the kind's
// timeout and the grace have passed, poll fails the task with exit code 124
// and says the runner committed nothing; a sync spawn does the same itself.
func TestSpawnGitTimeout(t *testing.T) {
	e := newGitEnv(t)
	e.kind(t, "quick", "1s", 100, "quick")
	code, out, errs := e.spawnGit(t, nil, "--kind", "quick", "--git-grace", "1s", "--dispatch-cmd", "true")
	if code != spawn.ExitTimeout || !strings.Contains(errs, "did not commit a result") {
		t.Fatalf("sync spawn with no runner = %d %q %s; want 124", code, out, errs)
	}

	code, out, errs = e.spawnGit(t, nil, "--kind", "quick", "--async", "--dispatch-cmd", "true")
	if code != 0 {
		t.Fatalf("async spawn = %d %s", code, errs)
	}
	id := strings.TrimSpace(out)
	testutil.WaitFor(t, "spawn poll to give up on "+id, func() bool {
		_, out, _ := e.airlock(t, nil, "spawn", "poll", "--home", e.home, "--git-remote", e.remote, "--git-grace", "1s")
		return strings.Contains(out, id+"\tfailed\texit 124\tthe runner did not commit a result to spawn/"+id+" within 2 s")
	})
	entries, _ := e.ledger(t)
	if got := statuses(entries, id); fmt.Sprint(got) != "[queued running failed]" {
		t.Errorf("ledger of %s: %v", id, got)
	}
}

// A remote URL carrying a CI job's token: the runner clones and pushes with
// it, but the sandboxed sub-agent can read neither the checkout's .git (nor
// anything of the checkout outside spawns/<id>/) nor its environment's
// copy, so no secret reaches what it writes.
func TestSpawnGitRemoteSecret(t *testing.T) {
	const secret = "s3cr3t-t0ken"
	e := newGitEnv(t)
	e.remote, _ = testutil.GitHTTPRemote(t, "x-access-token", secret)
	res := e.spawnScript(t, "snoop", "{{.PromptFile}}", `#!/bin/sh
if cat .git/config; then git=read; else git=denied; fi
if cat README; then checkout=read; else checkout=denied; fi
if cat "$1" >/dev/null; then prompt=read; else prompt=denied; fi
env
echo "{\"git\":\"$git\",\"checkout\":\"$checkout\",\"prompt\":\"$prompt\"}"
`)
	var got struct{ Git, Checkout, Prompt string }
	json.Unmarshal(res.Result, &got)
	if got.Git != "denied" || got.Checkout != "denied" || got.Prompt != "read" {
		t.Errorf("the sub-agent's reads: %+v; want .git and the checkout denied, its prompt read", got)
	}
	dir := orchestrator.Home{Dir: e.home}.Subagent(res.Task)
	for _, name := range gitsub.Returned {
		if b, _ := os.ReadFile(filepath.Join(dir, name)); strings.Contains(string(b), secret) {
			t.Errorf("%s holds the remote's secret:\n%s", name, b)
		}
	}
}
