package kind_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/orchestrator/kind"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/presets"
)

// shippedKinds are the seven kinds of the design, shipped as examples.
var shippedKinds = map[string]string{
	"coder": kind.Local, "researcher": kind.Local, "writer": kind.Local, "reviewer": kind.Local,
	"fitness": kind.Local, "codex": kind.Git, "opencode": kind.Git,
}

// embeddedEngine is the engine over the embedded presets, as `airlock`
// opens it without --policy.
func embeddedEngine(t *testing.T) *policies.Engine {
	t.Helper()
	e, err := policies.New(context.Background(), policies.Options{
		Source: policies.Source{FS: presets.FS},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("policies.New(embedded): %v", err)
	}
	return e
}

// TestShippedKinds loads every shipped kind, checks its preset against the
// embedded bundle (the binaries are not installed here), and renders it.
func TestShippedKinds(t *testing.T) {
	const dir = "../kinds"
	names, err := kind.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]string, 0, len(shippedKinds))
	for n := range shippedKinds {
		want = append(want, n)
	}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("List(%s) = %v, want %v", dir, names, want)
	}
	e := embeddedEngine(t)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			k, err := kind.Load(dir, name)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if k.Preset != name {
				t.Errorf("preset = %q, want the kind's own %q", k.Preset, name)
			}
			if k.Substrate != shippedKinds[name] {
				t.Errorf("substrate = %q, want %q", k.Substrate, shippedKinds[name])
			}
			if err := k.CheckPreset(e); err != nil {
				t.Errorf("CheckPreset: %v", err)
			}
			p, err := k.RenderPrompt(kind.Task{ID: "20261123-190102-3f9a2c", Kind: name, Text: "THE TASK"})
			if err != nil || !containsAll(p, "THE TASK", "20261123-190102-3f9a2c") {
				t.Errorf("RenderPrompt = %q, %v; want the task's text and id in it", p, err)
			}
			if _, err := k.RenderArgs(kind.ArgVars{ID: "x", Dir: "/d", PromptFile: "/d/prompt.txt", TaskFile: "/d/task"}); err != nil {
				t.Errorf("RenderArgs: %v", err)
			}
		})
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestREADMEKind: the kind the README shows loads as written.
func TestREADMEKind(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(raw), "```yaml\nname: reviewer ")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("README.md shows no kind (a yaml block starting name: reviewer)")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "reviewer.yaml"), []byte("name: reviewer "+block), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := kind.Load(dir, "reviewer")
	if err != nil {
		t.Fatalf("README's kind: %v", err)
	}
	if err := k.CheckPreset(embeddedEngine(t)); err != nil {
		t.Errorf("README's kind: %v", err)
	}
}
