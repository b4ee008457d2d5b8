package local

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/budget"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
)

// A task still queued whose spawner is gone (it died before starting it,
// its tokens reserved) never runs: a reconciler ends it
// failed, says so in its result, and releases its reservation, whatever
// its substrate. One whose spawner is alive is left alone.
func TestQueuedTaskOfAGoneSpawnerIsReleased(t *testing.T) {
	home, b, self, gone := spawners(t)
	for id, spawner := range map[string]*ledger.Process{"gone": gone, "alive": self} {
		resv, err := b.Reserve(id, 40000)
		if err != nil {
			t.Fatal(err)
		}
		if err := ledger.Append(home.Ledger(), ledger.Entry{Task: id, Kind: "k", Substrate: "git", Status: ledger.Queued,
			Spawner: spawner, Reserved: resv.Day}); err != nil {
			t.Fatal(err)
		}
	}
	done, err := Reconcile(home, b, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 1 || done[0].ID != "gone" || done[0].Status != ledger.Failed || done[0].Exit != ExitSpawnerGone ||
		!strings.HasPrefix(done[0].Detail, "spawner gone before the task ran") {
		t.Fatalf("reconciled %+v; want the gone spawner's task failed, exit %d, spawner gone before it ran", done, ExitSpawnerGone)
	}
	entries, _, err := ledger.Read(home.Ledger())
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]ledger.Status{}
	for _, task := range ledger.Fold(entries) {
		status[task.ID] = task.Status
	}
	if status["gone"] != ledger.Failed || status["alive"] != ledger.Queued {
		t.Errorf("ledger %v; want gone failed, alive still queued", status)
	}
	if r, err := spawn.ReadResult(home.Subagent("gone")); err != nil || r.Status != ledger.Failed {
		t.Errorf("result.json of the gone spawner's task: %+v, %v; want failed", r, err)
	}
	day, err := b.Today()
	if err != nil {
		t.Fatal(err)
	}
	if day.Reserved != 40000 || day.Spent != 0 {
		t.Errorf("budget %+v; want the live task's 40000 reserved, nothing spent", day)
	}
	// Once ended, never again.
	if again, err := Reconcile(home, b, time.Now); err != nil || len(again) != 0 {
		t.Errorf("a second reconcile: %+v, %v; want nothing", again, err)
	}
}

// A spawn names its task and the day on the queued line before it reserves:
// one that died in between left a queued task and no reservation, which a
// reconcile ends as the others, with nothing to release.
func TestQueuedTaskWithoutAReservationEnds(t *testing.T) {
	home, b, _, gone := spawners(t)
	if err := ledger.Append(home.Ledger(), ledger.Entry{Task: "unreserved", Kind: "k", Substrate: "local", Status: ledger.Queued,
		Spawner: gone, Reserved: b.Day()}); err != nil {
		t.Fatal(err)
	}
	done, err := Reconcile(home, b, time.Now)
	if err != nil || len(done) != 1 || done[0].Status != ledger.Failed {
		t.Fatalf("Reconcile = %+v, %v; want the task failed, no error for a reservation never made", done, err)
	}
	if again, err := Reconcile(home, b, time.Now); err != nil || len(again) != 0 {
		t.Errorf("a second reconcile: %+v, %v; want nothing", again, err)
	}
}

// spawners is a fresh home and budget, this process as a live spawner, and
// one gone (its boot another).
func spawners(t *testing.T) (orchestrator.Home, budget.Budget, *ledger.Process, *ledger.Process) {
	t.Helper()
	home := orchestrator.Home{Dir: t.TempDir()}
	self, err := ledger.Self()
	if err != nil {
		t.Fatal(err)
	}
	gone := *self
	gone.Boot = "an earlier boot"
	return home, budget.Budget{Dir: home.Budget(), Daily: 100000}, self, &gone
}
