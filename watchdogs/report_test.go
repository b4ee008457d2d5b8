package watchdogs

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
)

type blindProbe struct{}

func (blindProbe) Probe(context.Context) Finding {
	return Finding{Kind: "unobservable", Detail: "the evidence is unreadable", Blind: true}
}

// A blind streak is said once, but only once the inbox has the line: a
// round whose line could not be written leaves it to the next round.
func TestBlindIsSaidOnceTheInboxHasIt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent-inbox.jsonl")
	w := &Watchdog{Source: "watchdog-test", Service: "svc", Probe: blindProbe{}, Log: slog.New(slog.DiscardHandler)}
	closed, err := events.Open(path, events.Options{})
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	w.Inbox = closed
	if res, err := w.Once(context.Background()); res.Outcome != Blind || err == nil {
		t.Fatalf("Once with an inbox that takes nothing = %v, %v; want blind, an error", res.Outcome, err)
	}
	inbox, err := events.Open(path, events.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer inbox.Close()
	w.Inbox = inbox
	for range 2 {
		if res, err := w.Once(context.Background()); res.Outcome != Blind || err != nil {
			t.Fatalf("Once = %v, %v; want blind", res.Outcome, err)
		}
	}
	evs, err := events.Read(path, time.Time{})
	if err != nil || len(evs) != 1 || evs[0].Kind != "unobservable" {
		t.Errorf("inbox = %+v, %v; want the blind line once", evs, err)
	}
}

// probeFunc is a Probe of a test's own.
type probeFunc func(context.Context) Finding

func (p probeFunc) Probe(ctx context.Context) Finding { return p(ctx) }

func healthy(context.Context) Finding { return Finding{} }

// objectMemory is a Remembering probe, always healthy, whose memory must
// be a JSON object.
type objectMemory struct{}

func (objectMemory) Probe(context.Context) Finding { return Finding{} }
func (objectMemory) Restore(raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	var v map[string]any
	return json.Unmarshal(raw, &v)
}
func (objectMemory) Remember() (json.RawMessage, error) { return json.RawMessage(`{}`), nil }

// A state the watchdog cannot read or believe stops every run before its
// round, and the service it watches goes unwatched: the inbox says so,
// critical, once per streak of runs that cannot (not only the journal), and
// again once it breaks anew after it was read.
func TestUnreadableStateIsSaidOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(path string)
		want  string // the line's detail says this
	}{
		{"garbage", func(p string) { os.WriteFile(p, []byte(`{"strikes":`), 0o600) }, "remove it to start afresh"},
		{"others may write it", func(p string) {
			os.WriteFile(p, []byte(`{}`), 0o600)
			os.Chmod(p, 0o666)
		}, "writable by group or others"},
		{"a symlink", func(p string) {
			os.WriteFile(p+".elsewhere", []byte(`{}`), 0o600)
			os.Symlink(p+".elsewhere", p)
		}, "symbolic link"},
		{"a probe's memory it cannot restore", func(p string) { os.WriteFile(p, []byte(`{"probe":"x"}`), 0o600) }, "remove it to start afresh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			state, path := filepath.Join(dir, "watchdog-shim.json"), filepath.Join(dir, events.DefaultFile)
			inbox, err := events.Open(path, events.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer inbox.Close()
			run := func() error {
				w := &Watchdog{Source: "watchdog-test", Service: "svc", Probe: objectMemory{}, StatePath: state, Inbox: inbox, Log: slog.New(slog.DiscardHandler)}
				_, err := w.Once(context.Background())
				return err
			}
			lines := func() []events.Event {
				evs, err := events.Read(path, time.Time{})
				if err != nil {
					t.Fatal(err)
				}
				return evs
			}
			tc.spoil(state)
			for i := range 2 {
				if err := run(); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("run %d: Once = %v; want the state's error, saying %q", i, err, tc.want)
				}
			}
			evs := lines()
			if len(evs) != 1 || evs[0].Kind != KindStateUnreadable || evs[0].Severity != events.Critical ||
				!strings.Contains(evs[0].Detail, state) || !strings.Contains(evs[0].Detail, tc.want) {
				t.Fatalf("inbox = %+v; want one critical %s line naming %s and saying %q", evs, KindStateUnreadable, state, tc.want)
			}
			os.Remove(state)
			if err := run(); err != nil {
				t.Fatalf("Once with the state removed = %v", err)
			}
			os.Remove(state)
			tc.spoil(state)
			if err := run(); err == nil {
				t.Fatal("Once with the state broken again = nil; want its error")
			}
			if evs := lines(); len(evs) != 2 || evs[1].Kind != KindStateUnreadable {
				t.Errorf("inbox = %+v; want the line again once the state broke anew", evs)
			}
		})
	}
}
