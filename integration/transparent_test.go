package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// The synthetic pools the sandbox's DNS answers from (issue 13).
var (
	syntheticV4 = netip.MustParsePrefix("198.18.0.0/15")
	syntheticV6 = netip.MustParsePrefix("fd61:6972:6c6b:5300::/64")
)

// hostResolver stands for the host's resolver: the tests count what
// reaches it (nothing may).
const hostResolver = "127.53.0.1"

// unproxied runs a command without the proxy variables the launcher sets:
// Node 20's fetch ignores them, but a later Node reads them when
// NODE_USE_ENV_PROXY is set, and the test is of a client that does not.
const unproxied = "env -u HTTPS_PROXY -u https_proxy -u HTTP_PROXY -u http_proxy -u ALL_PROXY -u all_proxy -u NODE_USE_ENV_PROXY "

// tpWorld is the fixture of the transparent egress tests: newWorld's
// origins, an echo origin for a protocol that is not HTTP, a preset for
// clients that never heard of the proxy, and a stand-in for the host's
// resolver that counts what reaches it.
type tpWorld struct {
	*world
	open     string // readable and executable by the sandbox's uid: the programs, resolv.conf
	bundle   string
	goClient string // testdata/tpclient, built
	// The clients' executables as the audit names them (resolved paths).
	python, openssl, nc string
	echoPort            int
	resolve             []string // --resolve flags: every name a test may reach is pinned
	// resolvConf names the counting resolver; the launcher, and so its
	// in-process proxy, sees it as /etc/resolv.conf.
	resolvConf   string
	resolverHits atomic.Int64
}

func newTPWorld(t *testing.T) *tpWorld {
	testutil.RequireRoot(t, "airlock launch (network namespace, nftables, uid switch)")
	testutil.RequireTool(t, "unshare")
	tw := &tpWorld{world: newWorld(t)}
	tw.python = realpath(t, testutil.RequireTool(t, "/usr/bin/python3")) // the sandbox's uid can execute it
	tw.openssl = realpath(t, testutil.RequireTool(t, "openssl"))
	tw.nc = realpath(t, testutil.RequireTool(t, "nc.openbsd"))
	testutil.RequireTool(t, "getent")

	var err error
	if tw.open, err = os.MkdirTemp("", "airlock-transparent-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tw.open) })
	os.Chmod(tw.open, 0o755)
	for _, f := range []string{"direct.py", "fetch.js"} {
		copyFile(t, filepath.Join("testdata", f), filepath.Join(tw.open, f), 0o644)
	}
	tw.goClient = filepath.Join(tw.open, "tpclient")
	if out, err := exec.Command("go", "build", "-o", tw.goClient, "./testdata/tpclient").CombinedOutput(); err != nil {
		t.Fatalf("build tpclient: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	tw.echoPort = serveEcho(ln)
	tw.serveResolver(t, hostResolver)

	tw.bundle = filepath.Join(tw.dir, "transparent-bundle")
	os.MkdirAll(tw.bundle, 0o755)
	os.WriteFile(filepath.Join(tw.bundle, "transparent.rego"), []byte(tw.preset()), 0o644)
	for _, pin := range []string{
		fmt.Sprintf("api.test:%d", tw.tlsPort), fmt.Sprintf("git.test:%d", tw.tlsPort),
		fmt.Sprintf("plain.test:%d", tw.plainPort), fmt.Sprintf("echo.test:%d", tw.echoPort),
	} {
		tw.resolve = append(tw.resolve, "--resolve", pin+":127.0.0.2")
	}
	return tw
}

// preset lets each client reach the origins it talks to: api.test's
// /v1/** read-only (an inspected tunnel), plain.test by GET, git.test's
// fetch but not its push, echo.test's port to nc only. curl-only.test and
// the literal 192.0.2.7 are for curl, so any other client is denied
// binary_not_allowed; nope.test is named by no rule at all.
func (tw *tpWorld) preset() string {
	q := strconv.Quote
	clients := fmt.Sprintf(`[{"path": %s}, {"path": %s}, {"path": %s}, {"path": %s}]`, q(tw.node), q(tw.goClient), q(tw.python), q(tw.openssl))
	return fmt.Sprintf(`package airlock.presets.transparent

import data.airlock.lib

rules := [
	{"name": "api-read", "binaries": %[1]s, "hosts": ["api.test"], "ports": [%[2]d], "methods": "read-only", "paths": ["/v1/**"]},
	{"name": "plain-get", "binaries": %[1]s, "hosts": ["plain.test"], "ports": [%[3]d], "methods": ["GET"]},
	{"name": "curl-only", "binaries": [{"path": %[4]s}], "hosts": ["curl-only.test", "192.0.2.7"], "ports": [80, %[2]d]},
	{"name": "git-refs", "binaries": [{"path": %[5]s}], "hosts": ["git.test"], "ports": [%[2]d], "methods": ["GET"],
	 "paths": ["/*/info/refs"], "query": {"service": ["git-upload-pack"]}},
	{"name": "git-fetch", "binaries": [{"path": %[5]s}], "hosts": ["git.test"], "ports": [%[2]d], "methods": ["POST"],
	 "paths": ["/*/git-upload-pack"]},
	{"name": "echo", "binaries": [{"path": %[6]s}], "hosts": ["echo.test"], "ports": [%[7]d]},
]

denies := [
	{"name": "no-push", "hosts": ["git.test"], "paths": ["/**/git-receive-pack"]},
	{"name": "no-push-discovery", "hosts": ["git.test"], "paths": ["/**/info/refs"], "query": {"service": ["git-receive-pack"]}},
]

decision := lib.decide(rules, denies)
`, clients, tw.tlsPort, tw.plainPort, q(tw.curl), q(tw.gitRemote), q(tw.nc), tw.echoPort)
}

// serveEcho runs a TCP origin on ln that sends back what it reads until
// the client half-closes: a protocol that is neither TLS nor HTTP.
func serveEcho(ln net.Listener) int {
	testutil.ServeConns(ln, func(c net.Conn) { io.Copy(c, c) })
	return ln.Addr().(*net.TCPAddr).Port
}

// serveResolver listens on addr:53, UDP and TCP, counting every query and
// connection and answering none, and writes a resolv.conf naming it. The
// launcher runs with that resolv.conf: a proxy that forwarded a query, or
// resolved a name the test did not pin, would reach it.
func (tw *tpWorld) serveResolver(t *testing.T, addr string) {
	pc, err := net.ListenPacket("udp", net.JoinHostPort(addr, "53"))
	if err != nil {
		t.Fatalf("the counting resolver: %v", err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "53"))
	if err != nil {
		pc.Close()
		t.Fatalf("the counting resolver: %v", err)
	}
	t.Cleanup(func() { pc.Close(); ln.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			tw.resolverHits.Add(1)
		}
	}()
	testutil.ServeConns(ln, func(net.Conn) { tw.resolverHits.Add(1) })
	tw.resolvConf = filepath.Join(tw.open, "resolv.conf")
	os.WriteFile(tw.resolvConf, []byte("nameserver "+addr+"\n"), 0o644)
}

// step is one command of a sandboxed script and what it must show.
type step struct {
	tag  string // its section of the output
	cmd  string // shell, inside the sandbox
	want string // in its output ("" checks nothing)
	// absent must not be in its output: what getting through would show.
	absent string
	// The decision line it leaves in the audit log, made for the client's
	// binary via the transparent listener: host and reason (and port when
	// non-zero). No host: no line is checked.
	host   string
	port   int
	reason string
	binary string // the client's executable, when not the script's
	// check looks at the section further.
	check func(t *testing.T, out string)
}

// script runs steps in one sandbox with the launch flags args, checks
// each (their decision lines made for binary), and returns the path of
// the sandbox's audit log.
func (tw *tpWorld) script(t *testing.T, binary string, steps []step, args ...string) string {
	t.Helper()
	audit := filepath.Join(tw.dir, strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())+"-audit.log")
	out := tw.launch(t, audit, shellScript(steps), args...)
	checkSteps(t, out, steps, &runningProxy{auditLog: audit}, binary)
	return audit
}

// shellScript runs steps one after the other, each one's output under a
// "=== TAG" line.
func shellScript(steps []step) string {
	var sh strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&sh, "echo '=== %s'; %s 2>&1; echo\n", s.tag, s.cmd)
	}
	return sh.String()
}

// checkSteps checks each step's section of out, and the decision line it
// left in log, made for binary (or the step's own).
func checkSteps(t *testing.T, out string, steps []step, log *runningProxy, binary string) {
	t.Helper()
	sections := splitSections(out)
	// Each step's decision is a line of its own: two steps alike (nc over
	// IPv4, then IPv6) must not both be satisfied by the first's.
	used := map[string]bool{}
	for _, s := range steps {
		got, ok := sections[s.tag]
		t.Logf("%s: %s", s.tag, got)
		switch {
		case !ok:
			t.Errorf("%s: no output section in:\n%s", s.tag, out)
			continue
		case !strings.Contains(got, s.want):
			t.Errorf("%s: `%s` printed %q, want %q in it", s.tag, s.cmd, got, s.want)
		case s.absent != "" && strings.Contains(got, s.absent):
			t.Errorf("%s: `%s` printed %q, which it must not: %q", s.tag, s.cmd, got, s.absent)
		}
		if s.check != nil {
			s.check(t, got)
		}
		if s.host != "" {
			exe := binary
			if s.binary != "" {
				exe = s.binary
			}
			got := log.audit(t, func(a auditLine) bool {
				return !used[a.ID] && a.Binary == exe && a.Host == s.host && a.Reason == s.reason && (s.port == 0 || a.Port == s.port) && a.Via == "transparent"
			})
			used[got.ID] = true
		}
	}
}

// launch runs script in `airlock launch --preset transparent` and returns
// its output. The launcher runs in a mount namespace of its own where
// /etc/resolv.conf names the counting resolver (the sandbox is given one
// of its own): after the sandbox has exited, the resolver must have
// counted nothing.
func (tw *tpWorld) launch(t *testing.T, audit, script string, args ...string) string {
	t.Helper()
	launch := []string{"launch", "--policy", tw.bundle, "--preset", "transparent", "--allow-range", "127.0.0.2/32",
		"--upstream-ca", tw.upstreamCA.File, "--ca-dir", filepath.Join(tw.dir, "ca"), "--audit-log", audit, "--log-level", "warn",
		"--exec", tw.open}
	launch = append(append(append(launch, tw.resolve...), args...), "--", "/bin/sh", "-c", script)
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c",
		`mount --bind "$0" /etc/resolv.conf && exec "$@"`, tw.resolvConf, airlockBin}, launch...)...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("airlock launch: %v\n%s", err, out)
	}
	if n := tw.resolverHits.Load(); n != 0 {
		t.Errorf("the host's resolver was asked %d times: nothing may leave the sandbox's DNS, and every name the proxy dials is pinned\n%s", n, out)
	}
	return string(out)
}

// splitSections cuts a script's output at its "=== TAG" lines.
func splitSections(out string) map[string]string {
	sections := map[string]string{}
	tag := ""
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "=== "); ok {
			tag = rest
			sections[tag] = ""
			continue
		}
		if tag != "" {
			sections[tag] += line + "\n"
		}
	}
	return sections
}

// TestTransparentEgress: clients that ignore every proxy setting, inside a
// real sandbox, reach the loopback origins through the proxy when the
// policy allows it and get the reason when it does not; each audit line
// names the client's binary (issue 13, "Done when").
func TestTransparentEgress(t *testing.T) {
	tw := newTPWorld(t)
	api := fmt.Sprintf("https://api.test:%d", tw.tlsPort)
	plain := fmt.Sprintf("http://plain.test:%d", tw.plainPort)
	curlOnly := fmt.Sprintf("https://curl-only.test:%d/", tw.tlsPort)
	node := unproxied + tw.node + " " + filepath.Join(tw.open, "fetch.js") + " "
	python := tw.python + " " + filepath.Join(tw.open, "direct.py") + " "
	goClient := tw.goClient + " "
	// git's HOME, where it clones: writable by the sandbox's uid.
	gitHome := filepath.Join(tw.open, "git-home")
	os.Mkdir(gitHome, 0o777)
	os.Chmod(gitHome, 0o777)
	gitArgs := []string{"--rw", gitHome, "--env", "HOME=" + gitHome, "--env", "GIT_CONFIG_NOSYSTEM=1", "--env", "GIT_TERMINAL_PROMPT=0",
		"--env", "GIT_AUTHOR_NAME=t", "--env", "GIT_AUTHOR_EMAIL=t@t.test", "--env", "GIT_COMMITTER_NAME=t", "--env", "GIT_COMMITTER_EMAIL=t@t.test"}
	for _, tc := range []struct {
		name, binary string
		steps        []step
		args         []string
	}{
		{"node fetch", tw.node, []step{
			{tag: "allowed", cmd: node + api + "/v1/hello", want: "200 hello from api.test", host: "api.test", reason: "allowed"},
			{tag: "method", cmd: node + api + "/v1/hello POST", want: `"reason":"method_not_allowed"`, host: "api.test", reason: "method_not_allowed"},
			{tag: "binary", cmd: node + curlOnly, want: `"reason":"binary_not_allowed"`, host: "curl-only.test", reason: "binary_not_allowed"},
		}, nil},
		{"go without a proxy", tw.goClient, []step{
			// The proxy variables are set: Proxy nil ignores them.
			{tag: "allowed", cmd: goClient + "get " + api + "/v1/hello", want: "200 hello from api.test", host: "api.test", reason: "allowed"},
			{tag: "method", cmd: goClient + "post " + api + "/v1/hello", want: `"reason":"method_not_allowed"`, host: "api.test", reason: "method_not_allowed"},
			{tag: "binary", cmd: goClient + "get " + curlOnly, want: `"reason":"binary_not_allowed"`, host: "curl-only.test", reason: "binary_not_allowed"},
			{tag: "plain", cmd: goClient + "get " + plain + "/go", want: "200 plain GET /go", host: "plain.test", reason: "allowed"},
			{tag: "plain method", cmd: goClient + "post " + plain + "/go", want: `"reason":"method_not_allowed"`, absent: "plain POST", host: "plain.test", reason: "method_not_allowed"},
		}, nil},
		{"python http.client", tw.python, []step{
			{tag: "allowed", cmd: python + api + "/v1/hello", want: "200 hello from api.test", host: "api.test", reason: "allowed"},
			{tag: "path", cmd: python + api + "/other", want: `"reason":"path_not_allowed"`, absent: "api.test other path", host: "api.test", reason: "path_not_allowed"},
			{tag: "plain", cmd: python + plain + "/py", want: "200 plain GET /py", host: "plain.test", reason: "allowed"},
			{tag: "plain binary", cmd: python + "http://curl-only.test/", want: `"reason":"binary_not_allowed"`, host: "curl-only.test", port: 80, reason: "binary_not_allowed"},
			// Neither TLS nor HTTP: a denial can only reset the connection.
			{tag: "reset", cmd: fmt.Sprintf(`%s -c 'import socket; s = socket.create_connection(("echo.test", %d), timeout=30); s.sendall(b"ping\n"); print("read", s.recv(100))'`, tw.python, tw.echoPort),
				want: "ConnectionResetError", absent: "read b'ping", host: "echo.test", port: tw.echoPort, reason: "binary_not_allowed"},
		}, nil},
		{"openssl s_client", tw.openssl, []step{
			{tag: "allowed", cmd: sClient(tw.tlsPort, "api.test"), want: "hello from api.test", host: "api.test", reason: "allowed"},
			{tag: "sni", cmd: sClient(tw.tlsPort, "curl-only.test"), want: `"reason":"host_mismatch"`, absent: "hello from api.test", host: "api.test", reason: "host_mismatch"},
		}, nil},
		{"git over https", tw.gitRemote, []step{
			{tag: "clone", cmd: fmt.Sprintf(`git -c http.proxy= clone -q https://git.test:%d/repo.git "$HOME/clone" && cat "$HOME/clone/README"`, tw.tlsPort),
				want: "cloned through airlock", host: "git.test", reason: "allowed"},
			{tag: "push", cmd: `cd "$HOME/clone" && git commit -q --allow-empty -m more && git -c http.proxy= push -q origin HEAD:main`,
				want: "reason=denied_by_rule", host: "git.test", reason: "denied_by_rule"},
		}, gitArgs},
		{"nc", tw.nc, []step{
			{tag: "allowed", cmd: fmt.Sprintf("printf 'ping through airlock\\n' | nc -N -w 10 echo.test %d", tw.echoPort),
				want: "ping through airlock", host: "echo.test", port: tw.echoPort, reason: "allowed"},
			// The same over IPv6: the name's synthetic IPv6 address.
			{tag: "allowed v6", cmd: fmt.Sprintf("printf 'ping over ipv6\\n' | nc -6 -N -w 10 echo.test %d", tw.echoPort),
				want: "ping over ipv6", host: "echo.test", port: tw.echoPort, reason: "allowed"},
			// plain.test's origin would answer 400 to this: a reset instead.
			{tag: "port", cmd: fmt.Sprintf("printf 'ping\\n' | nc -N -w 10 echo.test %d", tw.plainPort),
				absent: "400", host: "echo.test", port: tw.plainPort, reason: "port_not_allowed"},
		}, nil},
		// Direct TCP to an address no name stands for: decided as that
		// address, and the SSRF guard still stands after an allow.
		{"direct to a literal address", tw.curl, []step{
			{tag: "denied", cmd: "curl -sS -m 10 --noproxy '*' http://192.0.2.1/", want: `"reason":"host_not_allowed"`, host: "192.0.2.1", reason: "host_not_allowed"},
			{tag: "denied v6", cmd: "curl -sS -m 10 -g --noproxy '*' 'http://[2001:db8::1]/'", want: `"reason":"host_not_allowed"`, host: "2001:db8::1", reason: "host_not_allowed"},
			{tag: "ssrf", cmd: "curl -sS -m 10 --noproxy '*' http://192.0.2.7/", want: `"reason":"ssrf_blocked"`, host: "192.0.2.7", reason: "ssrf_blocked"},
			// The namespace's own loopback is no way out either: only
			// the proxy's ports are open there.
			{tag: "loopback", cmd: fmt.Sprintf("curl -sS -m 10 --noproxy '*' http://127.0.0.2:%d/ || echo direct-refused", tw.plainPort), want: "direct-refused", absent: "plain GET"},
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tw.script(t, tc.binary, tc.steps, tc.args...)
		})
	}
}

// sClient sends a GET for /v1/hello to api.test with SNI server name,
// verifying the server's certificate against the sandbox's CA bundle.
func sClient(port int, server string) string {
	return fmt.Sprintf(`printf 'GET /v1/hello HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n' | openssl s_client -quiet -verify_return_error -CAfile "$SSL_CERT_FILE" -connect api.test:%d -servername %s`, port, server)
}

// TestTransparentDNS: DNS inside the sandbox is answered by the proxy,
// never forwarded: a name some rule could reach gets a synthetic address,
// one no rule could reach NXDOMAIN (and an audit line), any other query
// type REFUSED, over UDP and TCP; UDP to any other port fails at once.
func TestTransparentDNS(t *testing.T) {
	tw := newTPWorld(t)
	dns := tw.goClient + " dns "
	steps := []step{
		{tag: "getent", cmd: "getent hosts api.test", check: synthetic(syntheticV4, syntheticV6)},
		{tag: "getent v4", cmd: "getent ahostsv4 api.test", check: synthetic(syntheticV4)},
		{tag: "getent nxdomain", cmd: "getent hosts nope.test; echo exit $?", want: "exit 2"},
		// getaddrinfo, as most programs resolve, says the name does not
		// exist (not that resolving failed).
		{tag: "getaddrinfo nxdomain", cmd: tw.python + ` -c 'import socket; socket.getaddrinfo("nope.test", 443)'`, want: "Name or service not known"},
		{tag: "node lookup nxdomain", cmd: tw.node + ` -e 'require("dns").lookup("nope.test", (e) => console.log(e ? e.code : "resolved"))'`, want: "ENOTFOUND"},
		{tag: "A udp", cmd: dns + "udp A api.test", want: "NOERROR", check: synthetic(syntheticV4)},
		{tag: "AAAA tcp", cmd: dns + "tcp AAAA api.test", want: "NOERROR", check: synthetic(syntheticV6)},
		{tag: "TXT udp", cmd: dns + "udp TXT api.test", want: "REFUSED"},
		{tag: "TXT tcp", cmd: dns + "tcp TXT api.test", want: "REFUSED"},
		{tag: "MX udp", cmd: dns + "udp MX api.test", want: "REFUSED"},
		{tag: "nxdomain udp", cmd: dns + "udp A nope.test", want: "NXDOMAIN"},
		{tag: "nxdomain tcp", cmd: dns + "tcp AAAA nope.test", want: "NXDOMAIN"},
		// Whatever server a program asks, port 53 is the proxy's: a
		// public-looking one, and the host's (the counting) resolver.
		{tag: "A other server", cmd: dns + "udp A api.test 192.0.2.53:53", want: "NOERROR", check: synthetic(syntheticV4)},
		{tag: "AAAA host resolver", cmd: dns + "tcp AAAA api.test " + hostResolver + ":53", want: "NOERROR", check: synthetic(syntheticV6)},
		{tag: "TXT v6 server", cmd: dns + "udp TXT api.test [2001:db8::53]:53", want: "REFUSED"},
		{tag: "udp test-net", cmd: tw.goClient + " udp 192.0.2.1:9", check: refusedAtOnce},
		{tag: "udp synthetic", cmd: tw.goClient + " udp api.test:9", check: func(t *testing.T, out string) {
			synthetic(syntheticV4, syntheticV6)(t, out)
			refusedAtOnce(t, out)
		}},
	}
	audit := tw.script(t, "", steps)
	// A refusal says why in the audit log.
	log := &runningProxy{auditLog: audit}
	for _, want := range []auditLine{
		{Name: "nope.test", QType: "A", RCode: "NXDOMAIN", Reason: "host_not_allowed"},
		{Name: "api.test", QType: "TXT", RCode: "REFUSED", Reason: "dns_query_refused"},
	} {
		log.auditMsg(t, "CANONICAL-PROXY-DNS", func(a auditLine) bool {
			return a.Name == want.Name && a.QType == want.QType && a.RCode == want.RCode && a.Reason == want.Reason
		})
	}
}

// synthetic checks that the first address in out is from one of pools.
func synthetic(pools ...netip.Prefix) func(t *testing.T, out string) {
	return func(t *testing.T, out string) {
		t.Helper()
		for _, f := range strings.FieldsFunc(out, func(r rune) bool { return r == ' ' || r == '\n' || r == '\t' }) {
			host := f
			if h, _, err := net.SplitHostPort(f); err == nil {
				host = h
			}
			a, err := netip.ParseAddr(host)
			if err != nil {
				continue
			}
			for _, p := range pools {
				if p.Contains(a) {
					return
				}
			}
			t.Errorf("address %s in %q is from none of %v", a, out, pools)
			return
		}
		t.Errorf("no address in %q, want one from %v", out, pools)
	}
}

// refusedAtOnce checks that a datagram failed with an error of the
// sandbox's reject rule, not a timeout and not an answer.
func refusedAtOnce(t *testing.T, out string) {
	t.Helper()
	for _, e := range []syscall.Errno{syscall.EPERM, syscall.EACCES, syscall.ECONNREFUSED} {
		if strings.Contains(out, e.Error()) {
			return
		}
	}
	t.Errorf("UDP to another port than 53: %q, want it refused at once (EPERM, EACCES or ECONNREFUSED)", out)
}

// TestTransparentPod: in a pod, a service's python with http.client,
// never told of the proxy, reaches a name its own preset allows, and
// another service with the same code is denied it by its own preset; a
// name no service's preset names does not resolve.
func TestTransparentPod(t *testing.T) {
	e := newPodEnv(t)
	alphaIn, betaIn := testutil.FreePort(t), testutil.FreePort(t)
	m := e.manifest("tp", fmt.Sprintf(`ingress:
  - {name: alpha, listen: "127.0.0.1:%d", service: alpha, port: 8001, keys: %s}
  - {name: beta, listen: "127.0.0.1:%d", service: beta, port: 8002, keys: %s}`, alphaIn, e.keys, betaIn, e.keys),
		e.pyService("alpha", 8001, "egress_ok", "")+e.pyService("beta", 8002, "egress_none", ""))
	pod := startPod(t, e, "tp", m)
	pod.awaitReady()
	alpha, beta := fmt.Sprintf("127.0.0.1:%d", alphaIn), fmt.Sprintf("127.0.0.1:%d", betaIn)
	audit := &runningProxy{auditLog: filepath.Join(pod.state, "audit.jsonl")}
	straight := func(path string) string {
		return fmt.Sprintf("/straight?url=https://api.test:%d%s", e.tlsPort, path)
	}

	_, body := call(t, alpha, e.key, straight("/v1/hello"))
	if a := answer(t, body); a["status"] != 200.0 || a["body"] != "hello from api.test" {
		t.Errorf("alpha (egress_ok) straight to api.test: %s", body)
	}
	for _, tc := range []struct {
		addr, path, service, preset, reason string
	}{
		{alpha, "/other", "alpha", "egress_ok", "path_not_allowed"},
		{beta, "/v1/hello", "beta", "egress_none", "host_not_allowed"},
	} {
		_, body := call(t, tc.addr, e.key, straight(tc.path))
		a := answer(t, body)
		if a["status"] != 403.0 {
			t.Errorf("%s straight to api.test%s: %s, want 403", tc.service, tc.path, body)
			continue
		}
		var d struct{ Reason, Preset, Sandbox, Binary string }
		json.Unmarshal([]byte(fmt.Sprint(a["body"])), &d)
		if d.Reason != tc.reason || d.Preset != tc.preset || d.Sandbox != tc.service || d.Binary != e.python {
			t.Errorf("%s's denial names sandbox %q preset %q reason %q binary %q, want %s, %s, %s, %s: %s",
				tc.service, d.Sandbox, d.Preset, d.Reason, d.Binary, tc.service, tc.preset, tc.reason, e.python, a["body"])
		}
		audit.audit(t, func(a auditLine) bool {
			return a.Binary == e.python && a.Host == "api.test" && a.Reason == tc.reason && a.Via == "transparent"
		})
	}

	// A name no service's preset could reach does not resolve.
	_, body = call(t, alpha, e.key, "/straight?url=https://other.test/")
	if a := answer(t, body); !strings.Contains(fmt.Sprint(a["error"]), "Name or service not known") {
		t.Errorf("alpha straight to other.test: %s, want NXDOMAIN's error", body)
	}
	audit.auditMsg(t, "CANONICAL-PROXY-DNS", func(a auditLine) bool {
		return a.Name == "other.test" && a.RCode == "NXDOMAIN" && a.Reason == "host_not_allowed"
	})
}
