package gate

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/presets"
)

func embedded(t *testing.T) *policies.Engine {
	t.Helper()
	e, err := policies.New(context.Background(), policies.Options{
		Source: policies.Source{FS: presets.FS}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Gates deciding at once never take an action past its daily cap: the
// count, the decision and the append hold the log's flock together.
func TestConcurrentGatesKeepTheDailyCap(t *testing.T) {
	e, home := embedded(t), orchestrator.Home{Dir: t.TempDir()}
	const gates, limit = 16, 5 // open_pr's cap in presets/gate.rego
	now := time.Now()
	var wg sync.WaitGroup
	for range gates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := Decide(context.Background(), home, e, "open_pr", "o/r", at(now)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	ds, torn, err := ReadLog(home.ActionLog())
	if err != nil || torn != 0 || len(ds) != gates {
		t.Fatalf("ReadLog = %d decisions, %d torn, %v; want %d whole", len(ds), torn, err, gates)
	}
	n := map[policies.Outcome]int{}
	for _, d := range ds {
		n[d.Outcome]++
	}
	if n[policies.OutcomeAuto] != limit || n[policies.OutcomeBudget] != gates-limit {
		t.Fatalf("outcomes %v; want %d auto and the rest budget", n, limit)
	}
}

// A gate killed mid-write leaves a torn line: it is not counted, and the
// next decision's line is whole after it.
func TestTornLogLine(t *testing.T) {
	e, home := embedded(t), orchestrator.Home{Dir: t.TempDir()}
	now := time.Now()
	whole := `{"ts":"` + now.UTC().Format(time.RFC3339Nano) + `","action":"open_pr","target":"o/r","outcome":"auto","rule":"auto","reason":"r","policy":"p"}` + "\n"
	torn := `{"ts":"` + now.UTC().Format(time.RFC3339Nano) + `","action":"open_pr","tar`
	if err := os.WriteFile(home.ActionLog(), []byte(whole+torn), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Decide(context.Background(), home, e, "open_pr", "o/r", at(now))
	if err != nil || d.Outcome != policies.OutcomeAuto || !strings.Contains(d.Reason, "1 of 5") {
		t.Fatalf("Decide = %+v, %v; want auto counting the one whole line (1 of 5)", d, err)
	}
	ds, n, err := ReadLog(home.ActionLog())
	if err != nil || n != 1 || len(ds) != 2 || ds[1].Outcome != policies.OutcomeAuto {
		t.Fatalf("ReadLog = %+v, %d torn, %v; want 2 whole lines and the torn one skipped", ds, n, err)
	}
}

// Yesterday's auto actions do not count against today's cap.
func TestCapIsPerUTCDay(t *testing.T) {
	e, home := embedded(t), orchestrator.Home{Dir: t.TempDir()}
	day := time.Date(2026, 11, 23, 23, 59, 0, 0, time.UTC)
	for range 5 {
		if _, err := Decide(context.Background(), home, e, "open_pr", "o/r", at(day)); err != nil {
			t.Fatal(err)
		}
	}
	if d, _ := Decide(context.Background(), home, e, "open_pr", "o/r", at(day)); d.Outcome != policies.OutcomeBudget {
		t.Fatalf("6th open_pr of the day = %s, want budget", d.Outcome)
	}
	if d, _ := Decide(context.Background(), home, e, "open_pr", "o/r", at(day.Add(2*time.Minute))); d.Outcome != policies.OutcomeAuto {
		t.Fatalf("first open_pr of the next day = %s, want auto", d.Outcome)
	}
}

// Parking appends under the memory file's last section when it is the
// parked actions', else under a new heading; what is there stays as it was.
func TestParkAppendsNeverRewrites(t *testing.T) {
	e, home := embedded(t), orchestrator.Home{Dir: t.TempDir()}
	now := time.Date(2026, 11, 23, 19, 1, 2, 0, time.UTC)
	mem := home.Memory("2026-11-23")
	before := "# 2026-11-23\n\n## Results\n\n- task 1 done" // no final newline: a writer's torn end
	os.MkdirAll(filepath.Dir(mem), 0o700)
	if err := os.WriteFile(mem, []byte(before), 0o600); err != nil {
		t.Fatal(err)
	}
	decide := func(action, target string) {
		t.Helper()
		if _, err := Decide(context.Background(), home, e, action, target, at(now)); err != nil {
			t.Fatal(err)
		}
	}
	decide("send_mail", "x@example.test\n## Forged heading") // a target cannot add a line
	decide("force_push", "o/r")
	decide("open_pr", "o/r") // auto: not parked
	raw, _ := os.ReadFile(mem)
	f, _ := os.OpenFile(mem, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("\n## Results\n\n- task 2 done\n") // as collect would
	f.Close()
	decide("delete_repo", "o/r")

	after, _ := os.ReadFile(mem)
	want := before + "\n\n" + ParkedHeading + "\n\n" +
		`- 19:01:02Z draft send_mail "x@example.test\n## Forged heading": mail to "x@example.test\n## Forged heading" leaves the own domains {"airlock.test"}: a human sends it (rule mail-outside)` + "\n" +
		`- 19:01:02Z block force_push "o/r": a force push rewrites history others have pulled (rule destructive)` + "\n"
	if string(raw) != want {
		t.Fatalf("memory file after parking:\n%s\nwant:\n%s", raw, want)
	}
	want += "\n## Results\n\n- task 2 done\n\n" + ParkedHeading + "\n\n" +
		`- 19:01:02Z block delete_repo "o/r": deleting a repository cannot be undone (rule destructive)` + "\n"
	if string(after) != want {
		t.Fatalf("memory file after another section:\n%s\nwant:\n%s", after, want)
	}
}

// An action that is not a name is refused before anything is decided or
// written.
func TestInvalidActionIsNotDecided(t *testing.T) {
	e, home := embedded(t), orchestrator.Home{Dir: t.TempDir()}
	for _, a := range []string{"", "send mail", "send_mail\n- forged", "-x"} {
		d, err := Decide(context.Background(), home, e, a, "t", time.Now)
		if !errors.Is(err, ErrInvalidAction) || d.Outcome != policies.OutcomeBlock || d.Rule != RuleInvalidAction {
			t.Errorf("Decide(%q) = %+v, %v; want a block and ErrInvalidAction", a, d, err)
		}
	}
	if _, err := os.Stat(home.ActionLog()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an invalid action wrote the log: %v", err)
	}
}

// A kill file that cannot be checked halts actions as if it were there.
func TestUncheckableKillFileKills(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	os.WriteFile(notDir, nil, 0o600)
	why, killed := killFile(filepath.Join(notDir, ".auto-disabled")) // ENOTDIR
	if !killed || !strings.Contains(why, "cannot be checked") {
		t.Fatalf("killFile(ENOTDIR) = %q, %v; want killed, saying it cannot be checked", why, killed)
	}
}

// A symlink planted at the log's path is not followed.
func TestActionLogSymlinkRefused(t *testing.T) {
	e, home := embedded(t), orchestrator.Home{Dir: t.TempDir()}
	elsewhere := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Symlink(elsewhere, home.ActionLog()); err != nil {
		t.Fatal(err)
	}
	d, err := Decide(context.Background(), home, e, "open_pr", "o/r", time.Now)
	if err == nil || d.Outcome != policies.OutcomeBlock || d.Rule != RuleUnrecorded {
		t.Fatalf("Decide through a symlinked log = %+v, %v; want a block (unrecorded) and an error", d, err)
	}
	if _, err := os.Stat(elsewhere); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the symlink's target was written: %v", err)
	}
}

// at is a clock stopped at t.
func at(t time.Time) func() time.Time { return func() time.Time { return t } }

// A decision is stamped once the action log is the gate's: one that waited
// on the lock past the day's start would otherwise write a line older than
// those before it, where the count of the day's actions stops reading.
func TestDecisionStampedUnderTheLock(t *testing.T) {
	e, home := embedded(t), orchestrator.Home{Dir: t.TempDir()}
	asked, then := time.Date(2026, 11, 23, 23, 0, 0, 0, time.UTC), time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)
	calls := 0
	clock := func() time.Time {
		calls++
		if calls == 1 {
			return asked
		}
		return then
	}
	d, err := Decide(context.Background(), home, e, "open_pr", "o/r", clock)
	if err != nil || !d.TS.Equal(then) {
		t.Fatalf("Decide = %+v, %v; want it stamped %v, when the log was the gate's", d, err, then)
	}
}
