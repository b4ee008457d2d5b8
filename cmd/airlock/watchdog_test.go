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
		// What comes after -- is checked as each watchdog checks its
		// command line: a unit that could never run is not written.
		{"nothing after --", []string{"--systemd", "--dir", dir}, "give exactly one of --admin-socket"},
		{"no inbox", []string{"--systemd", "--dir", dir, "--", "--admin-socket", "/run/pod.sock"}, "--inbox is required"},
		{"no such log level", []string{"--systemd", "--dir", dir, "--", "--admin-socket", "/run/pod.sock", "--inbox", "/i", "--log-level", "loud"}, "--log-level: slog: level string \"loud\": unknown name"},
		{"the unit's --state", []string{"--systemd", "--dir", dir, "--", "--admin-socket", "/run/pod.sock", "--inbox", "/i", "--state", "/s.json"}, "--state after --: the unit runs the gateway watchdog with --once --state /var/lib/airlock/watchdog-gateway.json itself"},
		{"the unit's --once", []string{"--launchd", "--dir", dir, "--", "--admin-socket", "/run/pod.sock", "--inbox", "/i", "--once"}, "--once after --"},
		{"a daemon's --interval", []string{"--systemd", "--dir", dir, "--", "--admin-socket", "/run/pod.sock", "--inbox", "/i", "--interval", "10s"}, "--interval after --"},
		{"a daemon's --metrics", []string{"--systemd", "--dir", dir, "--", "--admin-socket", "/run/pod.sock", "--inbox", "/i", "--metrics", "127.0.0.1:9100"}, "--metrics is a daemon's"},
		{"one textfile for two watchdogs", []string{"--systemd", "--dir", dir, "--", "--admin-socket", "/run/pod.sock", "--inbox", "/i", "--textfile", "/t.prom"}, "--textfile after -- would go to every watchdog installed (gateway and shim)"},
		{"one restart command for two watchdogs", []string{"--systemd", "--dir", dir, "--", "--restart-cmd", "start", "--pid-file", "/p", "--inbox", "/i"}, "--restart-cmd after -- would go to every watchdog"},
		{"the gateway's flag to the shim", []string{"--systemd", "--dir", dir, "--watchdog", "shim", "--", "--admin-socket", "/run/pod.sock", "--inbox", "/i", "--heap-mb", "512"}, "the shim watchdog's arguments after --: unknown flag: --heap-mb"},
		{"a word that is no flag", []string{"--systemd", "--dir", dir, "--", "--admin-socket", "/run/pod.sock", "--inbox", "/i", "gateway"}, `"gateway" is not a flag`},
		// A unit runs from /: a relative path would be another file.
		{"a relative --inbox", []string{"--systemd", "--dir", dir, "--", "--admin-socket", "/run/pod.sock", "--inbox", "inbox.jsonl"}, `--inbox "inbox.jsonl" after --: want an absolute path`},
		{"a relative --admin-socket", []string{"--systemd", "--dir", dir, "--", "--admin-socket", "pod.sock", "--inbox", "/i"}, `--admin-socket "pod.sock" after --: want an absolute path`},
		{"a relative --pid-file", []string{"--systemd", "--dir", dir, "--watchdog", "shim", "--", "--restart-cmd", "start", "--pid-file", "shim.pid", "--inbox", "/i"}, `--pid-file "shim.pid" after --: want an absolute path`},
		{"a relative --log", []string{"--systemd", "--dir", dir, "--watchdog", "gateway", "--", "--restart-cmd", "start", "--pid-file", "/p", "--log", "gw.log", "--inbox", "/i"}, `--log "gw.log" after --: want an absolute path`},
		{"a relative --cgroup", []string{"--systemd", "--dir", dir, "--watchdog", "gateway", "--", "--restart-cmd", "start", "--pid-file", "/p", "--cgroup", "gw", "--inbox", "/i"}, `--cgroup "gw" after --: want an absolute path`},
		{"a relative --textfile", []string{"--launchd", "--dir", dir, "--watchdog", "shim", "--", "--admin-socket", "/run/pod.sock", "--inbox", "/i", "--textfile", "w.prom"}, `--textfile "w.prom" after --: want an absolute path`},
		{"a pod's unit for a plain process", []string{"--systemd", "--dir", dir, "--watchdog", "gateway", "--pod-watchdog", "1m", "--", "--restart-cmd", "start", "--pid-file", "/p", "--inbox", "/i"}, "--restart-cmd says they watch a plain process"},
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
	code, out, errs := airlock(t, "", "watchdog", "install", "--systemd", "--dir", dir, "--", "--admin-socket", "/run/pod.sock", "--inbox", "/run/inbox.jsonl")
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
	if want := "\nExecStart=" + exe + " watchdog shim --once --state /var/lib/airlock/watchdog-shim.json --admin-socket /run/pod.sock --inbox /run/inbox.jsonl\n"; !strings.Contains(string(raw), want) {
		t.Errorf("the shim's service lacks %q:\n%s", want, raw)
	}
	// The unit's command line is one the command takes: run (its state
	// file in the test's directory), it may fail to recover a shim that is
	// not there, but not as a usage error.
	inbox := filepath.Join(t.TempDir(), "agent-inbox.jsonl")
	if code, out, errs := airlock(t, "", "watchdog", "install", "--systemd", "--force", "--dir", dir, "--",
		"--admin-socket", "/run/pod.sock", "--inbox", inbox, "--probe-timeout", "1s", "--log-level", "debug"); code != ExitOK {
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

	// One watchdog alone: a plain process's, with its own arguments. No
	// airlock pod runs it: no pod unit, none to enable.
	one := t.TempDir()
	code, out, errs = airlock(t, "", "watchdog", "install", "--systemd", "--dir", one, "--watchdog", "gateway", "--",
		"--restart-cmd", "start-gw", "--pid-file", "/run/gw.pid", "--inbox", "/run/inbox.jsonl")
	if code != ExitOK {
		t.Fatalf("install --watchdog gateway = %d\n%s%s", code, out, errs)
	}
	if entries, _ := os.ReadDir(one); len(entries) != 2 || entries[0].Name() != "airlock-watchdog-gateway.service" || entries[1].Name() != "airlock-watchdog-gateway.timer" {
		t.Errorf("install --watchdog gateway wrote %v; want the gateway's two units, and no pod's", entries)
	}
	if want := "enable --now airlock-watchdog-gateway.timer\n"; !strings.Contains(out, want) || strings.Contains(out, watchdogs.PodUnit) {
		t.Errorf("install --watchdog gateway says:\n%s\nwant %q, and no pod unit", out, want)
	}

	// Another socket: the units differ, so they are refused, then forced.
	other := []string{"--", "--admin-socket", "/run/other.sock", "--inbox", "/run/inbox.jsonl"}
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
	if forced, _ := os.ReadFile(filepath.Join(dir, "airlock-watchdog-shim.service")); !strings.Contains(string(forced), "--admin-socket /run/other.sock --inbox /run/inbox.jsonl\n") {
		t.Errorf("install --force left the unit as it was:\n%s", forced)
	}
}
