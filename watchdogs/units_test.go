package watchdogs

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// testUnits runs this test binary in place of airlock: systemd-analyze
// verify checks that ExecStart= names an executable that exists.
func testUnits(t *testing.T) Units {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Units{
		Airlock:  exe,
		Manifest: "/etc/airlock/pod 100%.yaml",
		LogDir:   "/var/log/airlock",
		StateDir: "/var/lib/airlock",
		Args:     []string{"--admin-socket", "/var/lib/airlock/my pod/admin.sock", "$HOME"},
	}
}

// verify runs systemd-analyze verify on the units written in dir. It exits
// 0 on a setting it cannot parse (it ignores the line and says so), so
// any output is a failure too: it says nothing of a unit that is sound.
func verify(t *testing.T, dir string, files []File) string {
	t.Helper()
	analyze := testutil.RequireTool(t, "systemd-analyze")
	args := []string{"verify", "--man=no"}
	for _, f := range files {
		p := filepath.Join(dir, f.Name)
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, p)
	}
	out, err := exec.Command(analyze, args...).CombinedOutput()
	if err != nil {
		return string(out) + err.Error()
	}
	return string(out)
}

func TestSystemdUnitsVerify(t *testing.T) {
	files, err := testUnits(t).Systemd()
	if err != nil {
		t.Fatal(err)
	}
	if out := verify(t, t.TempDir(), files); out != "" {
		t.Fatalf("systemd-analyze verify:\n%s", out)
	}
}

// The check can fail: a unit broken each way is reported.
func TestSystemdVerifyCatchesBrokenUnits(t *testing.T) {
	for _, tc := range []struct {
		name, file, line, broken string
	}{
		{"unknown type", PodUnit, "Type=notify", "Type=notifyy"},
		{"bad watchdog", PodUnit, "WatchdogSec=120s", "WatchdogSec=two minutes"},
		{"missing binary", PodUnit, "ExecStart=", "ExecStart=/nonexistent/airlock up #"},
		{"bad timer", "airlock-watchdog-shim.timer", "OnUnitActiveSec=5m0s", "OnUnitActiveSec=five"},
		{"misspelt directive", "airlock-watchdog-shim.service", "Type=oneshot", "Typ=oneshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := testUnits(t).Systemd()
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for i, f := range files {
				if f.Name == tc.file && strings.Contains(string(f.Data), "\n"+tc.line) {
					files[i].Data = []byte(strings.Replace(string(f.Data), "\n"+tc.line, "\n"+tc.broken+"\n#", 1))
					found = true
				}
			}
			if !found {
				t.Fatalf("%s has no line %q", tc.file, tc.line)
			}
			if out := verify(t, t.TempDir(), files); out == "" {
				t.Errorf("systemd-analyze verify says nothing of %s with %q", tc.file, tc.broken)
			}
		})
	}
}

// The settings the issue asks for, as written.
func TestSystemdUnitSettings(t *testing.T) {
	u := testUnits(t)
	u.StopGrace = 45 * time.Second
	files, err := u.Systemd()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range files {
		got[f.Name] = string(f.Data)
	}
	exe := u.Airlock
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"airlock-watchdog-shim.service", []string{"\nType=oneshot\n", "\nSuccessExitStatus=75\n",
			"\nExecStart=" + exe + ` watchdog shim --once --state /var/lib/airlock/watchdog-shim.json --admin-socket "/var/lib/airlock/my pod/admin.sock" $$HOME` + "\n"}},
		{"airlock-watchdog-shim.timer", []string{"\nOnBootSec=5m0s\n", "\nOnUnitActiveSec=5m0s\n", "\nWantedBy=timers.target\n"}},
		{PodUnit, []string{
			"\nType=notify\n", "\nNotifyAccess=main\n", "\nWatchdogSec=120s\n", "\nRestart=on-failure\n", "\nRestartSec=5s\n",
			"\nDelegate=yes\n", "\nKillMode=mixed\n", "\nTimeoutStopSec=75s\n", "\nNoNewPrivileges=yes\n",
			"\nExecStart=" + exe + ` up "/etc/airlock/pod 100%%.yaml"` + "\n", "\nWantedBy=multi-user.target\n",
		}},
	} {
		for _, w := range tc.want {
			if !strings.Contains(got[tc.file], w) {
				t.Errorf("%s lacks %q:\n%s", tc.file, w, got[tc.file])
			}
		}
	}
	if len(files) != 2*len(Watched)+1 {
		t.Errorf("Systemd() wrote %d units; want a service and timer per watchdog and the pod's", len(files))
	}
	// Watchdogs of a plain process (a restart command): no pod to run.
	u.Manifest, u.NoPod = "", true
	if files, err = u.Systemd(); err != nil || len(files) != 2*len(Watched) || slices.ContainsFunc(files, func(f File) bool { return f.Name == PodUnit }) {
		t.Errorf("Systemd() with NoPod wrote %d units, %v; want a service and timer per watchdog, and no pod's", len(files), err)
	}
	// The pod pings at half WatchdogSec: it must stay well above the
	// supervisor's own recovery (see DefaultPodWatchdog).
	if DefaultPodWatchdog < time.Minute {
		t.Errorf("DefaultPodWatchdog = %v; want at least a minute", DefaultPodWatchdog)
	}
}

func TestUnitsRefuseWhatWouldNotRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		u    Units
		want string
	}{
		{"relative binary", Units{Airlock: "bin/airlock"}, `"bin/airlock" is not an absolute path`},
		{"no binary", Units{}, "path is empty"},
		{"relative manifest", Units{Airlock: "/a", Manifest: "pod.yaml"}, `"pod.yaml" is not an absolute path`},
		{"line break", Units{Airlock: "/a", Args: []string{"x\nExecStartPre=/bin/evil"}}, "line break"},
		// XML has no other control characters, and its encoder would
		// put U+FFFD in their place: launchd would run another argument.
		{"control character", Units{Airlock: "/a", Args: []string{"--restart-cmd=a\x1bb"}}, "control character"},
		{"not UTF-8", Units{Airlock: "/a", Args: []string{"--restart-cmd=a\xffb"}}, "not UTF-8"},
		{"a manifest, no pod", Units{Airlock: "/a", StateDir: "/s", Manifest: "/pod.yaml", NoPod: true}, "no pod's unit to run it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.u.Systemd(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Systemd() = %v; want %q", err, tc.want)
			}
			if _, err := tc.u.Launchd(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Launchd() = %v; want %q", err, tc.want)
			}
		})
	}
}
