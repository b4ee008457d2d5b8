package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/gate"
	"github.com/airlock-sandbox/airlock/policies"
)

// gateRun runs `airlock gate` as its own process (the test binary is
// airlock: TestMain) and returns its exit code and stdout.
func gateRun(t *testing.T, home string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"gate", "--home", home}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	t.Logf("airlock gate %v: exit %d: %s%s", args, cmd.ProcessState.ExitCode(), out.String(), errb.String())
	return cmd.ProcessState.ExitCode(), out.String()
}

// The five outcomes through the command, with the embedded bundle: exit
// codes, the log line of each, the parked lines of drafts and blocks, the
// daily cap turning auto into budget, and the kill file halting an action
// the policy allows, with its inbox event.
func TestGateOutcomes(t *testing.T) {
	home := orchestrator.Home{Dir: t.TempDir()}
	steps := []struct {
		kill           bool
		action, target string
		want           policies.Outcome
		code           int
	}{
		{false, "send_mail", "ops@airlock.test", policies.OutcomeAuto, 0},
		{false, "send_mail", "x@example.test", policies.OutcomeDraft, 3},
		{false, "force_push", "o/r", policies.OutcomeBlock, 4},
		{false, "open_pr", "o/r#1", policies.OutcomeAuto, 0},
		{false, "open_pr", "o/r#2", policies.OutcomeAuto, 0},
		{false, "open_pr", "o/r#3", policies.OutcomeAuto, 0},
		{false, "open_pr", "o/r#4", policies.OutcomeAuto, 0},
		{false, "open_pr", "o/r#5", policies.OutcomeAuto, 0},
		{false, "open_pr", "o/r#6", policies.OutcomeBudget, 5}, // open_pr's cap is 5 a day
		{true, "comment_issue", "o/r#1", gate.Killed, 6},
	}
	for _, s := range steps {
		if s.kill {
			if err := os.WriteFile(home.KillFile(), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		code, out := gateRun(t, home.Dir, "--action", s.action, "--target", s.target)
		if code != s.code || !strings.HasPrefix(out, string(s.want)+": ") {
			t.Fatalf("gate %s %s = exit %d %q; want exit %d, %s", s.action, s.target, code, out, s.code, s.want)
		}
	}

	ds, torn, err := gate.ReadLog(home.ActionLog())
	if err != nil || torn != 0 || len(ds) != len(steps) {
		t.Fatalf("action log: %d decisions, %d torn, %v; want %d", len(ds), torn, err, len(steps))
	}
	hash := embeddedHash(t)
	var parked []string
	for i, d := range ds {
		s := steps[i]
		if d.Action != s.action || d.Target != s.target || d.Outcome != s.want || d.Rule == "" || d.Reason == "" || d.Policy != hash || d.TS.IsZero() {
			t.Errorf("log line %d = %+v; want %s %s %s with rule, reason, policy %s and time", i, d, s.action, s.target, s.want, hash)
		}
		if s.want == policies.OutcomeDraft || s.want == policies.OutcomeBlock {
			parked = append(parked, string(s.want)+" "+s.action+` "`+s.target+`": `)
		}
	}
	mem, err := os.ReadFile(home.Memory(orchestrator.Today(ds[0].TS)))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(mem), "\n"), "\n")
	if len(lines) != 2+len(parked) || lines[0] != gate.ParkedHeading || lines[1] != "" {
		t.Fatalf("memory file:\n%s\nwant %s and one line for each of %q", mem, gate.ParkedHeading, parked)
	}
	for i, p := range parked {
		if l := lines[2+i]; !strings.HasPrefix(l, "- ") || !strings.Contains(l, "Z "+p) {
			t.Errorf("parked line %q; want one for %q", l, p)
		}
	}

	evs, err := events.Read(home.Inbox(), time.Time{})
	if err != nil || len(evs) != 1 || evs[0].Kind != "gate_killed" || evs[0].Source != "orchestrator" || !strings.Contains(evs[0].Detail, "comment_issue") {
		t.Fatalf("inbox = %+v, %v; want one gate_killed event from orchestrator naming comment_issue", evs, err)
	}
}

// A gate policy that is broken, or missing, blocks: logged and parked
// like any block, naming what failed.
func TestGateBrokenPolicyBlocks(t *testing.T) {
	for name, tc := range map[string]struct{ body, want string }{
		"outcome outside the four": {"package airlock.gate\n\ndecision := {\"outcome\": \"yes\", \"rule\": \"r\", \"reason\": \"x\"}\n", "not one of auto, draft, block, budget"},
		"no gate policy":           {"", "no gate policy"},
	} {
		t.Run(name, func(t *testing.T) {
			bundle := copyPresets(t)
			os.Remove(filepath.Join(bundle, "gate_test.rego"))
			os.Remove(filepath.Join(bundle, "gate.rego"))
			if tc.body != "" {
				os.WriteFile(filepath.Join(bundle, "gate.rego"), []byte(tc.body), 0o644)
			}
			home := orchestrator.Home{Dir: t.TempDir()}
			code, out := gateRun(t, home.Dir, "--policy", bundle, "--action", "open_pr", "--target", "o/r")
			if code != 4 || !strings.HasPrefix(out, "block: ") || !strings.Contains(out, tc.want) || !strings.Contains(out, "(rule "+gate.RulePolicyError+")") {
				t.Fatalf("gate with a broken policy = exit %d %q; want exit 4, block naming %q", code, out, tc.want)
			}
			ds, _, err := gate.ReadLog(home.ActionLog())
			if err != nil || len(ds) != 1 || ds[0].Outcome != policies.OutcomeBlock || !strings.Contains(ds[0].Reason, tc.want) {
				t.Fatalf("action log = %+v, %v; want the block", ds, err)
			}
			if mem, _ := os.ReadFile(home.Memory(orchestrator.Today(ds[0].TS))); !strings.Contains(string(mem), "block open_pr") {
				t.Fatalf("memory file %q; want the block parked", mem)
			}
		})
	}
}

func TestGateUsageAndIntegrity(t *testing.T) {
	home := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--target", "o/r"}, ExitUsage},
		{[]string{"--action", "open_pr"}, ExitUsage},
		{[]string{"--action", "open pr", "--target", "o/r"}, ExitUsage},
		{[]string{"--action", "open_pr", "--target", "o/r", "--policy-sha256", "sha256:" + strings.Repeat("0", 64)}, ExitIntegrity},
	} {
		if code, _ := gateRun(t, home, tc.args...); code != tc.code {
			t.Errorf("gate %v = exit %d, want %d", tc.args, code, tc.code)
		}
	}
	// The gate policy is in the bundle the lock covers: an edit that
	// would make force_push auto is refused before it decides anything.
	bundle := copyPresets(t)
	if code, _, errs := airlock(t, "", "policy", "lock", bundle); code != ExitOK {
		t.Fatalf("policy lock = %d %s", code, errs)
	}
	gp := filepath.Join(bundle, "gate.rego")
	raw, _ := os.ReadFile(gp)
	edited := strings.NewReplacer(`"open_pr": 5,`, `"open_pr": 5, "force_push": 100,`, `"force_push": "a force`, `"no_push": "a force`).Replace(string(raw))
	os.WriteFile(gp, []byte(edited), 0o644)
	if code, _ := gateRun(t, home, "--policy", bundle, "--action", "force_push", "--target", "o/r"); code != ExitIntegrity {
		t.Errorf("gate with an edited, locked gate policy = exit %d, want %d", code, ExitIntegrity)
	}
	if _, err := os.Stat(filepath.Join(home, "auto-action-log.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused command line decided something: %v", err)
	}
	// Unlocked, the edit takes effect: the lock was what refused it.
	os.Remove(filepath.Join(bundle, policies.LockFileName))
	if code, _ := gateRun(t, t.TempDir(), "--policy", bundle, "--action", "force_push", "--target", "o/r"); code != ExitOK {
		t.Errorf("gate with the edited gate policy, unlocked = exit %d, want 0 (auto)", code)
	}
}

func embeddedHash(t *testing.T) string {
	t.Helper()
	code, out, errs := airlock(t, "", "policy", "hash")
	if code != ExitOK {
		t.Fatalf("policy hash = %d %s", code, errs)
	}
	return strings.TrimSpace(out)
}

// --help and README.md state each outcome's exit code as the command
// returns it.
func TestGateExitCodesAreDocumented(t *testing.T) {
	code, help, errs := airlock(t, "", "gate", "--help")
	if code != ExitOK {
		t.Fatalf("gate --help = %d %s", code, errs)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for outcome, exit := range gateExit {
		if want := fmt.Sprintf("  %-7s exit %d ", outcome, exit); !strings.Contains(help, want) {
			t.Errorf("gate --help does not say %q", want)
		}
		if want := fmt.Sprintf("| `%s` | %d |", outcome, exit); !strings.Contains(string(readme), want) {
			t.Errorf("README.md does not say %q", want)
		}
	}
}

// An outcome the command does not know (a newer policy's, a typo) blocks:
// never 0, which lets the caller act.
func TestGateExitCodeOfUnknownOutcome(t *testing.T) {
	for _, o := range []policies.Outcome{"", "allow", "Auto"} {
		if got := gateExitCode(o); got != 4 {
			t.Errorf("gateExitCode(%q) = %d, want 4 (block)", o, got)
		}
	}
	for o, want := range gateExit {
		if got := gateExitCode(o); got != want {
			t.Errorf("gateExitCode(%q) = %d, want %d", o, got, want)
		}
	}
}
