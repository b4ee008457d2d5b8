package local

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/budget"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/presets"
)

// lostPod launches a sandbox whose sub-agent printed its result, and whose
// end is then never seen: a pod's stream gone before the exit line.
type lostPod struct{ stdout string }

func (l lostPod) Launch(_ context.Context, s Spec) (Sandbox, error) {
	if err := os.WriteFile(s.Stdout, []byte(l.stdout), 0o600); err != nil {
		return nil, err
	}
	return lostSandbox{}, nil
}

type lostSandbox struct{}

func (lostSandbox) Wait() (int, error) {
	return 0, errors.New("the pod ended the sandbox's stream without its exit: EOF")
}
func (lostSandbox) Stop(time.Duration) {}

// A sub-agent that was launched and whose end was not seen ran, or may
// have, and spent: the task fails, charged the usage it reported or, with
// none, the kind's estimate; it is not released at nothing.
func TestUnseenEndIsCharged(t *testing.T) {
	testutil.RequireRoot(t, "the local substrate gives the sandbox's uid its work directory")
	for _, tc := range []struct {
		name, stdout string
		spent        int64
	}{
		{"usage reported", `{"usage":{"tokens":30000}}` + "\n", 30000},
		{"no usage", "working\n", 40000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Reachable by the sandbox's uid, as t.TempDir's parent is not.
			base, err := os.MkdirTemp("", "airlock-unseen-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(base) })
			os.Chmod(base, 0o755)
			home := orchestrator.Home{Dir: base}
			os.MkdirAll(home.Kinds(), 0o755)
			kindYAML := "name: k\nbinary: {path: /bin/true}\npreset: reviewer\nsubstrate: local\ntimeout: 1m\ntokens: 40000\nprompt: \"x {{.Text}}\"\n"
			if err := os.WriteFile(filepath.Join(home.Kinds(), "k.yaml"), []byte(kindYAML), 0o644); err != nil {
				t.Fatal(err)
			}
			task := filepath.Join(base, "task.txt")
			os.WriteFile(task, []byte("t"), 0o644)
			quiet := slog.New(slog.DiscardHandler)
			e, err := policies.New(context.Background(), policies.Options{Source: policies.Source{FS: presets.FS}, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			b := budget.Budget{Dir: home.Budget(), Daily: 100000}
			s := &spawn.Spawner{Home: home, Engine: e, Budget: b, Log: quiet,
				Substrates: map[string]spawn.Substrate{"local": Substrate{Launcher: lostPod{tc.stdout}}}}
			res, err := s.Spawn(context.Background(), spawn.Request{Kind: "k", TaskFile: task})
			if err != nil || res.Status != ledger.Failed {
				t.Fatalf("Spawn = %s, %v; want failed, no error", res.Status, err)
			}
			day, err := b.Today()
			if err != nil {
				t.Fatal(err)
			}
			if day.Spent != tc.spent || day.Reserved != 0 {
				t.Errorf("budget after: %+v; want %d spent, nothing reserved", day, tc.spent)
			}
		})
	}
}
