package gitsub

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/budget"
	"github.com/airlock-sandbox/airlock/orchestrator/kind"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
)

// startAsync does what an async spawn does before it returns: reserve the
// estimate, ledger queued, push and dispatch, ledger running (at started).
func startAsync(t *testing.T, s *Substrate, home orchestrator.Home, b budget.Budget, f *Files, started time.Time) {
	t.Helper()
	id := f.Manifest.ID
	r, err := b.Reserve(id, f.Manifest.Tokens)
	if err != nil {
		t.Fatal(err)
	}
	// As the spawn records it: the day may be before the queued line's.
	f.Manifest.ReservedDay = r.Day
	for _, st := range []ledger.Status{ledger.Queued, ledger.Running} {
		if err := ledger.Append(home.Ledger(), ledger.Entry{TS: started, Task: id, Kind: f.Manifest.Kind, Substrate: kind.Git, Status: st}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Start(context.Background(), home.Subagent(id), f); err != nil {
		t.Fatal(err)
	}
}

func lastStatus(t *testing.T, home orchestrator.Home, id string) ledger.Task {
	t.Helper()
	entries, _, err := ledger.Read(home.Ledger())
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range ledger.Fold(entries) {
		if task.ID == id {
			return task
		}
	}
	t.Fatalf("no ledger line for %s", id)
	return ledger.Task{}
}

func TestPoll(t *testing.T) {
	ctx := context.Background()
	home := orchestrator.Home{Dir: t.TempDir()}
	b := budget.Budget{Dir: home.Budget(), Daily: 10000}
	remote := Remote{URL: testutil.GitRemote(t)}
	run := &Substrate{Remote: remote, Dispatcher: runnerDispatch(t)}
	lost := &Substrate{Remote: remote, Dispatcher: Command{Line: "true"}} // a dispatcher whose runner never runs
	now := time.Now()

	startAsync(t, run, home, b, agent(t, "t-done", `echo '{"answer":1,"usage":{"tokens":42}}'`), now)
	startAsync(t, lost, home, b, agent(t, "t-lost", `echo '{}'`), now.Add(-time.Hour))
	startAsync(t, lost, home, b, agent(t, "t-young", `echo '{}'`), now)
	startAsync(t, lost, home, b, agent(t, "t-held", `echo '{}'`), now.Add(-time.Hour))
	startAsync(t, lost, home, b, agent(t, "t-gone", `echo '{}'`), now.Add(-time.Hour))
	// Its branch deleted by hand: Poll still gives up on it at its deadline.
	testutil.Git(t, "", "--git-dir", remote.URL, "branch", "-D", Branch("t-gone"))
	// A sync spawn still waits for t-held: Poll leaves it to it.
	release, err := spawn.Claim(home.Subagent("t-held"))
	if err != nil {
		t.Fatal(err)
	}
	defer release()

	poller := &Substrate{Remote: remote, Grace: time.Second}
	got, err := poller.Poll(ctx, home, b)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]spawn.Reconciled{
		"t-done": {ID: "t-done", Status: ledger.Done, Exit: 0},
		// 60 s timeout + 1 s grace, an hour ago
		"t-lost": {ID: "t-lost", Status: ledger.Failed, Exit: 124, Detail: "the runner did not commit a result to spawn/t-lost within 61 s"},
		"t-gone": {ID: "t-gone", Status: ledger.Failed, Exit: 124, Detail: "the runner did not commit a result to spawn/t-gone within 61 s"},
	}
	if len(got) != len(want) {
		t.Fatalf("Poll reconciled %+v, want %v", got, want)
	}
	for _, r := range got {
		w := want[r.ID]
		if r.Status != w.Status || r.Exit != w.Exit || !strings.HasPrefix(r.Detail, w.Detail) {
			t.Errorf("reconciled %+v, want %+v", r, w)
		}
		if task := lastStatus(t, home, r.ID); task.Status != w.Status || task.Exit == nil || *task.Exit != w.Exit {
			t.Errorf("ledger of %s: %+v", r.ID, task)
		}
	}
	for id, want := range map[string]ledger.Status{"t-young": ledger.Running, "t-held": ledger.Running} {
		if task := lastStatus(t, home, id); task.Status != want {
			t.Errorf("ledger of %s: %s, want %s", id, task.Status, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(home.Subagent("t-done"), "result.json")); err != nil || !strings.Contains(string(b), `"answer":1`) {
		t.Errorf("t-done's result.json = %s, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(home.Subagent("t-done"), "stdout.log")); err != nil {
		t.Error(err)
	}
	// t-done settled at its usage (42), t-lost and t-gone at their
	// estimate (500); the two still running keep their reservations.
	day, err := b.Today()
	if err != nil {
		t.Fatal(err)
	}
	if day.Spent != 1042 || day.Reserved != 1000 {
		t.Errorf("budget = %+v, want 1042 spent, 1000 reserved", day)
	}
	// Nothing is reconciled twice.
	if again, err := poller.Poll(ctx, home, b); err != nil || len(again) != 0 {
		t.Errorf("second Poll = %+v, %v", again, err)
	}
}

// running appends task id's queued and running lines at ts.
func running(t *testing.T, home orchestrator.Home, id string, ts time.Time) {
	t.Helper()
	for _, st := range []ledger.Status{ledger.Queued, ledger.Running} {
		if err := ledger.Append(home.Ledger(), ledger.Entry{TS: ts, Task: id, Kind: "reviewer", Substrate: kind.Git, Status: st}); err != nil {
			t.Fatal(err)
		}
	}
}

// A task reserved just before midnight and queued just after is settled on
// the day of its reservation, which its manifest records.
func TestPollSettlesOnReservationDay(t *testing.T) {
	ctx := context.Background()
	home := orchestrator.Home{Dir: t.TempDir()}
	midnight := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	before := budget.Budget{Dir: home.Budget(), Daily: 1000, Now: func() time.Time { return midnight.Add(-time.Second) }}
	resv, err := before.Reserve("t-midnight", 10)
	if err != nil {
		t.Fatal(err)
	}
	running(t, home, "t-midnight", midnight.Add(time.Second))
	j := job(t, "t-midnight", true)
	j.Dir, j.Reserved = home.Subagent("t-midnight"), resv.Day
	for name, content := range map[string]string{"prompt.txt": "review this\n", "task": "the task\n"} {
		if err := os.MkdirAll(j.Dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(j.Dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	remote := Remote{URL: testutil.GitRemote(t)}
	s := &Substrate{Remote: remote, Dispatcher: runnerDispatch(t)}
	if r, err := s.Run(ctx, j); err != nil || r.Status != ledger.Running {
		t.Fatalf("Run = %+v, %v", r, err)
	}
	after := budget.Budget{Dir: home.Budget(), Daily: 1000, Now: func() time.Time { return midnight.Add(time.Hour) }}
	got, err := (&Substrate{Remote: remote}).Poll(ctx, home, after)
	if err != nil || len(got) != 1 || got[0].Status != ledger.Done {
		t.Fatalf("Poll = %+v, %v; want t-midnight done and settled", got, err)
	}
	if day, err := before.Today(); err != nil || day.Reserved != 0 || day.Spent != 10 {
		t.Errorf("the reservation's day: %+v, %v; want the estimate (10) spent, nothing reserved", day, err)
	}
}

// A task whose spawn stopped before it recorded a manifest (nothing pushed,
// nothing runs it) is failed once the grace has passed, its reservation
// released, instead of failing every poll; a young one is left to its
// spawn, which may be about to start it.
func TestPollNeverPushed(t *testing.T) {
	ctx := context.Background()
	home := orchestrator.Home{Dir: t.TempDir()}
	b := budget.Budget{Dir: home.Budget(), Daily: 1000}
	for id, ts := range map[string]time.Time{"t-crashed": time.Now().Add(-time.Hour), "t-starting": time.Now()} {
		// Reserved when queued, on that day (yesterday's, just after
		// midnight): with no manifest, the queued line names the day.
		at := b
		at.Now = func() time.Time { return ts }
		if _, err := at.Reserve(id, 100); err != nil {
			t.Fatal(err)
		}
		running(t, home, id, ts)
	}
	s := &Substrate{Remote: Remote{URL: testutil.GitRemote(t)}, Grace: time.Minute}
	got, err := s.Poll(ctx, home, b)
	if err != nil || len(got) != 1 || got[0].ID != "t-crashed" || got[0].Status != ledger.Failed || !strings.Contains(got[0].Detail, "stopped before it pushed") {
		t.Fatalf("Poll = %+v, %v; want t-crashed failed, never pushed", got, err)
	}
	if task := lastStatus(t, home, "t-starting"); task.Status != ledger.Running {
		t.Errorf("t-starting: %s, want running", task.Status)
	}
	if day, err := b.Today(); err != nil || day.Spent != 0 || day.Reserved != 100 {
		t.Errorf("budget %+v, %v; want t-crashed's reservation released, t-starting's held", day, err)
	}
	if again, err := s.Poll(ctx, home, b); err != nil || len(again) != 0 {
		t.Errorf("second Poll = %+v, %v; want nothing", again, err)
	}
}

// A task reserved just before midnight whose spawn died after its running
// line, before it recorded a manifest, is settled on the day the running
// line names, not on the queued line's.
func TestPollNeverPushedSettlesOnReservedDay(t *testing.T) {
	ctx := context.Background()
	home := orchestrator.Home{Dir: t.TempDir()}
	midnight := time.Now().UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour)
	before := budget.Budget{Dir: home.Budget(), Daily: 1000, Now: func() time.Time { return midnight.Add(-time.Second) }}
	resv, err := before.Reserve("t-late", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []ledger.Status{ledger.Queued, ledger.Running} {
		e := ledger.Entry{TS: midnight.Add(time.Second), Task: "t-late", Kind: "reviewer", Substrate: kind.Git, Status: st}
		if st == ledger.Running {
			e.Reserved = resv.Day
		}
		if err := ledger.Append(home.Ledger(), e); err != nil {
			t.Fatal(err)
		}
	}
	s := &Substrate{Remote: Remote{URL: testutil.GitRemote(t)}, Grace: time.Minute}
	got, err := s.Poll(ctx, home, budget.Budget{Dir: home.Budget()})
	if err != nil || len(got) != 1 || got[0].Status != ledger.Failed {
		t.Fatalf("Poll = %+v, %v; want t-late failed, its reservation settled", got, err)
	}
	if day, err := before.Today(); err != nil || day.Reserved != 0 {
		t.Errorf("budget of %s: %+v, %v; want the reservation released", resv.Day, day, err)
	}
}

// A task whose spawn is alive is not failed as never pushed, however long
// ago it started: the spawn may have been stopped (^Z, a host asleep) after
// its running line and be about to push it; failed and its tokens released,
// it would then run with nothing reserved.
func TestNeverPushedWaitsForALiveSpawner(t *testing.T) {
	ctx := context.Background()
	home := orchestrator.Home{Dir: t.TempDir()}
	b := budget.Budget{Dir: home.Budget(), Daily: 1000}
	const id = "t-stopped"
	resv, err := b.Reserve(id, 10)
	if err != nil {
		t.Fatal(err)
	}
	self, err := ledger.Self()
	if err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-time.Hour)
	for _, st := range []ledger.Status{ledger.Queued, ledger.Running} {
		if err := ledger.Append(home.Ledger(), ledger.Entry{TS: long, Task: id, Kind: "reviewer", Substrate: kind.Git, Status: st, Spawner: self, Reserved: resv.Day}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := (&Substrate{Remote: Remote{URL: testutil.GitRemote(t)}}).Poll(ctx, home, b)
	if err != nil || len(got) != 0 {
		t.Fatalf("Poll = %+v, %v; want nothing settled while its spawner lives", got, err)
	}
	if day, err := b.Today(); err != nil || day.Reserved != 10 {
		t.Fatalf("budget %+v, %v; want its 10 tokens still reserved", day, err)
	}
}
