package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// The sidecar shape: in a network namespace the test makes, as an
// operator's pod would be (a device and a default route), `airlock
// redirect` installs the egress table with the proxy's uid exempt and
// `airlock proxy --transparent --dns` serves beside the workload. A client
// that ignores proxy settings, under another uid, resolves a name to a
// synthetic address and reaches the origin through the proxy, decided and
// audited as a transparent connection; a name no rule allows is NXDOMAIN,
// and UDP elsewhere fails at once.
func TestSidecarShape(t *testing.T) {
	testutil.RequireRoot(t, "network and mount namespaces, nftables")
	unshare := testutil.RequireTool(t, "unshare")
	testutil.RequireTool(t, "ip")
	testutil.RequireTool(t, "setpriv")
	testutil.RequireTool(t, "getent")
	curl := realpath(t, testutil.RequireTool(t, "curl"))
	py := testutil.RequireTool(t, "python3")
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	const port = 18181
	bundle := filepath.Join(dir, "bundle")
	os.MkdirAll(filepath.Join(dir, "www"), 0o755)
	os.WriteFile(filepath.Join(dir, "www", "hello.txt"), []byte("hello from api.test\n"), 0o644)
	os.MkdirAll(bundle, 0o755)
	os.WriteFile(filepath.Join(bundle, "side.rego"), fmt.Appendf(nil, `package airlock.presets.side

import data.airlock.lib

rules := [{"name": "api", "binaries": [{"path": %q}], "hosts": ["api.test"], "ports": [%d]}]

denies := []

decision := lib.decide(rules, denies)
`, curl, port), 0o644)
	os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte("nameserver 127.0.0.1\n"), 0o644)
	audit := filepath.Join(dir, "audit.log")
	as998 := "setpriv --reuid 998 --regid 998 --clear-groups --"
	script := strings.Join([]string{
		"set -e",
		// What the pod has before the init step: a way out.
		"ip link set lo up",
		"ip link add eth0 type ifb && ip link set eth0 up && ip addr add 192.0.0.9/32 dev eth0 && ip route add default dev eth0",
		"mount --bind " + dir + "/resolv.conf /etc/resolv.conf",
		airlockBin + " redirect --transparent-port 15001 --dns-port 15053 --exempt-uid 0",
		fmt.Sprintf("%s -m http.server %d --bind 127.0.0.2 --directory %s/www >/dev/null 2>&1 & origin=$!", py, port, dir),
		fmt.Sprintf("%s proxy --policy %s --preset side --listen 127.0.0.1:3128 --transparent 127.0.0.1:15001 --dns 127.0.0.1:15053"+
			" --resolve api.test:%d:127.0.0.2 --allow-range 127.0.0.2/32 --audit-log %s --log-level warn >/dev/null 2>%s/proxy.log & proxy=$!", airlockBin, bundle, port, audit, dir),
		// Both die with the script, whatever it ends with: they hold no
		// pipe of the test's, and the namespace goes with them.
		"trap 'kill $origin $proxy' EXIT",
		fmt.Sprintf("for i in $(seq 200); do curl -s -o /dev/null http://127.0.0.2:%d/ && curl -s -o /dev/null http://127.0.0.1:3128/ ; [ $? -ne 7 ] && break; sleep 0.05; done", port),
		as998 + " getent ahostsv4 api.test",
		fmt.Sprintf("%s %s -sS -m 5 --noproxy '*' http://api.test:%d/hello.txt", as998, curl, port),
		as998 + " getent hosts nope.test || echo nope: exit $?",
		as998 + ` /usr/bin/python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b"x", ("192.0.2.1", 9)); print("udp: sent")
except OSError as e:
    print("udp:", e.strerror)'`,
	}, "\n")
	out, err := exec.Command(unshare, "--net", "--mount", "--propagation", "private", "sh", "-c", script).CombinedOutput()
	proxyLog, _ := os.ReadFile(filepath.Join(dir, "proxy.log"))
	if err != nil {
		t.Fatalf("sidecar script: %v\n%s\nproxy:\n%s", err, out, proxyLog)
	}
	s := string(out)
	for _, want := range []string{"198.18.", "hello from api.test", "nope: exit 2", "udp: Operation not permitted"} {
		if !strings.Contains(s, want) {
			t.Errorf("sidecar output lacks %q:\n%s\nproxy:\n%s", want, s, proxyLog)
		}
	}
	raw, _ := os.ReadFile(audit)
	var allowed, nx bool
	for _, l := range strings.Split(string(raw), "\n") {
		allowed = allowed || strings.Contains(l, `"decision":"allow"`) && strings.Contains(l, `"host":"api.test"`) &&
			strings.Contains(l, `"via":"transparent"`) && strings.Contains(l, `"binary":"`+curl+`"`)
		nx = nx || strings.Contains(l, "CANONICAL-PROXY-DNS") && strings.Contains(l, `"name":"nope.test"`) && strings.Contains(l, `"rcode":"NXDOMAIN"`)
	}
	if !allowed || !nx {
		t.Errorf("audit lacks the transparent allow for curl (%v) or the NXDOMAIN line (%v):\n%s", allowed, nx, raw)
	}
}
