package ledger_test

import (
	"os/exec"
	"testing"

	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
)

// A spawner is alive only as the very process its line names: this boot,
// this pid, this start time. A pid reused (another start), another boot or
// a process gone is not it.
func TestProcessAlive(t *testing.T) {
	self, err := ledger.Self()
	if err != nil {
		t.Fatal(err)
	}
	exited := exec.Command("/bin/true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	reused, otherBoot, gone := *self, *self, *self
	reused.Start++
	otherBoot.Boot = "00000000-0000-0000-0000-000000000000"
	gone.Pid = exited.Process.Pid
	for _, tc := range []struct {
		name string
		p    ledger.Process
		want bool
	}{{"itself", *self, true}, {"pid reused", reused, false}, {"another boot", otherBoot, false}, {"exited", gone, false}} {
		if got, err := tc.p.Alive(); got != tc.want || err != nil {
			t.Errorf("%s: Alive = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

// The running line's spawner and reservation day survive the fold.
func TestFoldKeepsTheSpawner(t *testing.T) {
	p := &ledger.Process{Pid: 42, Start: 7, Boot: "b"}
	tasks := ledger.Fold([]ledger.Entry{
		{Task: "t", Status: ledger.Queued},
		{Task: "t", Status: ledger.Running, Spawner: p, Reserved: "2026-11-23"},
	})
	if len(tasks) != 1 || tasks[0].Spawner != p || tasks[0].Reserved != "2026-11-23" {
		t.Fatalf("Fold = %+v; want the spawner and day kept", tasks)
	}
}
