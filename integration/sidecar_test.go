package integration

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// sidecarUID is the workload's uid; the proxy runs as root, the uid
// `airlock redirect` exempts.
const sidecarUID = "61001"

// TestTransparentSidecar: the Kubernetes-sidecar shape. In a network
// namespace the test makes (a pod's, with a default route that leads
// nowhere), `airlock redirect` installs the egress table with the proxy's
// uid exempt, and `airlock proxy --transparent --dns` runs in the same
// namespace beside a workload that never heard of it. The workload is
// decided as in airlock's own sandboxes; the proxy's own upstream dials
// leave although the workload's loopback is limited to one port.
func TestTransparentSidecar(t *testing.T) {
	testutil.RequireRoot(t, "a network namespace and its nftables table")
	ip := testutil.RequireTool(t, "ip")
	nsenter := testutil.RequireTool(t, "nsenter")
	python := realpath(t, testutil.RequireTool(t, "/usr/bin/python3"))
	nc := realpath(t, testutil.RequireTool(t, "nc.openbsd"))

	name := fmt.Sprintf("airlock-sidecar-%d", os.Getpid())
	run := func(cmd string, args ...string) {
		t.Helper()
		if out, err := exec.Command(cmd, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", cmd, strings.Join(args, " "), err, out)
		}
	}
	run(ip, "netns", "add", name)
	t.Cleanup(func() { exec.Command(ip, "netns", "del", name).Run() })
	ns := "/run/netns/" + name
	// The pod's interface and default route: an ifb device, which sends
	// nothing anywhere.
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "pod0", "type", "ifb"},
		{"link", "set", "pod0", "up"},
		{"addr", "add", "192.0.0.9/32", "dev", "pod0"},
		{"route", "add", "default", "dev", "pod0"},
	} {
		run(ip, append([]string{"-n", name}, args...)...)
	}

	// The origins are in the pod's namespace too: the proxy beside the
	// workload dials them from there.
	plainLn := testutil.ListenIn(t, ns, "127.0.0.2:0")
	go http.Serve(plainLn, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(rw, "sidecar origin %s %s", r.Method, r.URL.Path)
	}))
	plainPort := plainLn.Addr().(*net.TCPAddr).Port
	echoPort := serveEcho(testutil.ListenIn(t, ns, "127.0.0.2:0"))

	dir := t.TempDir()
	open, err := os.MkdirTemp("", "airlock-sidecar-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(open) })
	os.Chmod(open, 0o755)
	copyFile(t, filepath.Join("testdata", "direct.py"), filepath.Join(open, "direct.py"), 0o644)
	bundle := filepath.Join(dir, "bundle")
	os.MkdirAll(bundle, 0o755)
	os.WriteFile(filepath.Join(bundle, "sidecar.rego"), []byte(fmt.Sprintf(`package airlock.presets.sidecar

import data.airlock.lib

rules := [
	{"name": "plain-get", "binaries": [{"path": %q}], "hosts": ["plain.test"], "ports": [%d], "methods": ["GET"]},
	{"name": "echo", "binaries": [{"path": %q}], "hosts": ["echo.test"], "ports": [%d]},
]

denies := []

decision := lib.decide(rules, denies)
`, python, plainPort, nc, echoPort)), 0o644)

	const tport, dport, allowedLocal = 15001, 15053, 8080
	// The workload may reach one port of its loopback, not the origins':
	// only the exemption lets the proxy's dials to them through.
	run(airlockBin, "redirect", "--netns", ns, "--transparent-port", fmt.Sprint(tport), "--dns-port", fmt.Sprint(dport),
		"--exempt-uid", "0", "--local-port", fmt.Sprint(allowedLocal))
	px := startProxyIn(t, ns, dir, cleanEnv(), nil, "--policy", bundle, "--preset", "sidecar", "--allow-range", "127.0.0.2/32",
		"--transparent", fmt.Sprintf("127.0.0.1:%d", tport), "--transparent", fmt.Sprintf("[::1]:%d", tport),
		"--dns", fmt.Sprintf("127.0.0.1:%d", dport), "--dns", fmt.Sprintf("[::1]:%d", dport),
		"--resolve", fmt.Sprintf("plain.test:%d:127.0.0.2", plainPort), "--resolve", fmt.Sprintf("echo.test:%d:127.0.0.2", echoPort))

	direct := python + " " + filepath.Join(open, "direct.py") + " "
	steps := []step{
		{tag: "allowed", cmd: direct + fmt.Sprintf("http://plain.test:%d/side", plainPort), want: "200 sidecar origin GET /side",
			host: "plain.test", reason: "allowed"},
		{tag: "method", cmd: direct + fmt.Sprintf("http://plain.test:%d/side POST", plainPort), want: `"reason":"method_not_allowed"`,
			absent: "sidecar origin POST", host: "plain.test", reason: "method_not_allowed"},
		{tag: "nc", cmd: fmt.Sprintf("printf 'ping beside\\n' | nc -N -w 10 echo.test %d", echoPort), want: "ping beside",
			host: "echo.test", port: echoPort, reason: "allowed", binary: nc},
		{tag: "getent", cmd: "getent ahostsv4 plain.test", check: synthetic(syntheticV4)},
		{tag: "nxdomain", cmd: "getent hosts nope.test; echo exit $?", want: "exit 2"},
		// The origin's port of the workload's own loopback is closed to it.
		{tag: "loopback", cmd: fmt.Sprintf(`%s -c 'import socket; socket.create_connection(("127.0.0.2", %d), timeout=10); print("connected")'`, python, plainPort),
			want: "ConnectionRefusedError", absent: "connected"},
	}
	cmd := exec.Command(nsenter, "--net="+ns, "--setuid", sidecarUID, "--setgid", sidecarUID, "--", "/bin/sh", "-c", shellScript(steps))
	cmd.Env, cmd.Dir = cleanEnv(), open
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the workload: %v\n%s", err, out)
	}
	checkSteps(t, string(out), steps, px, python)
}
