package integration

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/procstat"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// One command: `airlock launch --preset` serves the proxy inside the
// sandbox's own network namespace, and a sandboxed curl reaches a local
// upstream through it: allowed, denied with its reason, and nothing direct.
func TestLaunchWithInProcessProxy(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (uid switch, network namespace)")
	w := newWorld(t)
	api := fmt.Sprintf("https://api.test:%d", w.tlsPort)
	script := strings.Join([]string{
		"curl -sS " + api + "/v1/hello; echo",
		"curl -sS -X POST " + api + "/v1/hello; echo",
		fmt.Sprintf("curl -sS -m 3 --noproxy '*' http://127.0.0.2:%d/ || echo direct-refused", w.plainPort),
	}, "; ")
	args := []string{"launch", "--policy", filepath.Join(w.dir, "bundle"), "--preset", "itest",
		"--allow-range", "127.0.0.2/32", "--upstream-ca", w.upstreamCA.File, "--ca-dir", filepath.Join(w.dir, "ca"),
		"--audit-log", filepath.Join(w.dir, "launch-audit.log"), "--log-level", "warn"}
	for _, name := range []string{"api.test"} {
		args = append(args, "--resolve", fmt.Sprintf("%s:%d:127.0.0.2", name, w.tlsPort))
	}
	args = append(args, "--", "/bin/sh", "-c", script)
	// The sandbox's CA bundle is made under TMPDIR, and gone with it.
	tmp, err := os.MkdirTemp("", "itest-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	os.Chmod(tmp, 0o755)
	cmd := exec.Command(airlockBin, args...)
	cmd.Env = cleanEnv("ITEST_TOKEN="+secretValue, "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("airlock launch: %v\n%s", err, out)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("left in TMPDIR after the launch: %v", left)
	}
	s := string(out)
	for _, want := range []string{"hello from api.test", `"reason":"method_not_allowed"`, "direct-refused"} {
		if !strings.Contains(s, want) {
			t.Errorf("sandboxed output lacks %q:\n%s", want, s)
		}
	}
	audit, _ := os.ReadFile(filepath.Join(w.dir, "launch-audit.log"))
	if !strings.Contains(string(audit), `"binary":"`+w.curl+`"`) || !strings.Contains(string(audit), `"reason":"method_not_allowed"`) {
		t.Errorf("launch audit log:\n%s", audit)
	}
}

// alive: a zombie awaiting its reaper is dead too.
func alive(pid int) bool {
	state, _, err := procstat.Stat(pid)
	return err == nil && !procstat.Dead(state)
}

// --json-status reports the outcome, --rlimit reaches the command, and a
// setup failure names its step with exit code 125.
func TestLaunchStatusAndLimits(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch")
	dir := t.TempDir()
	status := filepath.Join(dir, "status.json")
	out, err := exec.Command(airlockBin, "launch", "--net", "none", "--rlimit", "nofile=64", "--json-status", status,
		"--log-level", "warn", "--", "/bin/sh", "-c", "ulimit -n; exit 3").Output()
	if code := exitCode(err); code != 3 || strings.TrimSpace(string(out)) != "64" {
		t.Fatalf("launch exit %d output %q; want 3 and 64", code, out)
	}
	raw, _ := os.ReadFile(status)
	if !strings.Contains(string(raw), `"exit_code":3`) || !strings.Contains(string(raw), `"started":true`) {
		t.Fatalf("json status %s", raw)
	}
	cmd := exec.Command(airlockBin, "launch", "--net", "none", "--ro", "/nonexistent/x", "--json-status", status, "--", "/bin/true")
	msg, err := cmd.CombinedOutput()
	if code := exitCode(err); code != 125 || !strings.Contains(string(msg), `step "open landlock paths"`) {
		t.Fatalf("setup failure exit %d: %s", code, msg)
	}
	raw, _ = os.ReadFile(status)
	if !strings.Contains(string(raw), `"step":"open landlock paths"`) {
		t.Fatalf("json status of a failed setup: %s", raw)
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// The sandbox's only resolver is the proxy: its resolv.conf names its own
// loopback, nsswitch asks files then DNS, and the Unix sockets host
// resolvers listen on (nscd's here) are out of reach. Landlock does not
// mediate connect() to a socket by path, and through one the host would
// resolve names for the sandbox, past the proxy's answerer and its audit.
func TestLaunchHidesHostResolvers(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (mount namespace)")
	py := testutil.RequireTool(t, "/usr/bin/python3")
	if _, err := os.Stat("/run/nscd"); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir("/run/nscd", 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove("/run/nscd") })
	}
	sock := filepath.Join("/run/nscd", fmt.Sprintf("airlock-test-%d.sock", os.Getpid()))
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	os.Chmod(sock, 0o666)
	reached := make(chan bool, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		reached <- err == nil
	}()
	script := strings.Join([]string{
		"cat /etc/resolv.conf",
		"grep '^hosts:' /etc/nsswitch.conf",
		py + ` -c 'import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); print("host resolver: reached")
except OSError as e:
    print("host resolver:", e.strerror)' ` + sock,
	}, "; ")
	// On the proxy network, and with none: a host daemon asked to resolve
	// a name would carry it out of a sandbox that has no network.
	for _, mode := range [][]string{{"--preset", "permissive"}, {"--net", "none"}} {
		args := append(append([]string{"launch"}, mode...), "--log-level", "error", "--", "/bin/sh", "-c", script)
		out, err := exec.Command(airlockBin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("airlock launch %v: %v\n%s", mode, err, out)
		}
		for _, want := range []string{"nameserver 127.0.0.1", "hosts: files dns", "host resolver: No such file or directory"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("launch %v: sandbox output lacks %q:\n%s", mode, want, out)
			}
		}
	}
	// Closed, the listener ends its Accept: whatever reached it has.
	ln.Close()
	if <-reached {
		t.Error("the sandbox reached a host resolver's Unix socket")
	}
}

// Where resolv.conf is a link into a resolver's socket directory (as
// systemd-resolved's stub-resolv.conf is), which the sandbox hides, the
// sandbox's own resolv.conf is found where the link leads. Staged in a
// mount namespace of the test's own: a tmpfs /run with such a directory,
// and an /etc whose resolv.conf links into it.
func TestLaunchResolvConfLinkedIntoAHiddenDirectory(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (mount namespace)")
	unshare := testutil.RequireTool(t, "unshare")
	etc := stagedEtc(t, "/run/systemd/resolve/stub-resolv.conf")
	stage := strings.Join([]string{
		"mount -t tmpfs tmpfs /run",
		"mkdir -p /run/systemd/resolve",
		"echo 'nameserver 10.53.53.53' > /run/systemd/resolve/stub-resolv.conf",
		"touch /run/systemd/resolve/io.systemd.Resolve",
		`mount --bind "$0" /etc`,
		`exec "$@"`,
	}, " && ")
	script := "cat /etc/resolv.conf; [ -e /run/systemd/resolve/io.systemd.Resolve ] && echo io.systemd.Resolve; true"
	// Naming /etc/resolv.conf is naming the sandbox's own: it starts.
	out, err := exec.Command(unshare, "-m", "--propagation", "private", "sh", "-c", stage, etc,
		airlockBin, "launch", "--net", "none", "--user", "61000", "--log-level", "error", "--ro", "/etc/resolv.conf", "--", "/bin/sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("launch: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "nameserver 127.0.0.1") || strings.Contains(string(out), "10.53.53.53") {
		t.Errorf("the sandbox's resolv.conf, through the link:\n%s\nwant the sandbox's own (nameserver 127.0.0.1), not the host's", out)
	}
	if strings.Contains(string(out), "io.systemd.Resolve") {
		t.Errorf("the resolver's socket directory is not hidden:\n%s", out)
	}
}

// Under the hidden /run, the paths a sandbox names are there: a link
// (/run/app → app-1) and what it leads to. Where resolv.conf links into
// /run but not into a resolver's directory (resolvconf's), the sandbox's
// own is written on its tmpfs, never through a path mounted back: the
// host's file is untouched. A named directory that holds the host's
// resolv.conf refuses the start.
func TestLaunchKeepsNamedPathsUnderRun(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (mount namespace)")
	unshare := testutil.RequireTool(t, "unshare")
	etc := stagedEtc(t, "/run/resolvconf/resolv.conf")
	stage := strings.Join([]string{
		"mount -t tmpfs tmpfs /run",
		"mkdir -p /run/resolvconf /run/app-1",
		"echo 'nameserver 10.53.53.53' > /run/resolvconf/resolv.conf",
		"echo kept > /run/app-1/x",
		"ln -s app-1 /run/app",
		// Two links on the way: /run/a → c, /run/c/b → ../d.
		"mkdir -p /run/c /run/d && echo chained > /run/d/x && ln -s c /run/a && ln -s ../d /run/c/b",
		`mount --bind "$0" /etc`,
		`"$@"; echo "exit $?"; echo "host's: $(cat /run/resolvconf/resolv.conf)"`,
	}, " && ")
	launch := func(ro ...string) string {
		args := []string{"-m", "--propagation", "private", "sh", "-c", stage, etc,
			airlockBin, "launch", "--net", "none", "--user", "61000", "--log-level", "error"}
		for _, p := range ro {
			args = append(args, "--ro", p)
		}
		args = append(args, "--", "/bin/sh", "-c", "cat /etc/resolv.conf; cat /run/app/x; cat /run/a/b/x")
		out, err := exec.Command(unshare, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("launch: %v\n%s", err, out)
		}
		return string(out)
	}
	out := launch("/etc/resolv.conf", "/run/app", "/run/a/b")
	for _, want := range []string{"nameserver 127.0.0.1", "kept", "chained", "exit 0", "host's: nameserver 10.53.53.53"} {
		if !strings.Contains(out, want) {
			t.Errorf("naming /etc/resolv.conf, /run/app and /run/a/b: output lacks %q:\n%s", want, out)
		}
	}
	out = launch("/run/resolvconf")
	if !strings.Contains(out, "holds the host's resolv.conf") || !strings.Contains(out, "host's: nameserver 10.53.53.53") {
		t.Errorf("naming /run/resolvconf: %s\nwant a refusal naming the host's resolv.conf, and the host's file untouched", out)
	}
}

// stagedEtc is an /etc for a test's own mount namespace: the host's
// accounts and nsswitch.conf, and a resolv.conf linking to resolvConf.
func stagedEtc(t *testing.T, resolvConf string) string {
	t.Helper()
	etc := t.TempDir()
	for _, name := range []string{"passwd", "group", "nsswitch.conf"} {
		raw, err := os.ReadFile(filepath.Join("/etc", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(etc, name), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(resolvConf, filepath.Join(etc, "resolv.conf")); err != nil {
		t.Fatal(err)
	}
	return etc
}
