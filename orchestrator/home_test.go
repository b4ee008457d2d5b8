package orchestrator_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator"
)

func TestDefaultHome(t *testing.T) {
	t.Setenv("AIRLOCK_HOME", "rel/home")
	h, err := orchestrator.DefaultHome()
	wd, _ := os.Getwd()
	if want := filepath.Join(wd, "rel/home"); err != nil || h.Dir != want {
		t.Errorf("DefaultHome (AIRLOCK_HOME=rel/home) = %q, %v; want %q", h.Dir, err, want)
	}
	t.Setenv("AIRLOCK_HOME", "")
	h, err = orchestrator.DefaultHome()
	want := filepath.Join(os.Getenv("HOME"), ".local/share/airlock/agent")
	if os.Geteuid() == 0 {
		want = "/var/lib/airlock/agent"
	}
	if err != nil || h.Dir != want {
		t.Errorf("DefaultHome = %q, %v; want %q", h.Dir, err, want)
	}
}

func TestHomeLayout(t *testing.T) {
	h := orchestrator.Home{Dir: "/h"}
	for got, want := range map[string]string{
		h.Kinds():              "/h/kinds",
		h.Ledger():             "/h/queue/tasks.jsonl",
		h.Budget():             "/h/budget",
		h.Subagent("id"):       "/h/subagents/id",
		h.Memory("2026-11-23"): "/h/memory/2026-11-23.md",
		h.Inbox():              "/h/agent-inbox.jsonl",
		h.ActionLog():          "/h/auto-action-log.jsonl",
		h.KillFile():           "/h/.auto-disabled",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestNewTaskID(t *testing.T) {
	// 20:01:02 in UTC+1 is 19:01:02 UTC.
	at := time.Date(2026, 11, 23, 20, 1, 2, 0, time.FixedZone("UTC+1", 3600))
	a, b := orchestrator.NewTaskID(at), orchestrator.NewTaskID(at)
	re := regexp.MustCompile(`^20261123-190102-[0-9a-f]{6}$`)
	if !re.MatchString(a) || !re.MatchString(b) || a == b {
		t.Errorf("NewTaskID = %q, %q; want two distinct ids matching %s", a, b, re)
	}
	if later := orchestrator.NewTaskID(at.Add(time.Second)); later <= a[:15]+"-ffffff" {
		t.Errorf("NewTaskID a second later = %q, want it to sort after %q", later, a)
	}
	if got := orchestrator.Today(at.Add(4 * time.Hour)); got != "2026-11-23" {
		t.Errorf("Today(23:01 UTC) = %q, want 2026-11-23", got)
	}
	if got := orchestrator.Today(at.Add(5 * time.Hour)); got != "2026-11-24" {
		t.Errorf("Today(00:01 UTC) = %q, want 2026-11-24", got)
	}
}
