package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
)

// proxy is one column of the table: how to start it, and the scenarios it
// takes part in (the same load for each that does).
type proxy struct {
	name   string
	start  func(dir string, up *upstreams) (*running, error)
	serves string
}

var proxies = []proxy{
	{"direct", startDirect, "plain,tunnels,https,tlsbulk,bulk,mitm"},
	{"airlock", startAirlock, "plain,tunnels,https,tlsbulk,bulk,mitm"},
	{"squid", startSquid, "plain,tunnels,https,tlsbulk,bulk"},
	{"tinyproxy", startTinyproxy, "plain,tunnels,https,tlsbulk,bulk"},
	{"go-relay", startSelf("-relay"), "tunnels,https,tlsbulk,bulk"}, // they relay CONNECT only
	{"go-loop", startSelf("-loop"), "tunnels,https,tlsbulk,bulk"},
	{"go-sockmap", startSelf("-sockmap"), "tunnels,https,tlsbulk,bulk"},
	// mitmproxy inspects every tunnel: it is measured where airlock
	// inspects, not as an opaque relay.
	{"mitmproxy", startMitmproxy, "mitm"},
}

// running is a started proxy.
type running struct {
	addr string    // its listener; "" for direct
	cmd  *exec.Cmd // nil for direct
	stop func()
	// The inspected rows' CONNECT target and what their client trusts:
	// the proxy's CA, whose leaf it presents (direct: the origin's own).
	inspectTarget string
	inspectRoots  *x509.CertPool
}

func startDirect(_ string, up *upstreams) (*running, error) {
	return &running{stop: func() {}, inspectTarget: up.tlsAddr, inspectRoots: up.roots}, nil
}

// startSelf starts the bench's own binary as a reference relay, in the
// mode flag (-relay, -loop) names, on a free port.
func startSelf(mode string) func(string, *upstreams) (*running, error) {
	return func(string, *upstreams) (*running, error) {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		addr := freePort()
		return startWith(addr, self, mode, addr)
	}
}

func freePort() string {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	defer l.Close()
	return l.Addr().String()
}

// waitListening waits until addr accepts connections (mitmproxy, a Python
// program, takes seconds to start on a busy VM).
func waitListening(addr string, cmd *exec.Cmd, exited <-chan struct{}) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("exited (%v) before listening on %s", cmd.ProcessState, addr)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not listening after 20s", addr)
}

func startCmd(addr string, name string, args ...string) (*exec.Cmd, func(), error) {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	// A bench that dies (or is interrupted) takes its proxies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop := func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(2 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	if err := waitListening(addr, cmd, exited); err != nil {
		stop()
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return cmd, stop, nil
}

func startWith(addr, name string, args ...string) (*running, error) {
	cmd, stop, err := startCmd(addr, name, args...)
	if err != nil {
		return nil, err
	}
	return &running{addr: addr, cmd: cmd, stop: stop}, nil
}

func startAirlock(dir string, up *upstreams) (*running, error) {
	self, _ := os.Executable()
	self, _ = filepath.EvalSymlinks(self)
	bundle := filepath.Join(dir, "bundle")
	os.MkdirAll(bundle, 0o755)
	preset := fmt.Sprintf(`package airlock.presets.bench

import data.airlock.lib

rules := [
	{"name": "bench", "binaries": [{"path": %q}], "hosts": ["127.0.0.2"], "ports": [%s, %s, %s]},
	{"name": "bench-mitm", "binaries": [{"path": %q}], "hosts": ["mitm.bench"], "ports": [%s], "inspect": true},
]

denies := []

decision := lib.decide(rules, denies)
`, self, port(up.plainURL[len("http://"):len(up.plainURL)-1]), port(up.tlsAddr), port(up.bulkAddr), self, port(up.tlsAddr))
	if err := os.WriteFile(filepath.Join(bundle, "bench.rego"), []byte(preset), 0o644); err != nil {
		return nil, err
	}
	// The load generator is the sandbox: in its own cgroup when it can make
	// one (root, cgroup v2), which gives airlock the O(1) connect hook;
	// otherwise as a process tree.
	who := []string{"--pid", fmt.Sprint(os.Getpid())}
	if cg, err := benchCgroup(); err == nil {
		who = []string{"--cgroup", cg}
	} else {
		fmt.Fprintln(os.Stderr, "airlock: identity by process-tree scan:", err)
	}
	addr := freePort()
	caDir := filepath.Join(dir, "airlock-ca")
	r, err := startWith(addr, *airlock, append(append([]string{"proxy", "--listen", addr, "--policy", bundle, "--preset", "bench"}, who...), "--allow-range", "127.0.0.2/32", "--resolve", "mitm.bench:"+port(up.tlsAddr)+":127.0.0.2",
		"--upstream-ca", up.caFile, "--ca-dir", caDir, "--audit-log", filepath.Join(dir, "audit.log"), "--log-level", "error")...)
	if err != nil {
		return nil, err
	}
	r.inspectTarget = "mitm.bench:" + port(up.tlsAddr)
	if r.inspectRoots, err = pool(filepath.Join(caDir, "ca.pem")); err != nil {
		r.stop()
		return nil, fmt.Errorf("the airlock CA: %w", err)
	}
	return r, nil
}

// benchCgroup moves the bench into a fresh cgroup v2 leaf, once for all
// rounds; leaveCgroup moves it back out and removes the leaf.
var benchCgroup = sync.OnceValues(func() (string, error) {
	cg, leave, err := cgroup2.Enter(fmt.Sprintf("airlock-bench-%d", os.Getpid()))
	if err == nil {
		leaveCgroup = leave
	}
	return cg, err
})

var leaveCgroup = func() {}

func startSquid(dir string, _ *upstreams) (*running, error) {
	if _, err := exec.LookPath("squid"); err != nil {
		return nil, errors.New("squid not installed (apt-get install squid)")
	}
	addr := freePort()
	sd, err := os.MkdirTemp(dir, "squid-") // squid drops to its own user: one fresh directory per start
	if err != nil {
		return nil, err
	}
	os.Chmod(sd, 0o777)
	conf := fmt.Sprintf(`http_port %s
http_access allow all
cache deny all
cache_mem 8 MB
access_log none
cache_store_log none
cache_log %s/cache.log
pid_filename %s/squid.pid
coredump_dir %s
workers 1
shutdown_lifetime 1 second
forwarded_for delete
via off
`, addr, sd, sd, sd)
	f := filepath.Join(sd, "squid.conf")
	os.WriteFile(f, []byte(conf), 0o644)
	return startWith(addr, "squid", "-N", "-f", f)
}

func startTinyproxy(dir string, _ *upstreams) (*running, error) {
	if _, err := exec.LookPath("tinyproxy"); err != nil {
		return nil, errors.New("tinyproxy not installed (apt-get install tinyproxy)")
	}
	addr := freePort()
	host, p, _ := net.SplitHostPort(addr)
	conf := fmt.Sprintf("Port %s\nListen %s\nTimeout 600\nMaxClients 512\nAllow 127.0.0.1\nLogLevel Critical\nDisableViaHeader Yes\n", p, host)
	if os.Geteuid() == 0 {
		conf += "User nobody\nGroup nogroup\n"
	}
	f := filepath.Join(dir, "tinyproxy.conf")
	os.WriteFile(f, []byte(conf), 0o644)
	return startWith(addr, "tinyproxy", "-d", "-c", f)
}
