package watchdogs

import (
	"context"
	"log/slog"
	"path/filepath"
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
