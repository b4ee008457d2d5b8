package proxy

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// presetBundle writes a policy bundle under dir, one file per name (the
// Rego source), and returns its directory.
func presetBundle(tb testing.TB, dir string, files map[string]string) string {
	tb.Helper()
	bundle := filepath.Join(dir, "bundle")
	if err := os.Mkdir(bundle, 0o755); err != nil {
		tb.Fatal(err)
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(bundle, name), []byte(src), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return bundle
}

// presetEngine compiles bundle, quietly.
func presetEngine(tb testing.TB, bundle string) *policies.Engine {
	tb.Helper()
	engine, err := policies.New(context.Background(), policies.Options{Source: policies.Source{Path: bundle}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	return engine
}

// testExe is the test binary's path as the proxy sees a process of it
// (links resolved): what the tests' rules name.
func testExe(tb testing.TB) string {
	tb.Helper()
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return exe
}
