package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/orchestrator/local"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/presets"
	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// The in-process launcher hands a kind's pin to the sandbox, which checks
// it on the file it execs: a binary that is not the pinned one by then (as
// if swapped after the kind's Check, here a pin the file never had) is
// refused at setup, naming the path and both digests, and never runs; the
// pinned one runs.
func TestSpawnLauncherChecksThePinOnTheExecdFile(t *testing.T) {
	testutil.RequireRoot(t, "the in-process spawn launcher (a sandbox)")
	engine, err := policies.New(context.Background(), policies.Options{Source: policies.Source{FS: presets.FS}})
	if err != nil {
		t.Fatal(err)
	}
	l := spawnLauncher{engine: engine, proxy: proxy.Options{CADir: t.TempDir()}, log: slog.Default()}
	raw, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	good, bad := hex.EncodeToString(sum[:]), strings.Repeat("0", 64)
	for i, tc := range []struct {
		name, pin string
		runs      bool
	}{{"swapped", bad, false}, {"pinned", good, true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "airlock-spawnpin-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			os.Chmod(dir, 0o777)
			marker := filepath.Join(dir, "ran")
			sb, err := l.Launch(context.Background(), local.Spec{
				ID: fmt.Sprintf("spawn-pin-%d-%d", os.Getpid(), i), Preset: "reviewer",
				Command: []string{"/bin/sh", "-c", "touch " + marker}, SHA256: tc.pin,
				Dir: dir, RW: []string{dir}, UID: local.DefaultUID, GID: local.DefaultUID,
				Stdout: filepath.Join(dir, "stdout"), Stderr: filepath.Join(dir, "stderr"), Audit: filepath.Join(dir, "audit"),
			})
			if err == nil {
				_, err = sb.Wait()
			}
			_, statErr := os.Stat(marker)
			var se *sandbox.SetupError
			switch {
			case tc.runs && (err != nil || statErr != nil):
				t.Fatalf("the pinned binary: %v (marker: %v); want it run", err, statErr)
			case !tc.runs && (!errors.As(err, &se) || se.Step != "verify pinned binary" ||
				!strings.Contains(se.Err, "/bin/sh has sha256 "+good+", want "+bad)):
				t.Fatalf("a binary that is not the pinned one: %v; want refused naming the path and both digests", err)
			case !tc.runs && statErr == nil:
				t.Fatal("the refused binary ran")
			}
		})
	}
}

// A spawn's local sandbox is not handed a credential its kind's preset has
// the spawn's proxy inject, as `airlock launch --preset` refuses it:
// refused before anything is made.
func TestSpawnLauncherRefusesAHandedSecret(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
	engine, err := policies.New(context.Background(), policies.Options{Source: policies.Source{FS: presets.FS}})
	if err != nil {
		t.Fatal(err)
	}
	l := spawnLauncher{engine: engine, proxy: proxy.Options{CADir: t.TempDir()}, log: slog.Default()}
	for _, tc := range []struct {
		env     []string
		command []string
		want    string
	}{
		{[]string{"KEY=sk-ant-test-0123456789"}, []string{"/bin/true"}, `env KEY: it holds the credential preset "coder"'s rule "anthropic-api" injects`},
		{nil, []string{"/bin/echo", "sk-ant-test-0123456789"}, `argument 1 of the command: it holds the credential preset "coder"'s rule "anthropic-api" injects`},
	} {
		dir := t.TempDir()
		_, err = l.Launch(context.Background(), local.Spec{ID: "handed", Preset: "coder", Command: tc.command, Dir: "/",
			UID: 61000, GID: 61000, Env: tc.env, Stdout: dir + "/out", Stderr: dir + "/err", Audit: dir + "/audit"})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("Launch %q, env %q = %v; want the handed credential refused", tc.command, tc.env, err)
		}
		if _, err := os.Stat(dir + "/out"); !os.IsNotExist(err) {
			t.Errorf("the sandbox's output was made before the refusal: %v", err)
		}
	}
}
