package spawn

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/budget"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/presets"
)

// ranAt is a substrate that runs nothing and reports done.
type ranAt struct{}

func (ranAt) Run(context.Context, Job) (Result, error) { return Result{Status: ledger.Done}, nil }

// Every line of a task from its reservation on names the spawn carrying it
// and the day its tokens are reserved on: should the spawn die at any
// step, a reconciler can tell it is gone and settle the reservation.
func TestLinesNameTheirSpawner(t *testing.T) {
	home, task, s := kindHome(t, budget.Budget{Daily: 100000})
	res, err := s.Spawn(context.Background(), Request{Kind: "k", TaskFile: task})
	if err != nil || res.Status != ledger.Done {
		t.Fatalf("Spawn = %+v, %v; want done", res, err)
	}
	entries, _, err := ledger.Read(home.Ledger())
	if err != nil {
		t.Fatal(err)
	}
	today := orchestrator.Today(s.now())
	seen := map[ledger.Status]bool{}
	for _, e := range entries {
		if e.Status != ledger.Queued && e.Status != ledger.Running {
			continue
		}
		seen[e.Status] = true
		if e.Spawner == nil || e.Spawner.Pid != os.Getpid() || e.Reserved != today {
			t.Errorf("%s line names spawner %+v, reserved day %q; want this process (pid %d) and %s", e.Status, e.Spawner, e.Reserved, os.Getpid(), today)
		}
	}
	if !seen[ledger.Queued] || !seen[ledger.Running] {
		t.Errorf("ledger lines %+v; want queued and running", entries)
	}
}

// kindHome is a home with kind k (40000 tokens, the local substrate that
// runs nothing), a task file, and a spawner with budget b (its Dir the
// home's).
func kindHome(t *testing.T, b budget.Budget) (orchestrator.Home, string, *Spawner) {
	t.Helper()
	home := orchestrator.Home{Dir: t.TempDir()}
	os.MkdirAll(home.Kinds(), 0o755)
	kindYAML := "name: k\nbinary: {path: /bin/true}\npreset: reviewer\nsubstrate: local\ntimeout: 1m\ntokens: 40000\nprompt: \"x {{.Text}}\"\n"
	if err := os.WriteFile(filepath.Join(home.Kinds(), "k.yaml"), []byte(kindYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	task := filepath.Join(home.Dir, "task.txt")
	os.WriteFile(task, []byte("t"), 0o644)
	quiet := slog.New(slog.DiscardHandler)
	e, err := policies.New(context.Background(), policies.Options{Source: policies.Source{FS: presets.FS}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	b.Dir = home.Budget()
	return home, task, &Spawner{Home: home, Engine: e, Budget: b, Log: quiet, Substrates: map[string]Substrate{"local": ranAt{}}}
}

// A day that turns between the task's queued line and its reservation,
// the old day spent: the new day's budget is asked, the task queued again
// on it, and it runs; refused, a scheduler would stop for the new day.
func TestDayTurnsBeforeTheReservation(t *testing.T) {
	late := time.Date(2026, 11, 23, 23, 59, 59, 0, time.UTC)
	calls := 0
	clock := func() time.Time {
		// The budget's clock: the old day for the spend below and the
		// spawn's queued line, the new one after.
		if calls++; calls <= 2 {
			return late
		}
		return late.Add(2 * time.Second)
	}
	home, task, s := kindHome(t, budget.Budget{Daily: 50000, Now: clock})
	spent, err := s.Budget.Reserve("earlier", 50000)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Budget.Settle(spent, 50000); err != nil {
		t.Fatal(err)
	}
	res, err := s.Spawn(context.Background(), Request{Kind: "k", TaskFile: task})
	if err != nil || res.Status != ledger.Done {
		t.Fatalf("Spawn = %+v, %v; want it run on the new day's budget", res, err)
	}
	entries, _, err := ledger.Read(home.Ledger())
	if err != nil {
		t.Fatal(err)
	}
	var days []string
	for _, e := range entries {
		if e.Status == ledger.Queued {
			days = append(days, e.Reserved)
		}
	}
	if len(days) != 2 || days[0] != "2026-11-23" || days[1] != "2026-11-24" {
		t.Errorf("queued lines on %v; want the old day, then the new", days)
	}
}

// releasing is a substrate whose run finds its task's reservation released
// by someone else (a reconciler that took its spawner for gone), then
// reports usage.
type releasing struct{ b budget.Budget }

func (r releasing) Run(_ context.Context, j Job) (Result, error) {
	r.b.Settle(budget.Reservation{Task: j.ID, Day: j.Reserved}, 0)
	return Result{Status: ledger.Done, Usage: &ledger.Usage{Tokens: 30000}}, nil
}

// A task's usage that finds no reservation to settle is charged nowhere:
// said loudly, never silently (only a reservation never made, its reserve
// having failed, is no one's to settle).
func TestUsageWithNoReservationIsSaid(t *testing.T) {
	_, task, s := kindHome(t, budget.Budget{Daily: 100000})
	var logs bytes.Buffer
	s.Log = slog.New(slog.NewTextHandler(&logs, nil))
	s.Substrates = map[string]Substrate{"local": releasing{s.Budget}}
	if _, err := s.Spawn(context.Background(), Request{Kind: "k", TaskFile: task}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "the budget could not be settled") || !strings.Contains(logs.String(), "holds no reservation") {
		t.Errorf("logs %q; want the settle that found no reservation said", logs.String())
	}
}
