package gitsub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
)

// testPin stands for the verified bundle's hash: without airlock on the
// runner nothing checks it, but a manifest must carry one.
const testPin = "sha256:0000000000000000000000000000000000000000000000000000000000000000"

// runnerScript is the shipped runner, run for real by the test dispatcher.
func runnerScript(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"jq", "timeout", "sha256sum"} {
		testutil.RequireTool(t, tool)
	}
	p, err := filepath.Abs("../runner/airlock-spawn-runner.sh")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runnerDispatch runs the runner script as the dispatch command, with no
// airlock on its PATH, the plain mode allowed (the sandboxed one is
// integration/spawn_git_test.go's).
func runnerDispatch(t *testing.T) Command {
	return Command{Line: "PATH=/usr/bin:/bin AIRLOCK_RUNNER_ALLOW_UNSANDBOXED=1 exec /bin/sh " + runnerScript(t)}
}

// agent writes a sub-agent script (body after #!/bin/sh) and returns a
// spawn's files running it.
func agent(t *testing.T, id, body string) *Files {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Files{
		Manifest: Manifest{ID: id, Kind: "reviewer", Binary: bin, Args: []string{Dir(id) + "/prompt.txt", "two words"},
			Env: map[string]string{"AGENT_MODE": "it's test"}, Preset: "reviewer", TimeoutSeconds: 60, Tokens: 500, PolicySHA256: testPin},
		Prompt: []byte("review this\n"), Task: []byte("the task\n"), KindYAML: []byte("name: reviewer\n"),
	}
}

func TestSpawnSync(t *testing.T) {
	ctx := context.Background()
	s := &Substrate{Remote: Remote{URL: testutil.GitRemote(t)}, Dispatcher: runnerDispatch(t), PollEvery: 50 * time.Millisecond}
	// The agent sees its arguments, environment and prompt as the kind
	// said, in the checkout of its branch.
	f := agent(t, "t-sync", `echo "working on $(cat "$1")" >&2
printf '{"args":"%s|%s","mode":"%s","usage":{"tokens":42}}\n' "$1" "$2" "$AGENT_MODE"`)
	dir := filepath.Join(t.TempDir(), "subagents", "t-sync")
	started := time.Now()
	pushed, err := s.Start(ctx, dir, f)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Wait(ctx, dir, &f.Manifest, pushed, started)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != ledger.Done || r.Exit != 0 || r.Usage == nil || r.Usage.Tokens != 42 || r.Substrate != "git" {
		t.Fatalf("result = %+v, want done, exit 0, 42 tokens", r)
	}
	var got map[string]any
	if err := json.Unmarshal(r.Result, &got); err != nil {
		t.Fatal(err)
	}
	if got["args"] != "spawns/t-sync/prompt.txt|two words" || got["mode"] != "it's test" {
		t.Errorf("the agent saw %v", got)
	}
	// Without airlock on the runner, the result says the policy was lost.
	if !strings.Contains(r.Detail, "WITHOUT its preset's egress policy (reviewer)") {
		t.Errorf("detail = %q, want the loud warning", r.Detail)
	}
	for name, want := range map[string]string{"stderr.log": "working on review this", "manifest.json": `"policy_sha256"`} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s = %q, %v; want it to contain %q", name, b, err, want)
		}
	}
	var local spawn.Result
	if b, err := os.ReadFile(filepath.Join(dir, "result.json")); err != nil || json.Unmarshal(b, &local) != nil || local.Status != ledger.Done {
		t.Errorf("local result.json = %s, %v", b, err)
	}
}

func TestRunnerOutcomes(t *testing.T) {
	s := &Substrate{Remote: Remote{URL: testutil.GitRemote(t)}, Dispatcher: runnerDispatch(t), PollEvery: 50 * time.Millisecond}
	for _, tc := range []struct {
		name, body string
		edit       func(*Manifest)
		status     ledger.Status
		exit       int
		detail     string
	}{
		{"exit code", `echo '{"partial":true}'; echo broke >&2; exit 3`, nil, "failed", 3, "exited 3: broke"},
		{"no JSON last line", `echo '{"a":1}'; echo done`, nil, "failed", 0, "not a JSON object"},
		{"two JSON values", `echo '{"a":1} {"b":2}'`, nil, "failed", 0, "not a JSON object"},
		{"timeout", `sleep 30`, func(m *Manifest) { m.TimeoutSeconds = 1 }, "timeout", 124, "timed out after 1 s"},
		{"binary pin", `echo '{}'`, func(m *Manifest) { m.SHA256 = hex.EncodeToString(make([]byte, sha256.Size)) }, "failed", 1, "does not have the pinned sha256"},
		{"missing binary", `echo '{}'`, func(m *Manifest) { m.Binary = "/nonexistent/agent" }, "failed", 1, "not an executable file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "t-" + strings.ReplaceAll(tc.name, " ", "-")
			f := agent(t, id, tc.body)
			if tc.edit != nil {
				tc.edit(&f.Manifest)
			}
			r := spawnAndWait(t, s, f)
			if r.Status != tc.status || r.Exit != tc.exit || !strings.Contains(r.Detail, tc.detail) {
				t.Errorf("result = %s exit %d %q; want %s exit %d with %q", r.Status, r.Exit, r.Detail, tc.status, tc.exit, tc.detail)
			}
		})
	}
}

// spawnAndWait starts the spawn of f and waits for its result.
func spawnAndWait(t *testing.T, s *Substrate, f *Files) spawn.Result {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), f.Manifest.ID)
	pushed, err := s.Start(ctx, dir, f)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Wait(ctx, dir, &f.Manifest, pushed, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Without airlock on the runner, the sub-agent does not run unless the
// runner says it may run plainly: the task fails saying why.
func TestRunnerRefusesUnsandboxed(t *testing.T) {
	s := &Substrate{Remote: Remote{URL: testutil.GitRemote(t)}, Dispatcher: Command{Line: "PATH=/usr/bin:/bin exec /bin/sh " + runnerScript(t)}, PollEvery: 50 * time.Millisecond}
	ran := filepath.Join(t.TempDir(), "ran")
	r := spawnAndWait(t, s, agent(t, "t-plain", "touch "+ran+"; echo '{}'"))
	if r.Status != ledger.Failed || !strings.Contains(r.Detail, "refusing to run the sub-agent without a sandbox") {
		t.Errorf("result = %s %q; want failed, refusing to run without a sandbox", r.Status, r.Detail)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("the sub-agent ran")
	}
}

// Hooks a sub-agent run plainly plants in the checkout do not run when the
// runner commits and pushes its result, with the remote's credentials in
// their environment.
func TestRunnerRunsNoHookOfTheCheckout(t *testing.T) {
	s := &Substrate{Remote: Remote{URL: testutil.GitRemote(t)}, Dispatcher: runnerDispatch(t), PollEvery: 50 * time.Millisecond}
	ran := filepath.Join(t.TempDir(), "hooks-ran")
	r := spawnAndWait(t, s, agent(t, "t-hooks", `for h in pre-commit commit-msg post-commit pre-push; do
printf '#!/bin/sh\necho %s >>`+ran+`\n' $h >.git/hooks/$h; chmod +x .git/hooks/$h
done
echo '{}'`))
	if r.Status != ledger.Done {
		t.Fatalf("result = %s %q; want done", r.Status, r.Detail)
	}
	if b, err := os.ReadFile(ran); err == nil {
		t.Errorf("the checkout's hooks ran: %q", b)
	}
}

// A runner that never commits: the wait ends at the kind's timeout plus the
// grace, with a failed result and exit 124, written locally.
func TestWaitGivesUp(t *testing.T) {
	ctx := context.Background()
	s := &Substrate{Remote: Remote{URL: testutil.GitRemote(t)}, Dispatcher: Command{Line: "true"}, PollEvery: 20 * time.Millisecond, Grace: time.Second}
	f := agent(t, "t-lost", `echo '{}'`)
	f.Manifest.TimeoutSeconds = 1
	dir := t.TempDir()
	started := time.Now().Add(-time.Hour) // long past the deadline
	pushed, err := s.Start(ctx, dir, f)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Wait(ctx, dir, &f.Manifest, pushed, started)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != ledger.Failed || r.Exit != 124 || !strings.Contains(r.Detail, "did not commit a result to spawn/t-lost within 2 s") {
		t.Errorf("result = %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "result.json")); err != nil || !strings.Contains(string(b), `"exit_code":124`) {
		t.Errorf("local result.json = %s, %v", b, err)
	}
}

// A result.json the runner's branch carries for another task is not
// trusted.
func TestParseResultRefuses(t *testing.T) {
	for _, raw := range []string{`nope`, `{"task":"other","status":"done"}`, `{"task":"t-1","status":"fine"}`, `{"task":"t-1","status":"done","exit_code":2}`,
		"{\"task\":\"t-1\",\"status\":\"done\",\"result\":{\"x\":\"a\x9b2J\"}}", `{"task":"t-1","status":"done","result":"text"}`,
		`{"task":"t-1","status":"done","result":null}`, `{"task":"t-1","status":"done","usage":{"tokens":-500}}`,
		`{"task":"t-1","status":"done","result":{"a":` + strings.Repeat("[", spawn.MaxNesting) + strings.Repeat("]", spawn.MaxNesting) + `}}`} {
		r := parseResult("t-1", "reviewer", []byte(raw))
		if r.Status != ledger.Failed || !strings.Contains(r.Detail, "unusable") {
			t.Errorf("parseResult(%s) = %+v, want failed as unusable", raw, r)
		}
	}
}

// The runner checks a manifest itself (one not pushed by Start): a timeout
// of 0, which timeout(1) reads as none, or a manifest for another task, is
// refused with a failed result.
func TestRunnerRefusesManifest(t *testing.T) {
	ctx := context.Background()
	rm := Remote{URL: testutil.GitRemote(t)}
	for id, manifest := range map[string]string{
		"t-zero":  `{"id":"t-zero","kind":"k","binary":"/bin/true","preset":"p","timeout_seconds":0,"policy_sha256":"x"}`,
		"t-other": `{"id":"t-else","kind":"k","binary":"/bin/true","preset":"p","timeout_seconds":5,"policy_sha256":"x"}`,
	} {
		if _, err := rm.Push(ctx, id, map[string][]byte{"manifest.json": []byte(manifest)}); err != nil {
			t.Fatal(err)
		}
		if err := runnerDispatch(t).Dispatch(ctx, Dispatch{ID: id, Branch: Branch(id), Remote: rm.URL}); err != nil {
			t.Fatal(err)
		}
		f, err := rm.Fetch(ctx, id, "result.json")
		if err != nil {
			t.Fatal(err)
		}
		r := parseResult(id, "k", f.Files["result.json"])
		if r.Status != ledger.Failed || !strings.Contains(r.Detail, "manifest.json") {
			t.Errorf("%s: result %+v, want failed naming manifest.json", id, r)
		}
	}
}
