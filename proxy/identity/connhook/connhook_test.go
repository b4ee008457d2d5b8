package connhook_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/proxy/identity"
	"github.com/airlock-sandbox/airlock/proxy/identity/connhook"
	"github.com/vishvananda/netns"
)

func TestMain(m *testing.M) {
	testutil.ServeClient()
	os.Exit(m.Run())
}

// sandbox makes a cgroup v2 leaf with n-1 sleeping processes and one client
// that connects to a listener of the test once the hook is attached.
func sandbox(t testing.TB, n int) (hook *connhook.Hook, cg string, client *exec.Cmd, server net.Conn) {
	t.Helper()
	testutil.RequireRoot(t, "cgroup BPF connect hooks")
	cg, hook = hookedCgroup(t)
	var kids []*exec.Cmd
	t.Cleanup(func() {
		for _, k := range kids {
			k.Process.Kill()
			k.Wait()
		}
	})
	for i := 1; i < n; i++ {
		k := exec.Command("sleep", "300")
		if err := k.Start(); err != nil {
			t.Fatal(err)
		}
		kids = append(kids, k)
		if err := cgroup2.Add(cg, k.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}

	// The client joins the cgroup before it connects.
	client, server = testutil.StartClient(t, func(pid int) {
		if err := cgroup2.Add(cg, pid); err != nil {
			t.Fatal(err)
		}
	})
	return hook, cg, client, server
}

// hookedCgroup is a fresh cgroup v2 leaf with the hook attached, both gone
// when the test ends (the leaf once its processes are).
func hookedCgroup(t testing.TB) (string, *connhook.Hook) {
	t.Helper()
	mnt, err := cgroup2.Mount()
	if err != nil {
		t.Fatal(err)
	}
	cg, err := cgroup2.Create(mnt, fmt.Sprintf("airlock-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cgroup2.Remove(cg) })
	hook, err := connhook.Attach(cg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hook.Close() })
	return cg, hook
}

func addrs(c net.Conn) (netip.AddrPort, netip.AddrPort) {
	return c.RemoteAddr().(*net.TCPAddr).AddrPort(), c.LocalAddr().(*net.TCPAddr).AddrPort()
}

// hookedResolver resolves the processes of cgroup cg with its hook.
func hookedResolver(t testing.TB, hook *connhook.Hook, cg string) *identity.Resolver {
	t.Helper()
	r, err := identity.NewResolver(netns.None(), identity.Cgroup(cg), identity.NewHashCache(16))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r.WithConnHook(hook)
}

func TestHookAttributesTheConnector(t *testing.T) {
	hook, cg, client, server := sandbox(t, 3)
	r := hookedResolver(t, hook, cg)
	p, err := r.Lookup(addrs(server))
	if err != nil || p.PID != client.Process.Pid {
		t.Fatalf("Lookup through the hook = %+v, %v; want pid %d", p, err, client.Process.Pid)
	}
}

// A hook that has recorded no connect is blind (a kernel that does not
// run it leaves it so, and the resolver then scans); one connect from its
// cgroup and it is not, for good.
func TestHookBlindUntilAConnect(t *testing.T) {
	testutil.RequireRoot(t, "cgroup BPF connect hooks")
	_, hook := hookedCgroup(t)
	if !hook.Blind() {
		t.Fatal("a hook that has recorded nothing says it is not blind")
	}
	hook2, _, _, _ := sandbox(t, 1)
	if hook2.Blind() {
		t.Fatal("a hook that recorded a connect says it is blind")
	}
}

// BenchmarkLookupHook is the identity lookup with the connect hook, with
// n processes in the sandbox's cgroup.
func BenchmarkLookupHook(b *testing.B) {
	for _, n := range []int{1, 500} {
		b.Run(fmt.Sprintf("procs=%d", n), func(b *testing.B) {
			hook, cg, client, server := sandbox(b, n)
			r := hookedResolver(b, hook, cg)
			c, s := addrs(server)
			r.Lookup(c, s) // hash the executables once: the cache is the steady state
			testutil.Latencies(b, func(int) {
				if p, err := r.Lookup(c, s); err != nil || p.PID != client.Process.Pid {
					b.Fatalf("Lookup = %+v, %v", p, err)
				}
			})
		})
	}
}

// A connector that hands its socket to another process and closes its own
// copy is refused, not attributed to the process that holds the socket: a
// connector can hide its copy while the proxy looks (sent to a unix socket
// of its own, SCM_RIGHTS, where no fd table shows it) and take it back
// after, so that a process it forked and made run an allowed binary would
// be named while it drives the connection itself.
func TestHookRefusesAHandOff(t *testing.T) {
	testutil.RequireRoot(t, "cgroup BPF connect hooks")
	bash := testutil.RequireTool(t, "bash")
	sleep, _ := exec.LookPath("sleep")
	sleep, _ = filepath.EvalSymlinks(sleep)
	cg, hook := hookedCgroup(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	// bash connects, leaves the socket to a background sleep, closes its
	// own copy and says so.
	script := fmt.Sprintf(`read _; exec 3<>/dev/tcp/127.0.0.1/%d; %s 300 & exec 3>&-; echo $!; wait`, ln.Addr().(*net.TCPAddr).Port, sleep)
	cmd := exec.Command(bash, "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() }()
	if err := cgroup2.Add(cg, cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	var holder int
	if _, err := fmt.Fscan(stdout, &holder); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) { // forked, then exec'd
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", holder)); exe == sleep {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d never ran %s", holder, sleep)
		}
	}

	r := hookedResolver(t, hook, cg)
	p, err := r.Lookup(addrs(server))
	if !errors.Is(err, identity.ErrAmbiguous) || !strings.Contains(err.Error(), fmt.Sprintf("(pid %d) no longer holds it", cmd.Process.Pid)) {
		t.Fatalf("Lookup after bash (pid %d) handed its socket to sleep (pid %d) = %+v, %v; want identity_ambiguous naming bash", cmd.Process.Pid, holder, p, err)
	}
}

// The hook records the descriptor each connection was made on, so that a
// lookup checks the connector still holds the socket with one readlink
// instead of reading its whole fd table. A program that opens files before
// it connects puts the socket at a descriptor of its choosing.
func TestHookRecordsTheDescriptor(t *testing.T) {
	testutil.RequireRoot(t, "cgroup BPF connect hooks")
	python := testutil.RequireTool(t, "python3")
	cg, hook := hookedCgroup(t)
	testutil.RequireFeature(t, "the connect(2) tracepoint (tracefs at /sys/kernel/tracing; .ci/run mounts it)", hook.FDs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	script := fmt.Sprintf(`import os, socket, sys
sys.stdin.readline()
held = [os.open("/dev/null", os.O_RDONLY) for _ in range(20)]
s = socket.create_connection(("127.0.0.1", %d))
cookie = s.getsockopt(socket.SOL_SOCKET, 57, 8)  # SO_COOKIE
print(s.fileno(), int.from_bytes(cookie, "little"), flush=True)
sys.stdin.readline()
`, ln.Addr().(*net.TCPAddr).Port)
	cmd := exec.Command(python, "-c", script)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() }()
	if err := cgroup2.Add(cg, cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	var fd int
	var cookie uint64
	if _, err := fmt.Fscan(stdout, &fd, &cookie); err != nil {
		t.Fatal(err)
	}
	tgid, got, _, ok := hook.Lookup(cookie)
	if !ok || tgid != cmd.Process.Pid || got != fd {
		t.Fatalf("Lookup(cookie %d) = tgid %d fd %d (found %v); want tgid %d fd %d", cookie, tgid, got, ok, cmd.Process.Pid, fd)
	}
}

// A connector that executes another program after it connected, keeping
// the socket, is not described as that program: what it sent before may
// be the first one's (connect, write a request, execute a program the
// policy allows). One that executed before it connected (every process
// does, to start) is described. An exec from a thread other than the main
// one kills the main thread, whose pid the new program then takes: the
// exec is still on record.
func TestHookRefusesAConnectorThatExecutedSince(t *testing.T) {
	for _, from := range []string{"main", "other"} {
		t.Run(from, func(t *testing.T) {
			py := testutil.RequireTool(t, "/usr/bin/python3")
			testutil.RequireRoot(t, "cgroup BPF connect hooks")
			cg, hook := hookedCgroup(t)
			if hook.Execs != nil {
				t.Fatalf("the hook does not see programs executed: %v", hook.Execs)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			const script = `import os, socket, sys, threading
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"sent by python\n")
os.set_inheritable(s.fileno(), True)
become = lambda: os.execv("/bin/sleep", ["sleep", "300"])
if sys.argv[2] == "other":
    t = threading.Thread(target=become)
    t.start()
    t.join()
become()`
			// Held until it is in the cgroup, then python, which connects and
			// becomes sleep.
			cmd := exec.Command("/bin/sh", "-c", `read go; exec "$0" -c "$1" "$2" "$3"`, py, script, fmt.Sprint(ln.Addr().(*net.TCPAddr).Port), from)
			stdin, _ := cmd.StdinPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			if err := cgroup2.Add(cg, cmd.Process.Pid); err != nil {
				t.Fatal(err)
			}
			io.WriteString(stdin, "go\n")
			server, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer server.Close()
			waitForExe(t, cmd.Process.Pid, "/bin/sleep")
			_, err = hookedResolver(t, hook, cg).Lookup(addrs(server))
			if !errors.Is(err, identity.ErrAmbiguous) || !strings.Contains(err.Error(), "execute another program") {
				t.Fatalf("Lookup of a connection whose connector executed sleep since (from its %s thread) = %v; want it refused as ambiguous", from, err)
			}
		})
	}
}

// waitForExe waits until process pid runs the program at path.
func waitForExe(t *testing.T, pid int, path string) {
	t.Helper()
	want, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, fmt.Sprintf("pid %d to run %s", pid, want), func() bool {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		return exe == want
	})
}

// connectDuringExec's main thread executes sleep with an environment of
// nearly 2 MB, which the kernel copies before it ends the process's other
// threads; meanwhile a second thread connects to the port (its first
// argument) and writes the socket's cookie. It starts on a byte from
// stdin.
const connectDuringExec = `#define _GNU_SOURCE
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif

static volatile int go;
static int port;

static void *connector(void *unused) {
	while (!go)
		;
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) {
		unsigned long long cookie;
		socklen_t n = sizeof cookie;
		getsockopt(s, SOL_SOCKET, SO_COOKIE, &cookie, &n);
		dprintf(s, "%llu\n", cookie);
	}
	pause();
	return unused;
}

static char env[16][120 << 10];

int main(int argc, char **argv) {
	char *envp[17] = {0}, c;
	pthread_t t;
	port = atoi(argv[1]);
	for (int i = 0; i < 16; i++) {
		memset(env[i], 'x', sizeof env[i] - 1);
		env[i][0] = 'A' + i;
		env[i][1] = '=';
		envp[i] = env[i];
	}
	if (read(0, &c, 1) != 1)
		return 1;
	pthread_create(&t, NULL, connector, NULL);
	go = 1;
	execve("/bin/sleep", (char *[]){"sleep", "300", NULL}, envp);
	return 1;
}
`

// A thread that connects and writes while another thread of its process
// executes a program leaves its socket to that program (the exec ends the
// thread, not the socket): its connector is refused, though the exec
// began before the connect.
func TestHookRefusesAConnectDuringAnExec(t *testing.T) {
	testutil.RequireRoot(t, "cgroup BPF connect hooks")
	helper, cg, hook, ln := execFixture(t, connectDuringExec)
	// The second thread may connect before the exec begins (the main
	// thread was preempted), or not at all before the exec ends it: tried
	// until it connects while the exec runs.
	for attempt := 1; ; attempt++ {
		pid, server, at := connectWhileExecuting(t, helper, cg, hook, ln)
		if server != nil && hook.ExecsOf(pid).Began < at {
			_, err := hookedResolver(t, hook, cg).Lookup(addrs(server))
			if !errors.Is(err, identity.ErrAmbiguous) || !strings.Contains(err.Error(), "while it was executing") {
				t.Fatalf("Lookup of a connection made while its connector executed sleep = %v; want it refused as ambiguous", err)
			}
			return
		}
		if attempt == 20 {
			t.Fatal("the helper's second thread never connected while its main thread executed sleep")
		}
	}
}

// strayReturn's first thread executes sleep, which stays inside the
// kernel until a byte on stdin: its argument is on a page that
// userfaultfd leaves missing until then. Once it is inside, a second
// thread installs a seccomp filter of its own refusing execve, calls it,
// then connects to the port (its first argument) and writes the socket's
// cookie. It starts on a byte from stdin, once it has said "ready".
const strayReturn = `#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif

static int port;
static char *arg;

static void *executor(void *unused) {
	execve("/bin/sleep", (char *[]){"sleep", arg, NULL}, (char *[]){NULL});
	return unused;
}

static void *connector(void *unused) {
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_execve, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog p = {sizeof f / sizeof f[0], f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &p)) {
		perror("seccomp");
		exit(1);
	}
	execve("/bin/sleep", (char *[]){"sleep", "300", NULL}, (char *[]){NULL});
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) {
		unsigned long long cookie;
		socklen_t n = sizeof cookie;
		getsockopt(s, SOL_SOCKET, SO_COOKIE, &cookie, &n);
		dprintf(s, "%llu\n", cookie);
	}
	pause();
	return unused;
}

int main(int argc, char **argv) {
	long page = sysconf(_SC_PAGESIZE);
	struct uffdio_api api = {.api = UFFD_API};
	struct uffd_msg fault;
	pthread_t t;
	char c;
	port = atoi(argv[1]);
	int uffd = syscall(SYS_userfaultfd, O_CLOEXEC);
	if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api)) {
		printf("userfaultfd: %m\n");
		return 1;
	}
	arg = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct uffdio_register reg = {.range = {(unsigned long)arg, page}, .mode = UFFDIO_REGISTER_MODE_MISSING};
	if (arg == MAP_FAILED || ioctl(uffd, UFFDIO_REGISTER, &reg)) {
		printf("userfaultfd: register: %m\n");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	if (read(0, &c, 1) != 1)
		return 1;
	pthread_create(&t, NULL, executor, NULL);
	if (read(uffd, &fault, sizeof fault) != sizeof fault)
		return 1;
	pthread_create(&t, NULL, connector, NULL);
	if (read(0, &c, 1) != 1)
		return 1;
	char *filled = calloc(1, page);
	strcpy(filled, "300");
	struct uffdio_copy copy = {.dst = (unsigned long)arg, .src = (unsigned long)filled, .len = page};
	ioctl(uffd, UFFDIO_COPY, &copy);
	pause();
	return 0;
}
`

// An execve refused by the thread's own seccomp filter passes the exit
// tracepoint but not the entry one. Its return must not end another
// thread's exec: a connect made while that exec runs would be let
// through, and described as the new program once the exec is done and
// before its own return. The exec is held inside the kernel (strayReturn)
// while the connection is looked up, then let go and looked up again.
func TestHookKeepsAnExecRunningPastAStrayReturn(t *testing.T) {
	testutil.RequireRoot(t, "cgroup BPF connect hooks")
	helper, cg, hook, ln := execFixture(t, strayReturn)
	cmd := exec.Command(helper, fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
	cmd.Stderr = os.Stderr
	stdin, line, err := connhook.StartPiped(t, cmd)
	pid := cmd.Process.Pid
	if line != "ready\n" {
		testutil.RequireFeature(t, "userfaultfd", fmt.Errorf("%q, %v", line, err))
	}
	if err := cgroup2.Add(cg, pid); err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, "g")
	ln.SetDeadline(time.Now().Add(20 * time.Second))
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	var cookie uint64
	if _, err := fmt.Fscan(server, &cookie); err != nil {
		t.Fatal(err)
	}
	if tgid, _, _, ok := hook.Lookup(cookie); !ok || tgid != pid {
		t.Fatalf("hook.Lookup(cookie %d) = tgid %d (found %v); want pid %d", cookie, tgid, ok, pid)
	}
	r := hookedResolver(t, hook, cg)
	if p, err := r.Lookup(addrs(server)); !errors.Is(err, identity.ErrAmbiguous) || !strings.Contains(err.Error(), "while it was executing") {
		t.Fatalf("Lookup of a connection made during another thread's exec, after a refused execve = %+v, %v (execs %+v); want it refused as ambiguous", p, err, hook.ExecsOf(pid))
	}
	io.WriteString(stdin, "g")
	waitForExe(t, pid, "/bin/sleep")
	if p, err := r.Lookup(addrs(server)); !errors.Is(err, identity.ErrAmbiguous) {
		t.Fatalf("Lookup once the exec is done = %+v, %v; want it refused as ambiguous", p, err)
	}
}

// execFixture is what a test of a connect made while a program is
// executed needs: its C helper built from src, a cgroup whose connect hook
// sees programs executed, and a listener on loopback for the helper.
func execFixture(t *testing.T, src string) (helper, cg string, hook *connhook.Hook, ln *net.TCPListener) {
	t.Helper()
	helper = connhook.BuildHelper(t, src)
	cg, hook = hookedCgroup(t)
	if hook.Execs != nil {
		t.Fatalf("the hook does not see programs executed: %v", hook.Execs)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return helper, cg, hook, l.(*net.TCPListener)
}

// connectWhileExecuting runs helper (connectDuringExec) in cgroup cg until
// it is sleep, and returns its pid, the connection its second thread made
// (nil if it made none, or wrote nothing on it) and when it made it.
func connectWhileExecuting(t *testing.T, helper, cg string, hook *connhook.Hook, ln *net.TCPListener) (int, net.Conn, time.Duration) {
	t.Helper()
	cmd := exec.Command(helper, fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if err := cgroup2.Add(cg, cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, "go")
	waitForExe(t, cmd.Process.Pid, "/bin/sleep")
	// Sleep runs: the thread has connected and written, or never will.
	ln.SetDeadline(time.Now().Add(200 * time.Millisecond))
	server, err := ln.Accept()
	if err != nil {
		return cmd.Process.Pid, nil, 0
	}
	t.Cleanup(func() { server.Close() })
	server.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var cookie uint64
	if _, err := fmt.Fscan(server, &cookie); err != nil {
		return cmd.Process.Pid, nil, 0
	}
	tgid, _, at, ok := hook.Lookup(cookie)
	if !ok || tgid != cmd.Process.Pid {
		t.Fatalf("hook.Lookup(cookie %d) = tgid %d (found %v); want pid %d", cookie, tgid, ok, cmd.Process.Pid)
	}
	return tgid, server, at
}

// A process's exec is on record while it lives, and its record goes with
// it: its pid may be another process's next, and a table of the host's
// execs would fill with the dead.
func TestHookForgetsTheExecsOfTheDead(t *testing.T) {
	testutil.RequireRoot(t, "BPF tracepoints")
	_, hook := hookedCgroup(t)
	if hook.Execs != nil {
		t.Fatalf("the hook does not see programs executed: %v", hook.Execs)
	}
	cmd := exec.Command("/bin/sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !hook.ExecsOf(pid).Recorded {
		t.Errorf("no exec on record for pid %d, which executed sleep", pid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if e := hook.ExecsOf(pid); e.Recorded {
		t.Errorf("pid %d's exec %+v still on record after it exited", pid, e)
	}
}
