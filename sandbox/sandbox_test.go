package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// TestMain is also stage 2 (the test binary re-executes itself, as the
// airlock binary does) and the escape attempts run inside the sandbox.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Stage2Arg { // the init, the command stage, the reaper
		RunStage2()
	}
	if name := os.Getenv("AIRLOCK_ESCAPE"); name != "" {
		os.Exit(attempt(name))
	}
	if n, err := strconv.Atoi(os.Getenv("AIRLOCK_HOLDER_CALLER")); err == nil {
		os.Exit(holderCaller(n))
	}
	if step := os.Getenv("AIRLOCK_KEYRING_LAUNCHER"); step != "" {
		os.Exit(keyringLauncher(step, os.Getenv("AIRLOCK_KEYRING_SECRET")))
	}
	os.Exit(m.Run())
}

// run starts the sandbox and returns the command's output and exit code.
func run(t testing.TB, c Config) (string, int, error) {
	t.Helper()
	return runWith(t, c, nil)
}

// runWith is run with setup called on the sandbox's network (when it has
// its own) before the sandbox starts.
func runWith(t testing.TB, c Config, setup func(*Network)) (string, int, error) {
	t.Helper()
	testutil.RequireRoot(t, "the sandbox launcher (uid switch, namespaces, Landlock)")
	var network *Network
	if c.Net != NetHost {
		nc := NetworkConfig{LocalPorts: c.ConnectPorts}
		if c.Net == NetProxy {
			nc.ProxyPort = c.ProxyPort
		}
		n, err := NewNetwork(nc)
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		network = n
		if setup != nil {
			setup(n)
		}
	}
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	c.Stdout, c.Stderr = out, os.Stderr
	p, err := Start(context.Background(), c, network)
	if err != nil {
		return "", 0, err
	}
	code, err := p.Wait()
	raw, _ := os.ReadFile(out.Name())
	return string(raw), code, err
}

// base is a sandbox that can run the test binary itself.
func base(t testing.TB, cmd ...string) Config {
	c := Defaults()
	c.Net = NetNone
	self, _ := os.Executable()
	c.Exec = append(c.Exec, filepath.Dir(self))
	c.Command = cmd
	c.Env = []string{"PATH=/usr/bin:/bin"}
	return c
}

func TestStatusOfTheSandboxedProcess(t *testing.T) {
	for _, tc := range []struct {
		keep []string
		mask string
	}{
		{nil, "0000000000000000"},
		{[]string{"CAP_NET_BIND_SERVICE"}, "0000000000000400"},
	} {
		c := base(t, "/bin/cat", "/proc/self/status")
		c.KeepCaps = tc.keep
		out, code, err := run(t, c)
		if err != nil || code != 0 {
			t.Fatalf("cat /proc/self/status: %v exit %d\n%s", err, code, out)
		}
		fields := map[string]string{}
		for _, line := range strings.Split(out, "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				fields[k] = strings.TrimSpace(v)
			}
		}
		want := map[string]string{
			"Uid": "998\t998\t998\t998", "Gid": "998\t998\t998\t998", "Groups": "998",
			"NoNewPrivs": "1", "Seccomp": "2",
			"CapInh": tc.mask, "CapPrm": tc.mask, "CapEff": tc.mask, "CapBnd": tc.mask, "CapAmb": tc.mask,
		}
		for k, v := range want {
			if fields[k] != v {
				t.Errorf("keep %v: %s = %q, want %q", tc.keep, k, fields[k], v)
			}
		}
		// Cross-check with the reviewers' tool.
		if capsh, err := exec.LookPath("capsh"); err == nil {
			dec, _ := exec.Command(capsh, "--decode="+fields["CapEff"]).Output()
			wantDec := "0x" + tc.mask + "="
			if len(tc.keep) > 0 {
				wantDec += "cap_net_bind_service"
			}
			if strings.TrimSpace(string(dec)) != wantDec {
				t.Errorf("capsh --decode=%s = %q, want %q", fields["CapEff"], dec, wantDec)
			}
		} else if testutil.Required() {
			t.Error("capsh is required to cross-check capabilities (apt-get install libcap2-bin)")
		}
	}
}

// attempt runs inside the sandbox: it tries one forbidden thing and prints
// what stopped it ("blocked: <reason>") or "ESCAPED".
func attempt(name string) int {
	arg := os.Getenv("AIRLOCK_ESCAPE_ARG")
	var err error
	switch name {
	case "tcp", "tcp-netns":
		var c net.Conn
		c, err = net.Dial("tcp", arg)
		if c != nil {
			c.Close()
		}
	case "udp":
		var c net.Conn
		if c, err = net.Dial("udp", "192.0.2.1:9"); err == nil {
			_, err = c.Write([]byte("x"))
			c.Close()
		}
	case "dns":
		_, err = net.LookupHost("escape.test")
	case "nft-delete":
		var conn *nftables.Conn
		if conn, err = nftables.New(); err == nil {
			conn.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: egressTable})
			err = conn.Flush()
		}
	case "raw":
		err = socketErr(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	case "packet":
		err = socketErr(unix.AF_PACKET, unix.SOCK_RAW, 0)
	case "mptcp":
		err = socketErr(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP)
	case "vsock":
		err = socketErr(unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	case "udplite":
		err = socketErr(unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_UDPLITE)
	case "smc":
		const ipprotoSMC = 256
		err = socketErr(unix.AF_INET, unix.SOCK_STREAM, ipprotoSMC)
	case "udp-socket":
		err = socketErr(unix.AF_INET6, unix.SOCK_DGRAM, 0)
		if err == nil {
			var fds [2]int
			if fds, err = unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0); err == nil {
				unix.Close(fds[0])
				unix.Close(fds[1])
				err = errMade
			}
		}
	case "netlink-audit":
		err = socketErr(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT)
	case "ptrace":
		pid, _ := strconv.Atoi(arg)
		err = unix.PtraceAttach(pid)
	case "tiocsti", "tiocsti-seccomp-off":
		c := byte('x')
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, 0, unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
		if errno != 0 {
			err = errno
		}
	case "sigqueue-init", "sigqueue-init-thread", "pidfd-siginfo-init", "setsig-init":
		err = signalInit(name)
	case "userns":
		err = unix.Unshare(unix.CLONE_NEWUSER)
	case "unshare-files":
		err = unix.Unshare(unix.CLONE_FILES)
	case "close-range-unshare":
		// A range of nothing: the flag alone would unshare the table.
		if _, _, errno := unix.RawSyscall(unix.SYS_CLOSE_RANGE, ^uintptr(0), ^uintptr(0), unix.CLOSE_RANGE_UNSHARE); errno != 0 {
			err = errno
		}
	case "pidfd-getfd":
		// Its own descriptor: the kernel would hand it over.
		pidfd, perr := unix.PidfdOpen(os.Getpid(), 0)
		if perr != nil {
			err = fmt.Errorf("pidfd_open: %w", perr)
			break
		}
		_, err = unix.PidfdGetfd(pidfd, 0, 0)
	case "kcmp":
		const kcmpFile = 0
		if _, _, errno := unix.RawSyscall6(unix.SYS_KCMP, uintptr(os.Getpid()), uintptr(os.Getpid()), kcmpFile, 0, 0, 0); errno != 0 {
			err = errno
		}
	case "thread-own-files":
		// The kernel would refuse these flags too (EINVAL: a thread
		// needs CLONE_SIGHAND); the filter refuses first, EPERM.
		if _, _, errno := unix.RawSyscall(unix.SYS_CLONE, unix.CLONE_THREAD, 0, 0); errno != 0 {
			err = errno
		}
	case "mount":
		err = unix.Mount("tmpfs", "/tmp", "tmpfs", 0, "")
	case "write":
		err = os.WriteFile(arg, []byte("x"), 0o644)
	case "read":
		_, err = os.ReadFile(arg)
	case "forkbomb":
		var kids []*exec.Cmd
		defer func() {
			for _, k := range kids {
				k.Process.Kill()
				k.Wait()
			}
		}()
		for i := 0; i < 200; i++ {
			k := exec.Command("/bin/sleep", "30")
			if err = k.Start(); err != nil {
				err = fmt.Errorf("after %d processes: %w", i, err)
				break
			}
			kids = append(kids, k)
		}
	case "setuid":
		var out []byte
		out, err = exec.Command(arg, "-u").Output()
		if err == nil && strings.TrimSpace(string(out)) != "0" {
			err = fmt.Errorf("setuid-root binary ran as euid %s", strings.TrimSpace(string(out)))
		}
	default:
		fmt.Println("unknown attempt", name)
		return 2
	}
	if err == nil {
		fmt.Println("ESCAPED")
		return 1
	}
	fmt.Println("blocked:", err)
	return 0
}

// signalInit sends the init a SIGSEGV the Go runtime would take for a
// fault of its own (its si_code not SI_USER or SI_TKILL): queued to pid 1,
// queued to another of the init's threads (which reaches its whole
// process), queued through a pidfd, or raised by the kernel for a pipe
// whose owner the init is made (F_SETOWN, F_SETSIG).
func signalInit(how string) error {
	info := unix.Siginfo{Signo: int32(unix.SIGSEGV), Code: -1} // SI_QUEUE
	var errno syscall.Errno
	switch how {
	case "sigqueue-init":
		_, _, errno = unix.Syscall(unix.SYS_RT_SIGQUEUEINFO, 1, uintptr(unix.SIGSEGV), uintptr(unsafe.Pointer(&info)))
	case "sigqueue-init-thread":
		tasks, err := os.ReadDir("/proc/1/task")
		if err != nil {
			return err
		}
		tid := 0
		for _, t := range tasks {
			if n, _ := strconv.Atoi(t.Name()); n != 1 {
				tid = n
			}
		}
		if tid == 0 {
			return errors.New("the init has no thread but its first")
		}
		_, _, errno = unix.Syscall(unix.SYS_RT_SIGQUEUEINFO, uintptr(tid), uintptr(unix.SIGSEGV), uintptr(unsafe.Pointer(&info)))
	case "pidfd-siginfo-init":
		pidfd, err := os.Open("/proc/1")
		if err != nil {
			return err
		}
		defer pidfd.Close()
		_, _, errno = unix.Syscall6(unix.SYS_PIDFD_SEND_SIGNAL, pidfd.Fd(), uintptr(unix.SIGSEGV), uintptr(unsafe.Pointer(&info)), 0, 0, 0)
	case "setsig-init":
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return err
		}
		defer unix.Close(p[0])
		defer unix.Close(p[1])
		if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETOWN, 1); err != nil {
			return err
		}
		if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETSIG, int(unix.SIGSEGV)); err != nil {
			return err
		}
		if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETFL, unix.O_ASYNC|unix.O_NONBLOCK); err != nil {
			return err
		}
		_, err := unix.Write(p[1], []byte("x"))
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// openDir is a temporary directory every user may traverse and read (the
// test's own temporary directories are 0700).
func openDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "airlock-sandbox-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o755)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// hostSocket listens on a Unix socket at path that any uid may connect
// to, for the test's life.
func hostSocket(t *testing.T, path string) string {
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	os.Chmod(path, 0o666)
	return path
}

// rootDir is a directory of the test's in /, where a sandbox sees the
// host's files (its /tmp is its own).
func rootDir(t *testing.T, mode os.FileMode) string {
	d, err := os.MkdirTemp("/", "airlock-sandbox-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	os.Chmod(d, mode)
	return d
}

// errMade is what attempt reports of sockets that should be, and were, made.
var errMade = errors.New("refused by nothing: the sockets were made")

func socketErr(domain, typ, proto int) error {
	fd, err := unix.Socket(domain, typ, proto)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

func TestEscapesFail(t *testing.T) {
	testutil.RequireRoot(t, "the sandbox escape suite")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	testutil.ServeConns(ln, func(net.Conn) {})
	// Readable by uid 998 as far as file modes go: only Landlock stops it.
	// Where the sandbox sees the host's files (not in /tmp, which is its
	// own): Landlock, not a missing file, is what stops the read.
	secret := filepath.Join(rootDir(t, 0o755), "secret")
	os.WriteFile(secret, []byte("s"), 0o644)
	// A setuid-root copy of id: no_new_privs must keep it at uid 998.
	suidDir := openDir(t)
	suid := filepath.Join(suidDir, "id")
	raw, _ := os.ReadFile("/usr/bin/id")
	os.WriteFile(suid, raw, 0o755)
	os.Chown(suid, 0, 0)
	os.Chmod(suid, 0o4755)

	selfCopy := copySelf(t, suidDir)

	for _, tc := range []struct {
		name, arg string
		want      error // the errno expected, nil: any error
		net       Net
	}{
		{"tcp", ln.Addr().String(), unix.ECONNREFUSED, NetProxy},      // nft: a loopback port not allowed is reset
		{"tcp", ln.Addr().String(), unix.EACCES, NetNone},             // Landlock: no connect port given
		{"tcp-netns", ln.Addr().String(), unix.ECONNREFUSED, NetNone}, // without Landlock's rule: another loopback
		{"udp", "", unix.EPERM, NetProxy},                             // nft: rejected, not port 53
		{"udp", "", unix.ENETUNREACH, NetNone},
		{"dns", "", unix.ECONNREFUSED, NetProxy}, // the query lands on the DNS socket (closed here), never outside
		{"dns", "", nil, NetNone},
		{"nft-delete", "", unix.EPERM, NetProxy}, // no CAP_NET_ADMIN (seccomp off below: the capability is what stops it)
		{"raw", "", unix.EPERM, NetNone},
		// Only the socket families and inet protocols the network and
		// Landlock's rules account for: packet without the filter is
		// EPERM (no CAP_NET_RAW), MPTCP and UDP-Lite are made.
		{"packet", "", unix.EAFNOSUPPORT, NetNone},
		{"mptcp", "", unix.EPROTONOSUPPORT, NetNone},
		{"smc", "", unix.EPROTONOSUPPORT, NetNone},
		{"udplite", "", unix.EPROTONOSUPPORT, NetNone},
		{"vsock", "", unix.EAFNOSUPPORT, NetNone},
		// What is allowed still is: the attempt fails only as "refused
		// by nothing".
		{"udp-socket", "", errMade, NetNone},
		{"netlink-audit", "", unix.EPERM, NetNone},
		{"ptrace", strconv.Itoa(os.Getpid()), unix.EPERM, NetNone},
		{"userns", "", unix.EPERM, NetNone},
		// A file table only a thread holds would hide a socket's holder
		// from the proxy's attribution.
		{"unshare-files", "", unix.EPERM, NetNone},
		{"close-range-unshare", "", unix.EPERM, NetNone},
		// Another process's descriptor (its allowed connection, for a
		// binary that may not connect), or a comparison of them.
		{"pidfd-getfd", "", unix.EPERM, NetNone},
		{"kcmp", "", unix.EPERM, NetNone},
		{"thread-own-files", "", unix.EPERM, NetNone},
		// Each would crash the init, and the sandbox with it.
		{"sigqueue-init", "", unix.EPERM, NetNone},
		{"sigqueue-init-thread", "", unix.EPERM, NetNone},
		{"pidfd-siginfo-init", "", unix.EPERM, NetNone},
		{"setsig-init", "", unix.EPERM, NetNone},
		{"tiocsti", "", unix.EPERM, NetNone}, // without the filter: ENOTTY, stdin is no terminal here
		// --seccomp off keeps the terminal's filter: what TIOCSTI types
		// the user's shell runs.
		{"tiocsti-seccomp-off", "", unix.EPERM, NetNone},
		{"mount", "", unix.EPERM, NetNone},
		// Stopped by the read-only mount before Landlock is asked.
		{"write", "/etc/airlock-escape", unix.EROFS, NetNone},
		{"read", secret, unix.EACCES, NetNone},
		{"setuid", suid, nil, NetNone},
	} {
		t.Run(tc.name+"/"+string(tc.net), func(t *testing.T) {
			c := base(t, selfCopy)
			c.Net = tc.net
			if tc.net == NetProxy {
				c.ProxyPort = 3128
			}
			c.Exec = append(c.Exec, suidDir)
			switch tc.name {
			case "tcp-netns":
				c.Landlock = LandlockOff
			case "sigqueue-init", "sigqueue-init-thread", "pidfd-siginfo-init", "setsig-init":
				// Landlock's signal scope (ABI 6, Linux 6.12) stops any
				// signal to the init; the filter is what stops it on
				// older kernels.
				c.Landlock = LandlockOff
			case "nft-delete", "tiocsti-seccomp-off":
				c.Seccomp = false
			}
			c.Env = append(c.Env, "AIRLOCK_ESCAPE="+tc.name, "AIRLOCK_ESCAPE_ARG="+tc.arg)
			out, code, err := runWith(t, c, func(n *Network) {
				// Nothing answers DNS here (the proxy does in a pod):
				// a query that lands on a closed socket is refused.
				for _, pc := range n.DNSPackets {
					pc.Close()
				}
			})
			if err != nil {
				t.Fatalf("launch: %v", err)
			}
			if code != 0 || !strings.HasPrefix(out, "blocked:") {
				t.Fatalf("%s: exit %d, %q", tc.name, code, out)
			}
			if tc.want != nil && !strings.Contains(out, tc.want.Error()) {
				t.Fatalf("%s was stopped by %q, want %q", tc.name, strings.TrimSpace(out), tc.want)
			}
			t.Logf("%s: %s", tc.name, strings.TrimSpace(out))
		})
	}
}

// copySelf copies the test binary into dir, where uid 998 may execute it.
func copySelf(t *testing.T, dir string) string {
	selfCopy := filepath.Join(dir, "sandbox.test")
	self, _ := os.Executable()
	bin, _ := os.ReadFile(self)
	os.WriteFile(selfCopy, bin, 0o755)
	return selfCopy
}

// ConnectPorts open those ports of the pod's loopback, and only those, to
// the sandbox: a service listening on a port not given is as closed to it
// as the host. With --net none Landlock refuses the others; with --net
// proxy the nft table does, and Landlock leaves connect alone so that a
// connection to any other host reaches the redirect (Landlock would see
// port 443 and refuse it).
func TestConnectPorts(t *testing.T) {
	testutil.RequireRoot(t, "Landlock network rules")
	const allowed, other = 8901, 18789
	dir := openDir(t)
	self := copySelf(t, dir)
	for _, tc := range []struct {
		net  Net
		addr string
		want string // "" connects
	}{
		{NetProxy, "127.0.0.1:8901", ""},
		{NetProxy, "127.0.0.1:3128", ""}, // the proxy's port stays open
		{NetProxy, "127.0.0.1:18789", unix.ECONNREFUSED.Error()},
		{NetProxy, "192.0.2.1:443", ""}, // redirected to the transparent listener
		{NetNone, "127.0.0.1:8901", ""},
		{NetNone, "127.0.0.1:18789", unix.EACCES.Error()},
	} {
		t.Run(fmt.Sprintf("%s/%s", tc.net, tc.addr), func(t *testing.T) {
			c := base(t, self)
			c.Exec = append(c.Exec, dir)
			c.Net = tc.net
			if tc.net == NetProxy {
				c.ProxyPort = 3128
			}
			c.ConnectPorts = []int{allowed}
			c.Env = append(c.Env, "AIRLOCK_ESCAPE=tcp", "AIRLOCK_ESCAPE_ARG="+tc.addr)
			out, code, err := runWith(t, c, func(n *Network) {
				// Both ports are served, so only the rules can refuse.
				listenIn(t, n, allowed, "")
				listenIn(t, n, other, "")
			})
			if err != nil {
				t.Fatalf("launch: %v", err)
			}
			out = strings.TrimSpace(out)
			switch {
			case tc.want == "" && (code != 1 || out != "ESCAPED"): // the attempt connected
				t.Fatalf("connect to %s with ConnectPorts %v: exit %d, %q; want connected", tc.addr, c.ConnectPorts, code, out)
			case tc.want != "" && (code != 0 || !strings.Contains(out, tc.want)):
				t.Fatalf("connect to %s with ConnectPorts %v: exit %d, %q; want %s", tc.addr, c.ConnectPorts, code, out, tc.want)
			}
		})
	}
}

func TestValidateConnectPorts(t *testing.T) {
	for _, tc := range []struct {
		net   Net
		ports []int
		want  string // "" is valid
	}{
		{NetProxy, []int{1, 8901, 65535}, ""},
		{NetNone, []int{8901}, ""},
		{NetProxy, []int{0}, "connect port 0 is out of range"},
		{NetProxy, []int{65536}, "connect port 65536 is out of range"},
		{NetNone, []int{-1}, "connect port -1 is out of range"},
		{NetHost, []int{8901}, "need the sandbox's own network"},
	} {
		c := Defaults()
		c.Command = []string{"/bin/true"}
		c.Net, c.ProxyPort, c.ConnectPorts = tc.net, 3128, tc.ports
		err := c.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(net %s, connect ports %v) = %v; want %q", tc.net, tc.ports, err, tc.want)
		}
	}
}

// A path the sandbox names is absolute and has no "..": after a link,
// the kernel's ".." is the parent of where the link leads, not where the
// path's text puts it.
func TestValidatePaths(t *testing.T) {
	for _, tc := range []struct {
		change func(c *Config)
		want   string // "" is valid
	}{
		{func(c *Config) { c.RO = append(c.RO, "/srv/job/a..b") }, ""},
		{func(c *Config) { c.RO = append(c.RO, "srv/job") }, `Landlock path "srv/job" must be absolute`},
		{func(c *Config) { c.RW = append(c.RW, "/srv/job/link/../x") }, `Landlock path "/srv/job/link/../x" must be absolute, without ..`},
		{func(c *Config) { c.Exec = append(c.Exec, "/opt/..") }, "without .."},
		{func(c *Config) { c.Dir = "/srv/job/../x" }, `working directory "/srv/job/../x" must be absolute, without ..`},
	} {
		c := Defaults()
		c.Command, c.Net = []string{"/bin/true"}, NetNone
		tc.change(&c)
		err := c.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate = %v; want %q", err, tc.want)
		}
	}
}

// A sandbox keeps only capabilities that reach no further than its own
// processes and memory: one that would undo a boundary is refused, named.
func TestValidateKeepCaps(t *testing.T) {
	for _, tc := range []struct {
		keep []string
		want string // "" is valid
	}{
		{[]string{"CAP_NET_BIND_SERVICE", "kill", "cap_ipc_lock"}, ""},
		{[]string{"CAP_NET_ADMIN"}, `capability "CAP_NET_ADMIN" would undo the sandbox's boundaries; those a sandbox may keep: CAP_NET_BIND_SERVICE, CAP_KILL, CAP_IPC_LOCK`},
		{[]string{"sys_admin"}, `capability "sys_admin" would undo`},
		{[]string{"CAP_DAC_READ_SEARCH"}, "would undo"},
		{[]string{"CAP_SETUID"}, "would undo"},
		{[]string{"CAP_FLY"}, `unknown capability "CAP_FLY"`},
	} {
		c := Defaults()
		c.Command = []string{"/bin/true"}
		c.Net, c.KeepCaps = NetNone, tc.keep
		err := c.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(keep %v) = %v; want %q", tc.keep, err, tc.want)
		}
	}
}

func TestLandlockHardRefusesWithoutKernelSupport(t *testing.T) {
	c := base(t, "/bin/true")
	c.LandlockABI = -1 // as on a kernel without Landlock
	_, _, err := run(t, c)
	var se *SetupError
	if !errors.As(err, &se) || se.Step != "open landlock paths" || !strings.Contains(se.Err, "refusing to start") {
		t.Fatalf("hard Landlock on a kernel without it = %v; want a refusal naming the step", err)
	}

	// Best effort runs, and says what it skipped.
	c.Landlock = LandlockBestEffort
	c.LandlockABI = 3 // file system rules, no network rules
	stderr := captureStderr(t, func() {
		if _, code, err := run(t, c); err != nil || code != 0 {
			t.Fatalf("best-effort launch: %v exit %d", err, code)
		}
	})
	if !strings.Contains(stderr, "NOT enforced: Landlock network rules") {
		t.Fatalf("best-effort did not say what it skipped; stderr: %q", stderr)
	}

	// --net proxy needs no Landlock network rules (the nft table limits
	// connects): hard mode starts on a kernel without them, and says
	// what ABI 3 lacks beyond the rules.
	c.Landlock = LandlockHard
	c.Net, c.ProxyPort = NetProxy, 3128
	stderr = captureStderr(t, func() {
		if _, code, err := run(t, c); err != nil || code != 0 {
			t.Fatalf("--net proxy, hard Landlock, ABI 3: %v exit %d; want it to start", err, code)
		}
	})
	for _, want := range []string{"NOT enforced: Landlock device ioctl rights (ABI 3 < 5)", "NOT enforced: Landlock scoping (ABI 3 < 6)"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("hard Landlock at ABI 3 did not say %q; stderr: %q", want, stderr)
		}
	}

	// Before ABI 3 a read-only file is not kept from truncate(2): hard
	// mode refuses to start.
	c.LandlockABI = 2
	_, _, err = run(t, c)
	if !errors.As(err, &se) || !strings.Contains(se.Err, "truncate") {
		t.Fatalf("hard Landlock at ABI 2 = %v; want a refusal naming truncate", err)
	}
}

func captureStderr(t *testing.T, f func()) string {
	r, w, _ := os.Pipe()
	old := os.Stderr
	os.Stderr = w
	f()
	os.Stderr = old
	w.Close()
	var b bytes.Buffer
	b.ReadFrom(r)
	return b.String()
}

func TestSetupFailureNamesTheStep(t *testing.T) {
	c := base(t, "/bin/true")
	c.RO = append(c.RO, "/nonexistent/airlock")
	_, _, err := run(t, c)
	var se *SetupError
	if !errors.As(err, &se) || se.Step != "open landlock paths" || !strings.Contains(se.Err, "/nonexistent/airlock") {
		t.Fatalf("launch with a missing Landlock path = %v", err)
	}
}

func TestExitCodes(t *testing.T) {
	if _, code, _ := run(t, base(t, "/bin/sh", "-c", "exit 7")); code != 7 {
		t.Fatalf("exit 7 → %d", code)
	}
	if _, code, _ := run(t, base(t, "/bin/sh", "-c", "kill -TERM $$")); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("killed by SIGTERM → %d, want %d", code, 128+int(syscall.SIGTERM))
	}
}

// The command cannot end or crash the sandbox's init (PID 1, its uid)
// with signals, synchronous ones sent by kill(2) included; and the
// command's own dispositions are the defaults, nothing the init ignores.
// Landlock off: its signal scope (ABI 6) would refuse the kill itself,
// and the init must hold on kernels without it.
func TestInitTakesNoSignalsFromInside(t *testing.T) {
	// The command may run before the init has dropped to its uid (until
	// then its signals are refused, EPERM): it waits for that first.
	c := base(t, "/bin/sh", "-c",
		`while ! grep -q "^Uid:[[:space:]]*$(id -u)[[:space:]]" /proc/1/status; do sleep 0.01; done; `+
			"for s in TERM INT HUP QUIT ABRT SEGV BUS FPE ILL TRAP USR1 USR2 PIPE ALRM; do kill -$s 1 || exit 1; done; sleep 0.2; echo alive; kill -INT $$")
	c.Landlock = LandlockOff
	out, code, err := run(t, c)
	if err != nil || code != 128+int(syscall.SIGINT) || out != "alive\n" {
		t.Fatalf("signals to the init: %v exit %d %q; want %q and exit %d (the command killed by its own SIGINT)", err, code, out, "alive\n", 128+int(syscall.SIGINT))
	}
}

func TestEnvironmentIsExplicit(t *testing.T) {
	t.Setenv("AIRLOCK_SECRET_TOKEN", "leak")
	t.Setenv("NOTIFY_SOCKET", "/run/systemd/notify")
	env, err := Environment(EnvOptions{Set: []string{"FOO=bar"}, ProxyURL: "http://127.0.0.1:3128", CABundle: "/ca.pem"})
	if err != nil {
		t.Fatal(err)
	}
	c := base(t, "/usr/bin/env")
	c.Env = env
	out, _, err := run(t, c)
	if err != nil {
		t.Fatal(err)
	}
	// GOMAXPROCS: the stage processes' own environment (stageEnv).
	for _, bad := range []string{"AIRLOCK_SECRET_TOKEN", "NOTIFY_SOCKET", "leak", "GOMAXPROCS"} {
		if strings.Contains(out, bad) {
			t.Errorf("the sandbox environment contains %s:\n%s", bad, out)
		}
	}
	for _, want := range []string{"FOO=bar", "HTTPS_PROXY=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128", "NODE_USE_ENV_PROXY=1", "GIT_SSL_CAINFO=/ca.pem", "SSL_CERT_FILE=/ca.pem", "NO_PROXY=localhost,127.0.0.1,::1"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("the sandbox environment lacks %s", want)
		}
	}
}

func TestForkBombStoppedByPidsMax(t *testing.T) {
	testutil.RequireRoot(t, "cgroup pids.max")
	leaf, err := NewLeaf(LeafConfig{ID: fmt.Sprintf("test-%d", os.Getpid()), PidsMax: 24})
	if err != nil {
		t.Fatalf("cgroup with pids.max: %v", err)
	}
	defer leaf.Destroy()
	dir := openDir(t)
	selfCopy := filepath.Join(dir, "sandbox.test")
	self, _ := os.Executable()
	bin, _ := os.ReadFile(self)
	os.WriteFile(selfCopy, bin, 0o755)
	c := base(t, selfCopy)
	c.Exec = append(c.Exec, dir)
	c.Cgroups = leaf.Joined
	c.Env = append(c.Env, "AIRLOCK_ESCAPE=forkbomb")
	out, code, err := run(t, c)
	if err != nil || code != 0 || !strings.Contains(out, "resource temporarily unavailable") {
		t.Fatalf("fork bomb under pids.max=24: %v exit %d %q", err, code, out)
	}
	t.Log(strings.TrimSpace(out))
}

// The command is in each of its leaf's groups from its start: born in the
// v2 leaf (CLONE_INTO_CGROUP) and written into the v1 ones a hybrid host
// enforces limits with.
func TestCommandJoinsItsGroups(t *testing.T) {
	testutil.RequireRoot(t, "cgroups")
	id := fmt.Sprintf("test-join-%d", os.Getpid())
	leaf, err := NewLeaf(LeafConfig{ID: id, PidsMax: 64, MemoryMax: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer leaf.Destroy()
	c := base(t, "/bin/cat", "/proc/self/cgroup")
	c.Cgroups = leaf.Joined
	out, code, err := run(t, c)
	if err != nil || code != 0 {
		t.Fatalf("cat /proc/self/cgroup: %v exit %d\n%s", err, code, out)
	}
	in := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasSuffix(line, ":/"+LeafName(id)) {
			in++
		}
	}
	if in != len(leaf.Joined) {
		t.Errorf("the command is in %d of its %d groups %v:\n%s", in, len(leaf.Joined), leaf.Joined, out)
	}
}

// BenchmarkLaunch is the launcher's overhead: /bin/true in a full sandbox
// (network namespace, Landlock, seccomp) against a plain fork and exec.
func BenchmarkLaunch(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sandbox", func(b *testing.B) {
		testutil.RequireRoot(b, "the sandbox launcher")
		c := Defaults()
		c.Net = NetNone
		c.Command = []string{"/bin/true"}
		c.Env = []string{"PATH=/usr/bin:/bin"}
		for i := 0; i < b.N; i++ {
			n, err := NewNetwork(NetworkConfig{})
			if err != nil {
				b.Fatal(err)
			}
			p, err := Start(context.Background(), c, n)
			if err != nil {
				b.Fatal(err)
			}
			if code, err := p.Wait(); err != nil || code != 0 {
				b.Fatalf("exit %d: %v", code, err)
			}
			n.Close()
		}
	})
}

// Destroy kills whatever is in the groups, forks in flight included, and
// removes them: through cgroup.kill on v2, and by freezing before killing
// on a v1 freezer (a host without a v2 leaf).
func TestDestroyKillsAndRemoves(t *testing.T) {
	testutil.RequireRoot(t, "cgroups")
	name := fmt.Sprintf("airlock-destroy-%d", os.Getpid())
	for _, tc := range []struct {
		hierarchy string
		leaf      func(dir string) *Leaf
	}{
		{"v2", func(dir string) *Leaf { return &Leaf{V2: dir, Joined: []string{dir}} }},
		{"v1 freezer", func(dir string) *Leaf { return &Leaf{freezer: dir, Joined: []string{dir}} }},
	} {
		t.Run(tc.hierarchy, func(t *testing.T) {
			var dir string
			var err error
			if tc.hierarchy == "v2" {
				mnt, merr := cgroup2.Mount()
				if merr != nil {
					t.Fatal(merr)
				}
				dir, err = cgroup2.Create(mnt, name)
			} else {
				dir, err = createV1("freezer", "", name)
			}
			if err != nil {
				t.Fatal(err)
			}
			// A failing run must not leave its group behind either.
			t.Cleanup(func() { destroyGroups("", "", []string{dir}) })
			l := tc.leaf(dir)
			// A shell that keeps forking: whatever it has started when
			// the kill comes must die too. It forks only once it is in
			// the group (a line on its stdin): a sleep forked before
			// would outlive the test.
			sh := exec.Command("/bin/sh", "-c", "read go; while :; do sleep 300 & done")
			start, err := sh.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := sh.Start(); err != nil {
				t.Fatal(err)
			}
			if err := cgroup2.Add(dir, sh.Process.Pid); err != nil {
				sh.Process.Kill()
				t.Fatal(err)
			}
			io.WriteString(start, "go\n")
			for len(procs(dir)) < 5 {
				time.Sleep(10 * time.Millisecond)
			}
			left := procs(dir)
			if err := l.Destroy(); err != nil {
				t.Fatalf("Destroy: %v", err)
			}
			sh.Wait()
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("%s still exists", dir)
			}
			for _, pid := range left {
				if err := syscall.Kill(pid, 0); err == nil {
					if raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(raw), ") Z") {
						t.Errorf("pid %d of the group survived", pid)
					}
				}
			}
		})
	}
}

// Under a parent a tree reaper covers (a pod's), a leaf starts no reaper
// of its own: a limit that v2 does not offer there puts its group in a v1
// group of the parent's name (a hybrid host's), which the tree reaper
// removes with the tree when the launcher is gone.
func TestLeafUnderAReapedParent(t *testing.T) {
	testutil.RequireRoot(t, "cgroups")
	mnt, err := cgroup2.Mount()
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("airlock-reaped-%d", os.Getpid())
	parent, err := cgroup2.Create(mnt, name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { RemoveTree(parent); RemoveV1Tree(name) }()
	reaper, err := StartTreeReaper(parent)
	if err != nil {
		t.Fatal(err)
	}
	// Pids enabled below the parent where v2 offers it: its limit is in
	// the v2 leaf. Memory not: on a hybrid host its limit is a v1 group
	// (on a host of v2 only, that case is not there to run).
	os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+pids"), 0)
	cases := []struct {
		id       string
		mem, pid int64
	}{{"nolimit", 0, 0}, {"pidsmax", 0, 64}}
	if _, err := os.Stat("/sys/fs/cgroup/memory/cgroup.procs"); err == nil {
		cases = append(cases, struct {
			id       string
			mem, pid int64
		}{"memmax", 64 << 20, 0})
	}
	var leaves []*Leaf
	for _, tc := range cases {
		l, err := NewLeaf(LeafConfig{Parent: parent, ID: tc.id, MemoryMax: tc.mem, PidsMax: tc.pid, Reap: true, ParentReaped: true})
		if err != nil {
			t.Fatal(err)
		}
		leaves = append(leaves, l)
		if l.reaper != nil {
			t.Errorf("%s: a reaper of its own, under a reaped parent", tc.id)
		}
		for _, d := range l.Joined {
			v1 := filepath.Base(filepath.Dir(d)) == name && filepath.Dir(filepath.Dir(filepath.Dir(d))) == "/sys/fs/cgroup"
			if !strings.HasPrefix(d, parent+"/") && !v1 {
				t.Errorf("%s: group %s neither under the parent nor under the v1 group of its name", tc.id, d)
			}
		}
	}
	reaper.Release() // the launcher gone, its tree not removed
	for _, l := range leaves {
		for _, d := range l.Joined {
			if _, err := os.Stat(d); !os.IsNotExist(err) {
				t.Errorf("group %s outlived the tree's reaper (%v)", d, err)
			}
		}
	}
	for _, ctrl := range []string{"memory", "pids"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", ctrl, name)); !os.IsNotExist(err) {
			t.Errorf("the v1 %s group of the tree's name outlived its reaper (%v)", ctrl, err)
		}
	}
}

// One sandbox cannot signal another its launcher started, under the same
// uid, by signalling its process group (kill(0, sig)): each init leads a
// group of its own. ABI 5 is a kernel whose Landlock cannot scope signals,
// where the process group is all that stands between them.
func TestSandboxesDoNotShareAProcessGroup(t *testing.T) {
	testutil.RequireRoot(t, "network namespaces and sandboxes")
	for _, abi := range []int{0, 5} {
		victim := base(t, "/bin/sleep", "30")
		victim.LandlockABI = abi
		nv, err := NewNetwork(NetworkConfig{})
		if err != nil {
			t.Fatal(err)
		}
		pv, err := Start(context.Background(), victim, nv)
		if err != nil {
			nv.Close()
			t.Fatal(err)
		}
		attacker := base(t, "/bin/sh", "-c", "kill -KILL 0")
		attacker.LandlockABI = abi
		if _, code, err := run(t, attacker); err != nil || code != 128+int(syscall.SIGKILL) {
			t.Errorf("abi %d: the attacker exited %d, %v; want killed by its own SIGKILL", abi, code, err)
		}
		select {
		case <-pv.Done():
			code, _ := pv.Wait()
			t.Errorf("abi %d: the other sandbox ended (%d) when its sibling signalled its process group", abi, code)
		case <-time.After(time.Second):
			pv.Signal(syscall.SIGKILL)
			pv.Wait()
		}
		nv.Close()
	}
}

// Every thread of the init is in the sandbox's network namespace: one left
// in the host's would show the host's interfaces, routes and sockets to the
// sandbox through /proc/1/task/N/net.
func TestInitThreadsInTheSandboxNetwork(t *testing.T) {
	testutil.RequireRoot(t, "the sandbox launcher (namespaces)")
	c := base(t, "/bin/sleep", "30")
	n, err := NewNetwork(NetworkConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	p, err := Start(context.Background(), c, n)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Signal(syscall.SIGKILL); p.Wait() }()
	var want unix.Stat_t
	if err := unix.Fstat(int(n.NS), &want); err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.Pid))
	if err != nil || len(tasks) < 2 {
		t.Fatalf("the init's threads: %v, %v", tasks, err)
	}
	for _, task := range tasks {
		var got unix.Stat_t
		if err := unix.Stat(fmt.Sprintf("/proc/%d/task/%s/ns/net", p.Pid, task.Name()), &got); err != nil {
			t.Fatal(err)
		}
		if got.Ino != want.Ino || got.Dev != want.Dev {
			t.Errorf("thread %s of the init is in network namespace %d, not the sandbox's %d", task.Name(), got.Ino, want.Ino)
		}
	}
}

// The host's Unix sockets under /run are out of the sandbox's reach
// (Landlock does not mediate connect() by path): /run is an empty tmpfs
// there, but for the paths the sandbox names under it, mounted back. A
// path that would show a host resolver's sockets refuses the start.
func TestHostSocketsHidden(t *testing.T) {
	testutil.RequireRoot(t, "sandboxes, and a socket under /run")
	py := testutil.RequireTool(t, "/usr/bin/python3")
	sock := hostSocket(t, fmt.Sprintf("/run/airlock-test-%d.sock", os.Getpid()))
	kept := fmt.Sprintf("/run/airlock-test-%d", os.Getpid())
	if err := os.MkdirAll(kept, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(kept)
	os.WriteFile(kept+"/x", []byte("kept"), 0o644)
	c := base(t, py, "-c", `import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); print("reached")
except OSError as e:
    print(e.strerror)
print(open(sys.argv[2]).read())`, sock, kept+"/x")
	c.RO = append(c.RO, kept)
	out, code, err := run(t, c)
	if err != nil || code != 0 || out != "No such file or directory\nkept\n" {
		t.Fatalf("exit %d, %v, output %q; want the socket missing and the named path read", code, err, out)
	}
	// A resolver's directory, made for the test where the host has none.
	if _, err := os.Stat("/run/nscd"); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir("/run/nscd", 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.Remove("/run/nscd")
	}
	c.RO = append(c.RO, "/run/nscd")
	_, _, err = run(t, c)
	var se *SetupError
	if !errors.As(err, &se) || !strings.Contains(se.Err, "resolver's sockets in /run/nscd") {
		t.Fatalf("--ro /run/nscd = %v; want a refusal naming the resolver's sockets", err)
	}
}

// The host's /tmp and /var/tmp hold other programs' sockets (tmux's
// server runs commands for whoever connects), reachable by path whatever
// Landlock says: the sandbox has its own of both, on any network, by an
// absolute path or one relative to where it starts, even when the
// launcher starts there. What it is given below them is there; what it
// writes there stays its own.
func TestTmpIsPrivate(t *testing.T) {
	testutil.RequireRoot(t, "sandboxes, and a socket in /tmp")
	py := testutil.RequireTool(t, "/usr/bin/python3")
	dir := filepath.Join("/tmp", fmt.Sprintf("airlock-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := hostSocket(t, filepath.Join(dir, "s"))
	varSock := hostSocket(t, fmt.Sprintf("/var/tmp/airlock-test-%d.sock", os.Getpid()))
	given := t.TempDir() // below /tmp too, or where TMPDIR says
	os.Chmod(given, 0o755)
	os.WriteFile(filepath.Join(given, "x"), []byte("given"), 0o644)
	made := filepath.Join("/tmp", fmt.Sprintf("airlock-test-%d-made", os.Getpid()))
	defer os.Remove(made)
	script := `import os, socket, sys
for p in sys.argv[1:4]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(p); print("reached", p)
    except OSError as e:
        print(e.strerror)
print(open(sys.argv[4]).read())
for p in sys.argv[5:7]:
    try:
        open(p, "w").write("x"); print("made")
    except OSError as e:
        print(e.strerror)
print(oct(os.stat("/tmp").st_mode & 0o7777))
print(os.getcwd())`
	// A directory of the host's given to write, below /tmp.
	out := filepath.Join("/tmp", fmt.Sprintf("airlock-test-%d-out", os.Getpid()))
	if err := os.Mkdir(out, 0o777); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(out)
	os.Chmod(out, 0o777)
	rel, _ := filepath.Rel("/tmp", sock)
	for _, tc := range []struct {
		name string
		net  Net
		dir  string // Config.Dir
		cwd  string // the launcher's
		rw   bool   // --rw /tmp
	}{
		{"no network", NetNone, "", "", true},
		{"host network", NetHost, "", "", true},
		{"started in /tmp", NetNone, "/tmp", "", true},
		{"launched from /tmp", NetNone, "", "/tmp", true},
		{"not given /tmp", NetNone, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cwd != "" {
				t.Chdir(tc.cwd)
			}
			c := base(t, py, "-c", script, sock, varSock, rel, filepath.Join(given, "x"), made, filepath.Join(out, "x"))
			c.Net, c.Dir = tc.net, tc.dir
			c.RO, c.RW = append(c.RO, given), append(c.RW, out)
			madeLine := "Read-only file system\n" // its own, as the host's is
			if tc.rw {
				c.RW, madeLine = append(c.RW, "/tmp"), "made\n"
			}
			wd, _ := os.Getwd()
			if tc.dir != "" {
				wd = tc.dir
			}
			want := "No such file or directory\nNo such file or directory\nNo such file or directory\ngiven\n" + madeLine + "made\n0o1777\n" + wd + "\n"
			if got, code, err := run(t, c); err != nil || code != 0 || got != want {
				t.Fatalf("exit %d, %v, output %q; want %q: the host's sockets missing, the given path read, a file made in /tmp only when given it, one in the given directory, started where asked or launched", code, err, got, want)
			}
			if _, err := os.Stat(made); err == nil {
				t.Fatalf("what the sandbox wrote to its /tmp is in the host's")
			}
			if _, err := os.Stat(filepath.Join(out, "x")); err != nil {
				t.Fatalf("what the sandbox wrote to the directory it was given below /tmp: %v", err)
			}
			os.Remove(filepath.Join(out, "x"))
		})
	}
	// Nor does the init hold the launcher's directory, which its
	// /proc/1/cwd would lead to.
	t.Chdir("/tmp")
	c := base(t, "/bin/sleep", "30")
	c.Net = NetHost
	p, err := Start(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Signal(syscall.SIGKILL); p.Wait() }()
	if got, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", p.Pid)); err != nil || got != "/" {
		t.Errorf("the init's directory = %q, %v; want /", got, err)
	}
}

// A launcher that runs from a directory the sandbox's uid may not enter
// (root in its 0700 home) starts the command there all the same, as it
// did when the directory was inherited: it is entered as root, by its
// path among the sandbox's mounts. One the sandbox does not have (the
// host's, under the hidden /run) refuses the start, saying why.
func TestStartsInItsDirectory(t *testing.T) {
	testutil.RequireRoot(t, "sandboxes, and a directory of root's")
	private := rootDir(t, 0o700)
	t.Chdir(private)
	out, code, err := run(t, base(t, "/bin/pwd"))
	if err != nil || code != 0 || out != private+"\n" {
		t.Fatalf("launched from %s (0700): exit %d, %v, %q; want it started there", private, code, err, out)
	}
	hidden := fmt.Sprintf("/run/airlock-test-%d", os.Getpid())
	if err := os.Mkdir(hidden, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(hidden) })
	c := base(t, "/bin/pwd")
	c.Dir = hidden
	_, _, err = run(t, c)
	var se *SetupError
	if !errors.As(err, &se) || !strings.Contains(se.Err, "the sandbox does not have it") {
		t.Fatalf("started in a directory the sandbox lacks: %v; want a refusal that says so", err)
	}
}

// A directory that root may not enter but the sandbox's uid may (a
// user's FUSE mount without allow_other, as sshfs makes) is entered as
// that uid, after the switch: the sandbox starts there; and given to it,
// it is there to read, in /tmp as elsewhere.
func TestStartsInADirectoryOnlyItsUIDMayEnter(t *testing.T) {
	c := base(t, "/bin/pwd")
	own := testutil.OwnFUSE(t, c.UID)
	if err := unix.Access(own, unix.X_OK); !errors.Is(err, unix.EACCES) {
		t.Fatalf("root's access to a FUSE mount without allow_other: %v; want EACCES, or the test proves nothing", err)
	}
	c.Dir = own
	out, code, err := run(t, c)
	if err != nil || code != 0 || out != own+"\n" {
		t.Fatalf("started in %s, which only uid %d may enter: exit %d, %v, %q; want it started there", own, c.UID, code, err, out)
	}
	c = base(t, "/bin/ls", "-A", own)
	c.RO = append(c.RO, own)
	out, code, err = run(t, c)
	if err != nil || code != 0 || out != "" {
		t.Fatalf("ls of %s, given: exit %d, %v, %q; want its (empty) listing", own, code, err, out)
	}
}

// A setup step that waits in the kernel for good (here on a FUSE mount
// whose server never answers, named to the sandbox or started in) ends
// when the launch's context does: the init is killed and reaped, and Start
// says why, instead of holding whoever launched it (a pod's stop, an
// operator's ^C) for as long as the mount hangs. Where the server took the
// request and SIGKILL cannot end the wait, Start gives up after reapWithin
// and says that too.
func TestStartStopsAHungSetup(t *testing.T) {
	hung, stuck := testutil.HungFUSE(t), testutil.StuckFUSE(t)
	for _, tc := range []struct {
		name   string
		given  func(*Config)
		reaped bool
	}{
		{"named", func(c *Config) { c.RO = append(c.RO, hung) }, true},
		{"started in", func(c *Config) { c.Dir = hung }, true},
		{"named, its request taken", func(c *Config) { c.RO = append(c.RO, stuck) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base(t, "/bin/true")
			c.Net = NetHost // no network to make: the setup is the mounts'
			tc.given(&c)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			started := make(chan error, 1)
			go func() {
				p, err := Start(ctx, c, nil)
				if err == nil {
					p.Wait()
				}
				started <- err
			}()
			testutil.WaitFor(t, "the sandbox's setup waiting on the FUSE mount", func() bool { return testutil.WaitsOnFUSE(os.Getpid()) })
			cancel(errors.New("the test's stop"))
			select {
			case err := <-started:
				if err == nil || !strings.Contains(err.Error(), "the test's stop") || strings.Contains(err.Error(), "was still not reaped") == tc.reaped {
					t.Fatalf("a sandbox whose setup hangs, its launch stopped: %v; want the stop's cause, and whether its init was reaped (%v)", err, tc.reaped)
				}
			case <-time.After(time.Minute):
				t.Fatal("Start still waiting for a hung setup a minute after its context ended")
			}
		})
	}
}

// POSIX shared memory is files in /dev/shm, which the IPC namespace does
// not cover: the host's are not there in the sandbox, and one given
// /dev/shm to write gets a /dev/shm of its own, which the host never sees.
func TestSharedMemoryIsPrivate(t *testing.T) {
	testutil.RequireRoot(t, "mount namespaces")
	host := filepath.Join("/dev/shm", fmt.Sprintf("airlock-test-%d", os.Getpid()))
	if err := os.WriteFile(host, []byte("host secret"), 0o644); err != nil {
		t.Fatalf("no /dev/shm to test with: %v", err)
	}
	t.Cleanup(func() { os.Remove(host) })
	c := base(t, "/bin/sh", "-c", "cat "+host+"; echo; touch /dev/shm/made && echo made")
	out, _, err := run(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "host secret") || strings.Contains(out, "made") {
		t.Errorf("read-only sandbox: %q; want the host's shared memory out of sight, nothing made", out)
	}
	mine := filepath.Join("/dev/shm", fmt.Sprintf("airlock-test-%d-mine", os.Getpid()))
	c = base(t, "/bin/sh", "-c", "cat "+host+"; echo; echo x >"+mine+" && echo made")
	c.RW = append(c.RW, "/dev/shm")
	out, _, err = run(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "host secret") || !strings.Contains(out, "made") {
		t.Errorf("sandbox given /dev/shm: %q; want its own, writable, without the host's", out)
	}
	if _, err := os.Stat(mine); err == nil {
		os.Remove(mine)
		t.Error("what the sandbox wrote to its /dev/shm is in the host's")
	}
}

// An rlimit is set as asked or refused before anything starts: core,
// which the sandbox holds at 0 (no dumps), is refused with the reason, as
// is a name with no limit behind it.
func TestValidateRlimits(t *testing.T) {
	for _, tc := range []struct {
		limits map[string]uint64
		want   string // "" is valid
	}{
		{map[string]uint64{"nofile": 1024, "cpu": 60}, ""},
		{map[string]uint64{"core": 1000}, "the sandbox makes no core dumps"},
		{map[string]uint64{"cores": 1}, "--rlimit cores: unknown"},
	} {
		c := Defaults()
		c.Command, c.Net = []string{"/bin/true"}, NetNone
		c.Rlimits = tc.limits
		err := c.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(rlimits %v) = %v; want %q", tc.limits, err, tc.want)
		}
	}
}

// The home of the account a sandbox runs as is hidden when it is a
// person's (under /home): not a system account's, whose home is a system
// directory.
func TestHomeIn(t *testing.T) {
	const passwd = `root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
broken line
alice:x:1000:1000:Alice,,,:/home/alice:/bin/bash
home:x:1001:1001::/home:/bin/sh
sneaky:x:1002:1002::/home/../etc:/bin/sh
deep:x:1003:1003::/home/staff/bob/:/bin/sh
relative:x:1004:1004::home/carol:/bin/sh
`
	for _, tc := range []struct {
		uid  int
		want string
	}{
		{1000, "/home/alice"},
		{1003, "/home/staff/bob"},
		{0, "/root"},
		{1, "/usr/sbin"},
		{1001, "/home"},
		{1002, "/etc"},
		{1004, ""},
		{61000, ""},
	} {
		if got := homeIn(strings.NewReader(passwd), tc.uid); got != tc.want {
			t.Errorf("homeIn(uid %d) = %q; want %q", tc.uid, got, tc.want)
		}
	}
}

// A person's home is one that, its links resolved, lies below the homes'
// directory, resolved too: /var/home/alice where /home leads to /var/home
// (Silverblue) is one; the homes' directory itself, a system directory, and
// a home that is a link out of it are not.
func TestPersonalHome(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"var/home/alice", "var/home/staff/bob", "usr/sbin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"home": "var/home", "var/home/mallory": "../../usr/sbin"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	homes := filepath.Join(root, "home")
	for _, tc := range []struct{ home, want string }{
		{"var/home/alice", "var/home/alice"},
		{"home/alice", "var/home/alice"},
		{"home/staff/bob", "var/home/staff/bob"},
		{"home", ""},
		{"var/home", ""},
		{"usr/sbin", ""},
		{"home/mallory", ""},
		{"home/missing", ""},
	} {
		want := ""
		if tc.want != "" {
			want = filepath.Join(root, tc.want)
		}
		if got := personal(filepath.Join(root, tc.home), homes); got != want {
			t.Errorf("personal(%s) = %q; want %q", tc.home, got, want)
		}
	}
	if got := personal("", homes); got != "" {
		t.Errorf("personal of no home = %q; want none", got)
	}
}

// A hidden directory (Config.Hidden: a person's home, for a sandbox run
// as them) shows the sandbox only what it names below it and the
// directory it starts in: a socket there that its uid may write, which
// Landlock would not keep it from, is not reached; given whole, the
// directory is left as it is.
func TestHiddenDirShowsOnlyWhatIsNamed(t *testing.T) {
	py := testutil.RequireTool(t, "/usr/bin/python3")
	home := rootDir(t, 0o755)
	sock := hostSocket(t, filepath.Join(home, "agent.sock"))
	proj := filepath.Join(home, "proj")
	os.Mkdir(proj, 0o755)
	os.WriteFile(filepath.Join(proj, "x"), []byte("given"), 0o644)
	script := `import os, socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); print("reached")
except OSError as e:
    print(e.strerror)
print(open("x").read())
print(os.getcwd())`
	for _, tc := range []struct {
		name    string
		hidden  []string
		ro      []string
		reached string
	}{
		{"hidden", []string{home}, []string{proj}, "No such file or directory"},
		{"given whole", []string{home}, []string{home}, "reached"},
		{"not hidden", nil, []string{proj}, "reached"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base(t, py, "-c", script, sock)
			c.Hidden, c.RO, c.Dir = tc.hidden, append(c.RO, tc.ro...), proj
			out, code, err := run(t, c)
			want := tc.reached + "\ngiven\n" + proj + "\n"
			if err != nil || code != 0 || out != want {
				t.Fatalf("exit %d, %v, %q; want %q", code, err, out, want)
			}
		})
	}
	// A hidden directory that is / by a link is refused before anything
	// is mounted: covered, / would be out of reach, its remount the host's.
	root := filepath.Join(home, "root")
	os.Symlink("/", root)
	c0 := base(t, "/bin/true")
	c0.Hidden = []string{root}
	var se *SetupError
	if _, _, err := run(t, c0); !errors.As(err, &se) || !strings.Contains(se.Err, "is /") {
		t.Fatalf("a hidden directory that is / by a link: %v; want it refused", err)
	}
	// Started in the hidden directory itself: in its cover.
	c := base(t, py, "-c", strings.Replace(script, `print(open("x").read())`, "", 1), "agent.sock")
	c.Hidden, c.Dir = []string{home}, home
	if out, code, err := run(t, c); err != nil || code != 0 || out != "No such file or directory\n"+home+"\n" {
		t.Fatalf("started in the hidden directory: exit %d, %v, %q; want it there, its socket not", code, err, out)
	}
}

// The launcher's session keyring stays with it: a key in it (an operator's
// Kerberos ticket, say) is neither possessed by the sandbox nor named in
// its /proc/keys. The launcher is this binary again (keyringLauncher), every
// thread of it in a session keyring holding the key, as a process started
// from the operator's shell is.
func TestSessionKeyringIsNotInherited(t *testing.T) {
	testutil.RequireRoot(t, "the sandbox launcher")
	secret := fmt.Sprintf("airlock-test-secret-%d", os.Getpid())
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), "AIRLOCK_KEYRING_LAUNCHER=join", "AIRLOCK_KEYRING_SECRET="+secret)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the launcher: %v\n%s", err, out)
	}
	host, sandboxed, ok := strings.Cut(string(out), "--- sandbox ---\n")
	if !ok || !strings.Contains(host, secret) {
		t.Fatalf("the launcher's own /proc/keys does not name its key %s (nothing to test):\n%s", secret, out)
	}
	if strings.Contains(sandboxed, secret) {
		t.Errorf("the sandbox's /proc/keys names the launcher's key:\n%s", sandboxed)
	}
}

// keyringLauncher joins a session keyring holding a key named secret on
// this thread and executes this binary again from it, so that every thread
// of the new image holds that keyring; that one prints its /proc/keys, then
// a sandbox's.
func keyringLauncher(step, secret string) int {
	if step == "join" {
		runtime.LockOSThread()
		if _, err := unix.KeyctlJoinSessionKeyring(secret + "-session"); err != nil {
			fmt.Println("keyctl(JOIN_SESSION_KEYRING):", err)
			return 1
		}
		if _, err := unix.AddKey("user", secret, []byte("ticket"), unix.KEY_SPEC_SESSION_KEYRING); err != nil {
			fmt.Println("add_key:", err)
			return 1
		}
		env := []string{"AIRLOCK_KEYRING_LAUNCHER=launch", "AIRLOCK_KEYRING_SECRET=" + secret}
		fmt.Println(syscall.Exec("/proc/self/exe", []string{os.Args[0]}, env))
		return 1
	}
	keys, err := os.ReadFile("/proc/keys")
	fmt.Printf("%s%v\n--- sandbox ---\n", keys, err)
	n, err := NewNetwork(NetworkConfig{})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer n.Close()
	c := Defaults()
	c.Net, c.Command, c.Env = NetNone, []string{"/bin/cat", "/proc/keys"}, []string{"PATH=/usr/bin:/bin"}
	c.Stdout, c.Stderr = os.Stdout, os.Stdout
	p, err := Start(context.Background(), c, n)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if code, err := p.Wait(); code != 0 || err != nil {
		fmt.Println("exit", code, err)
		return 1
	}
	return 0
}
