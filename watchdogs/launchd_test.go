package watchdogs

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// readPlist parses a plist with Python's plistlib, the reader of another
// implementation, and returns it as JSON.
func readPlist(t *testing.T, path string) (map[string]any, error) {
	t.Helper()
	python := testutil.RequireTool(t, "python3")
	const read = `import json, plistlib, sys
with open(sys.argv[1], "rb") as f:
    print(json.dumps(plistlib.load(f)))`
	out, err := exec.Command(python, "-c", read, path).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("plistlib.load(%s): %w: %s", path, err, out)
	}
	var m map[string]any
	return m, json.Unmarshal(out, &m)
}

func TestLaunchdPlistsParse(t *testing.T) {
	u := testUnits(t)
	u.Args = append(u.Args, `<&"'>`)
	files, err := u.Launchd()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(Watched) {
		t.Fatalf("Launchd() wrote %d plists; want one per watchdog", len(files))
	}
	dir := t.TempDir()
	for i, name := range Watched {
		f := files[i]
		if want := "io.github.airlock-sandbox.airlock-watchdog-" + name + ".plist"; f.Name != want {
			t.Errorf("plist %d is %s; want %s", i, f.Name, want)
		}
		p := filepath.Join(dir, f.Name)
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readPlist(t, p)
		if err != nil {
			t.Fatalf("%s does not parse: %v\n%s", f.Name, err, f.Data)
		}
		want := map[string]any{
			"Label":             "io.github.airlock-sandbox.airlock-watchdog-" + name,
			"ProgramArguments":  []any{u.Airlock, "watchdog", name, "--once", "--state", "/var/lib/airlock/watchdog-" + name + ".json", "--admin-socket", "/var/lib/airlock/my pod/admin.sock", "$HOME", `<&"'>`},
			"RunAtLoad":         true,
			"StartInterval":     300.0,
			"KeepAlive":         map[string]any{"Crashed": true},
			"ThrottleInterval":  30.0,
			"StandardOutPath":   "/var/log/airlock/airlock-watchdog-" + name + ".log",
			"StandardErrorPath": "/var/log/airlock/airlock-watchdog-" + name + ".err.log",
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %v\nwant %v", f.Name, got, want)
		}
	}
}

// The reader can fail: a plist cut short is refused.
func TestReadPlistRefusesBroken(t *testing.T) {
	files, err := testUnits(t).Launchd()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "broken.plist")
	cut := strings.Replace(string(files[0].Data), "</dict>\n</plist>", "</plist>", 1)
	if err := os.WriteFile(p, []byte(cut), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := readPlist(t, p); err == nil {
		t.Errorf("plistlib read a plist without its closing </dict>: %v", got)
	}
}

func TestLaunchdNeedsALogDir(t *testing.T) {
	u := testUnits(t)
	u.LogDir = ""
	if _, err := u.Launchd(); err == nil || !strings.Contains(err.Error(), "log directory") {
		t.Errorf("Launchd() without a log dir = %v; want an error naming it", err)
	}
}
