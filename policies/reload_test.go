package policies_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

type reloadEvent struct {
	hash string
	err  error
}

// watched starts an engine on a copy of the presets with Watch running and
// returns a channel of reload outcomes.
func watched(t *testing.T, quarantine bool) (*policies.Engine, string, <-chan reloadEvent) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bundle")
	writeBundle(t, dir, nil)
	events := make(chan reloadEvent, 16)
	e, err := policies.New(context.Background(), policies.Options{
		Source:     policies.Source{Path: dir},
		Quarantine: quarantine,
		Logger:     discard(),
		OnReload:   func(h string, err error) { events <- reloadEvent{h, err} },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ended, err := e.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-ended; err != nil {
			t.Errorf("Watch ended: %v", err)
		}
	})
	// The watches are in place: a touch is a reload.
	waitReload(t, events, func() { touch(t, filepath.Join(dir, "strict.rego")) }, succeeded)
	return e, dir, events
}

func touch(t *testing.T, p string) {
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitReload repeats poke until a reload outcome satisfying want is
// reported (earlier outcomes, e.g. of a previous poke, are skipped), for at
// most 10s.
func waitReload(t *testing.T, events <-chan reloadEvent, poke func(), want func(reloadEvent) bool) reloadEvent {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	poke()
	for {
		select {
		case ev := <-events:
			if want(ev) {
				return ev
			}
		case <-tick.C:
			poke()
		case <-deadline:
			t.Fatal("no matching reload reported within 10s")
		}
	}
}

func failed(ev reloadEvent) bool    { return ev.err != nil }
func succeeded(ev reloadEvent) bool { return ev.err == nil }

func writerModel() *policies.Input {
	return &policies.Input{
		Sandbox: policies.Sandbox{Preset: "writer"},
		Process: policies.Process{Exe: "/usr/bin/node"},
		Request: policies.Request{Phase: policies.PhaseConnect, Host: "api.anthropic.com", Port: 443},
	}
}

func TestReloadRejectsBrokenEditAndKeepsServing(t *testing.T) {
	e, dir, events := watched(t, false)
	ctx := context.Background()
	good := e.Hash()
	if d := e.Decide(ctx, writerModel()); !d.Allow {
		t.Fatalf("before the edit: %+v", d)
	}

	// A broken edit: the writer preset loses its closing bracket.
	p := filepath.Join(dir, "writer.rego")
	raw, _ := os.ReadFile(p)
	broken := strings.Replace(string(raw), "rules := [common.anthropic_api(common.claude)]", "rules := [common.anthropic_api(common.claude)", 1)
	ev := waitReload(t, events, func() { os.WriteFile(p, []byte(broken), 0o644) }, failed)
	if ev.err == nil || !strings.Contains(ev.err.Error(), "writer.rego") {
		t.Fatalf("reload of a broken edit reported %v; want a parse error naming writer.rego", ev.err)
	}
	if d := e.Decide(ctx, writerModel()); !d.Allow || d.Policy != good || e.Hash() != good {
		t.Fatalf("after a broken edit: %+v (hash %s); want the last good generation %s serving", d, e.Hash(), good)
	}

	// A valid edit that removes the rule: the new generation takes over.
	edited := strings.Replace(string(raw), "rules := [common.anthropic_api(common.claude)]", "rules := []", 1)
	ev = waitReload(t, events, func() { os.WriteFile(p, []byte(edited), 0o644) }, func(ev reloadEvent) bool { return ev.err == nil && ev.hash != good })
	if ev.err != nil || ev.hash == good {
		t.Fatalf("reload of a valid edit = %+v", ev)
	}
	if d := e.Decide(ctx, writerModel()); d.Allow || d.Reason != policies.ReasonHostNotAllowed || d.Policy != ev.hash {
		t.Fatalf("after a valid edit: %+v; want host_not_allowed from %s", d, ev.hash)
	}
}

func TestReloadQuarantineDeniesUntilFixed(t *testing.T) {
	e, dir, events := watched(t, true)
	ctx := context.Background()
	p := filepath.Join(dir, "writer.rego")
	raw, _ := os.ReadFile(p)
	ev := waitReload(t, events, func() { os.WriteFile(p, append(raw, []byte("\nnot rego at all (\n")...), 0o644) }, failed)
	if ev.err == nil {
		t.Fatal("broken edit was accepted")
	}
	if d := e.Decide(ctx, writerModel()); d.Allow || d.Reason != policies.ReasonPolicyQuarantined {
		t.Fatalf("quarantined engine decided %+v; want policy_quarantined", d)
	}
	waitReload(t, events, func() { os.WriteFile(p, raw, 0o644) }, succeeded)
	if d := e.Decide(ctx, writerModel()); !d.Allow {
		t.Fatalf("after the fix: %+v; want allowed", d)
	}
}

func TestReloadRefusesEditThatBreaksTheLock(t *testing.T) {
	dir, b := lockedBundle(t)
	e, err := policies.New(context.Background(), policies.Options{Source: policies.Source{Path: dir}, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "writer.rego")
	raw, _ := os.ReadFile(p)
	os.WriteFile(p, []byte(strings.Replace(string(raw), "rules := [common.anthropic_api(common.claude)]", "rules := []", 1)), 0o644)
	if err := e.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "changed writer.rego") {
		t.Fatalf("Reload of an edit not in the lock = %v; want an integrity error", err)
	}
	if d := e.Decide(context.Background(), writerModel()); !d.Allow || e.Hash() != b.Hash() {
		t.Fatalf("after a rejected reload: %+v", d)
	}
	// Re-locking (the reviewer's approval) lets the edit in.
	edited, _ := policies.LoadBundle(policies.Source{Path: dir}, nil)
	policies.WriteLock(filepath.Join(dir, policies.LockFileName), policies.NewLock(edited))
	if err := e.Reload(context.Background()); err != nil || e.Hash() != edited.Hash() {
		t.Fatalf("Reload after re-lock = %v (hash %s)", err, e.Hash())
	}
	// Deleting the lock is no way around it: once enforced, it is needed.
	// (A stale lock that failed its load is not enforced: see
	// TestStaleLockIsNotRequired.)
	os.WriteFile(p, []byte("# another edit\n"+string(raw)), 0o644)
	os.Remove(filepath.Join(dir, policies.LockFileName))
	if err := e.Reload(context.Background()); !errors.Is(err, policies.ErrIntegrity) || !strings.Contains(err.Error(), "is gone") || e.Hash() != edited.Hash() {
		t.Fatalf("Reload with the lock deleted = %v (hash %s); want an integrity error, the locked generation kept", err, e.Hash())
	}
}

// A preset being served is part of what a reload must keep: a bundle that
// no longer has it is rejected as it would be at start-up, and the last
// good generation keeps deciding that preset's traffic.
func TestReloadRejectsBundleLackingServedPreset(t *testing.T) {
	e, dir, events := watched(t, false)
	ctx := context.Background()
	if err := e.RequirePreset("nosuch"); err == nil || !strings.Contains(err.Error(), `no preset "nosuch"`) {
		t.Fatalf("RequirePreset of a preset the policy lacks = %v", err)
	}
	if err := e.RequirePreset("writer"); err != nil {
		t.Fatal(err)
	}
	good := e.Hash()
	ev := waitReload(t, events, func() {
		os.Remove(filepath.Join(dir, "writer.rego"))
		os.Remove(filepath.Join(dir, "writer_test.rego"))
	}, failed)
	if !strings.Contains(ev.err.Error(), "lacks served preset(s) [writer]") {
		t.Fatalf("reload without the served preset reported %v; want it named", ev.err)
	}
	if d := e.Decide(ctx, writerModel()); !d.Allow || d.Policy != good || e.Hash() != good {
		t.Fatalf("after the preset was removed: %+v (hash %s); want the last good generation %s serving", d, e.Hash(), good)
	}
}

// Options.Check vets every generation: its error refuses New, and rejects
// a reload while the last good generation keeps serving. The proxy uses it
// to report a preset injecting a secret it does not hold.
func TestCheckVetsEveryGeneration(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bundle")
	writeBundle(t, dir, nil)
	missing := errors.New("the proxy lacks ANTHROPIC_API_KEY")
	var refuse bool
	var saw []string
	opts := policies.Options{Source: policies.Source{Path: dir}, Logger: discard(), Check: func(ps []policies.Preset) error {
		saw = saw[:0]
		for _, p := range ps {
			if p.Name == "writer" && len(p.Rules) > 0 {
				saw = append(saw, p.Rules[0].Inject["x-api-key"].Env)
			}
		}
		if refuse {
			return missing
		}
		return nil
	}}
	ctx := context.Background()
	e, err := policies.New(ctx, opts)
	if err != nil || len(saw) != 1 || saw[0] != "ANTHROPIC_API_KEY" {
		t.Fatalf("New = %v; Check saw the writer's injected env %v", err, saw)
	}
	refuse = true
	if err := e.Reload(ctx); !errors.Is(err, missing) {
		t.Fatalf("Reload = %v; want the check's error", err)
	}
	if d := e.Decide(ctx, writerModel()); !d.Allow {
		t.Fatalf("after a rejected reload: %+v; want the last good generation serving", d)
	}
	if _, err := policies.New(ctx, opts); !errors.Is(err, missing) {
		t.Fatalf("New = %v; want the check's error", err)
	}
}

// A bundle directory replaced whole (the old one renamed away, a new one
// put in its place, as a deploy does) is watched again, and the
// old tree's watches go: a deploy a day must not add a kernel watch per
// directory each time.
func TestReloadFollowsABundleReplacedWhole(t *testing.T) {
	_, dir, events := watched(t, false)
	// A tree: the watch of a directory moved along with its parent
	// stays unless dropped.
	nested := map[string]string{"extra/extra.rego": "package airlock.extra\n\nanswer := 42\n"}
	waitReload(t, events, func() { writeBundle(t, dir, nested) }, succeeded)
	before := inotifyWatches(t)
	for i := range 3 {
		if err := os.Rename(dir, fmt.Sprintf("%s.old%d", dir, i)); err != nil {
			t.Fatal(err)
		}
		writeBundle(t, dir, nested)
		waitReload(t, events, func() { touch(t, filepath.Join(dir, "strict.rego")) }, succeeded)
		// Watched again, not only reloaded once: a later edit reloads too.
		waitReload(t, events, func() { touch(t, filepath.Join(dir, "strict.rego")) }, succeeded)
	}
	if after := inotifyWatches(t); after != before {
		t.Errorf("inotify watches went from %d to %d over three replacements; want the old trees' dropped", before, after)
	}
}

// inotifyWatches counts this process's inotify watches.
func inotifyWatches(t *testing.T) int {
	t.Helper()
	infos, err := filepath.Glob("/proc/self/fdinfo/*")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range infos {
		raw, err := os.ReadFile(p)
		if err == nil {
			n += strings.Count(string(raw), "inotify wd:")
		}
	}
	return n
}

// A bundle directory that goes and does not come back ends the watch with
// an error that says so: its caller must learn that edits no longer
// reload (the pod's policy_watch_failed).
func TestWatchEndsWhenTheBundleIsGoneForGood(t *testing.T) {
	defer policies.SetRewatchWait(500 * time.Millisecond)()
	dir := filepath.Join(t.TempDir(), "bundle")
	writeBundle(t, dir, nil)
	e, err := policies.New(context.Background(), policies.Options{Source: policies.Source{Path: dir}, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended, err := e.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if err == nil || !strings.Contains(err.Error(), "went and is not back") {
			t.Fatalf("the watch ended with %v; want an error saying the bundle went", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end within 10s of the bundle going for good")
	}
}

// unlockedEngine is an engine of the presets in a directory of their own,
// with no lock file, not watched.
func unlockedEngine(t *testing.T) (*policies.Engine, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bundle")
	writeBundle(t, dir, nil)
	e, err := policies.New(context.Background(), policies.Options{Source: policies.Source{Path: dir}, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	return e, dir
}

// A lock that failed its load (a stale one copied in) was never enforced:
// once it is removed, a reload goes on without one, as before it came.
func TestStaleLockIsNotRequired(t *testing.T) {
	e, dir := unlockedEngine(t)
	ctx := context.Background()
	now, err := policies.LoadBundle(policies.Source{Path: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	policies.WriteLock(filepath.Join(dir, policies.LockFileName), policies.NewLock(now))
	p := filepath.Join(dir, "writer.rego")
	raw, _ := os.ReadFile(p)
	os.WriteFile(p, append([]byte("# an edit the lock predates\n"), raw...), 0o644)
	if err := e.Reload(ctx); !errors.Is(err, policies.ErrIntegrity) {
		t.Fatalf("Reload with a stale lock = %v; want an integrity error", err)
	}
	os.Remove(filepath.Join(dir, policies.LockFileName))
	if err := e.Reload(ctx); err != nil {
		t.Fatalf("Reload with the stale lock gone = %v; want it loaded", err)
	}
}

// A lock read by a load the engine then rejected (it lacks a served
// preset) was never in force: once it is removed, a reload goes on
// without one.
func TestRejectedLoadsLockIsNotRequired(t *testing.T) {
	e, dir := unlockedEngine(t)
	ctx := context.Background()
	if err := e.RequirePreset("writer"); err != nil {
		t.Fatal(err)
	}
	writer, _ := os.ReadFile(filepath.Join(dir, "writer.rego"))
	os.Remove(filepath.Join(dir, "writer.rego"))
	os.Remove(filepath.Join(dir, "writer_test.rego"))
	without, err := policies.LoadBundle(policies.Source{Path: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	policies.WriteLock(filepath.Join(dir, policies.LockFileName), policies.NewLock(without))
	if err := e.Reload(ctx); err == nil || !strings.Contains(err.Error(), "lacks served preset") {
		t.Fatalf("Reload without the served preset = %v; want it rejected", err)
	}
	os.WriteFile(filepath.Join(dir, "writer.rego"), writer, 0o644)
	os.Remove(filepath.Join(dir, policies.LockFileName))
	if err := e.Reload(ctx); err != nil {
		t.Fatalf("Reload with the preset back and no lock = %v; want it loaded", err)
	}
}
