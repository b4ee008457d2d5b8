package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/watchdogs"
)

func TestWatchdogInstallUsageErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: x\nnosuch: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A binary its group may replace: the units would run theirs.
	open := filepath.Join(t.TempDir(), "airlock")
	if err := os.WriteFile(open, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o775)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"neither init system", nil, "--systemd or --launchd"},
		{"both init systems", []string{"--systemd", "--launchd"}, "--systemd or --launchd"},
		{"relative --dir", []string{"--systemd", "--dir", "units"}, `--dir "units": want an absolute path`},
		{"relative --airlock", []string{"--systemd", "--dir", dir, "--airlock", "bin/airlock"}, `--airlock "bin/airlock": want an absolute path`},
		{"relative --log-dir", []string{"--launchd", "--dir", dir, "--log-dir", "logs"}, `--log-dir "logs": want an absolute path`},
		{"a manifest for launchd", []string{"--launchd", "--dir", dir, "--manifest", bad}, "launchd gets no pod"},
		{"a log dir for systemd", []string{"--systemd", "--dir", dir, "--log-dir", dir}, "--log-dir is for launchd"},
		{"no watchdog interval", []string{"--systemd", "--dir", dir, "--pod-watchdog", "0s"}, "--pod-watchdog 0s"},
		{"an argument before --", []string{"--systemd", "--dir", dir, "gateway"}, `arguments come after --: "gateway"`},
		{"an unknown watchdog", []string{"--systemd", "--dir", dir, "--watchdog", "gatway"}, `--watchdog "gatway": there are gateway and shim`},
		{"a manifest the pod could not boot", []string{"--systemd", "--dir", dir, "--manifest", bad}, "nosuch"},
		{"a binary others may write", []string{"--systemd", "--dir", dir, "--airlock", open}, "mode 0775 is writable by group or others"},
		{"no binary there", []string{"--systemd", "--dir", dir, "--airlock", filepath.Join(dir, "none")}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := airlock(t, "", append([]string{"watchdog", "install"}, tc.args...)...)
			if code != ExitUsage || !strings.Contains(errs, tc.want) {
				t.Errorf("airlock watchdog install %v = %d, %q; want %d, %q\n%s", tc.args, code, errs, ExitUsage, tc.want, out)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("a usage error wrote into %s: %v", dir, entries)
			}
		})
	}
}

// What install writes, with this binary's path, and what it refuses to
// overwrite.
func TestWatchdogInstall(t *testing.T) {
	dir := t.TempDir()
	exe, err := thisExecutable()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := airlock(t, "", "watchdog", "install", "--systemd", "--dir", dir, "--", "--admin-socket", "/run/pod.sock")
	if code != ExitOK {
		t.Fatalf("install = %d\n%s%s", code, out, errs)
	}
	for _, name := range []string{"airlock-pod.service", "airlock-watchdog-gateway.service", "airlock-watchdog-gateway.timer", "airlock-watchdog-shim.service", "airlock-watchdog-shim.timer"} {
		p := filepath.Join(dir, name)
		if !strings.Contains(out, "wrote     "+p+"\n") {
			t.Errorf("stdout does not say %s was written:\n%s", p, out)
		}
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "airlock-watchdog-shim.service"))
	if want := "\nExecStart=" + exe + " watchdog shim --once --state /var/lib/airlock/watchdog-shim.json --admin-socket /run/pod.sock\n"; !strings.Contains(string(raw), want) {
		t.Errorf("the shim's service lacks %q:\n%s", want, raw)
	}
	// The unit's command line is one the command takes: run (its state
	// file in the test's directory), it may fail to recover a shim that is
	// not there, but not as a usage error.
	inbox := filepath.Join(t.TempDir(), "agent-inbox.jsonl")
	if code, out, errs := airlock(t, "", "watchdog", "install", "--systemd", "--force", "--dir", dir, "--",
		"--admin-socket", "/run/pod.sock", "--url", "http://127.0.0.1:9/v1/models", "--inbox", inbox); code != ExitOK {
		t.Fatalf("install = %d\n%s%s", code, out, errs)
	}
	for _, name := range watchdogs.Watched {
		unit, _ := os.ReadFile(filepath.Join(dir, "airlock-watchdog-"+name+".service"))
		_, line, _ := strings.Cut(string(unit), "\nExecStart=")
		line, _, _ = strings.Cut(line, "\n")
		words := strings.Fields(line)[1:]
		for i, w := range words {
			if w == "--state" {
				words[i+1] = filepath.Join(t.TempDir(), "state.json")
			}
		}
		if code, out, errs := airlock(t, "", words...); code == ExitUsage {
			t.Errorf("the unit's command line %q is a usage error:\n%s%s", line, out, errs)
		}
	}
	raw, _ = os.ReadFile(filepath.Join(dir, "airlock-watchdog-shim.service"))

	// One watchdog alone: a plain process's, with its own arguments.
	one := t.TempDir()
	if code, out, errs := airlock(t, "", "watchdog", "install", "--systemd", "--dir", one, "--watchdog", "gateway", "--", "--restart-cmd", "start-gw"); code != ExitOK {
		t.Fatalf("install --watchdog gateway = %d\n%s%s", code, out, errs)
	}
	if entries, _ := os.ReadDir(one); len(entries) != 3 || entries[0].Name() != "airlock-pod.service" || entries[1].Name() != "airlock-watchdog-gateway.service" || entries[2].Name() != "airlock-watchdog-gateway.timer" {
		t.Errorf("install --watchdog gateway wrote %v; want the pod's unit and the gateway's two", entries)
	}

	// Another socket: the units differ, so they are refused, then forced.
	other := []string{"--", "--admin-socket", "/run/other.sock"}
	args := append([]string{"watchdog", "install", "--systemd", "--dir", dir}, other...)
	if code, out, errs := airlock(t, "", args...); code != ExitError || !strings.Contains(errs, "exists with other content (--force replaces it)") {
		t.Errorf("install over other units = %d, %q; want %d and a refusal\n%s", code, errs, ExitError, out)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "airlock-watchdog-shim.service")); string(after) != string(raw) {
		t.Errorf("a refused install changed the unit:\n%s", after)
	}
	if code, out, errs := airlock(t, "", append([]string{"watchdog", "install", "--systemd", "--dir", dir, "--force"}, other...)...); code != ExitOK {
		t.Errorf("install --force = %d\n%s%s", code, out, errs)
	}
	if forced, _ := os.ReadFile(filepath.Join(dir, "airlock-watchdog-shim.service")); !strings.Contains(string(forced), "--admin-socket /run/other.sock\n") {
		t.Errorf("install --force left the unit as it was:\n%s", forced)
	}
}
