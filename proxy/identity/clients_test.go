package identity

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// pythonConnected runs script with python3, its first argument the port of
// a loopback listener and then args, and returns the process, the
// connection it made (accepted), its stdout and its stdin (whose close
// tells a script waiting on it to end). The process group is killed at
// cleanup.
func pythonConnected(t *testing.T, script string, args ...string) (*exec.Cmd, net.Conn, *bufio.Reader, io.WriteCloser) {
	t.Helper()
	python := testutil.RequireTool(t, "python3")
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(python, append([]string{"-c", script, fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return cmd, conn, bufio.NewReader(stdout), stdin
}

// runFromMemfd runs /usr/bin/sleep from a memory file, sealed against
// writes or not, holding a connection to port; it prints the pid.
const runFromMemfd = `
import fcntl, os, socket, subprocess, sys
port, sealed = int(sys.argv[1]), sys.argv[2] == "sealed"
fd = os.memfd_create("tool", os.MFD_ALLOW_SEALING)
os.write(fd, open("/usr/bin/sleep", "rb").read())
if sealed:
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
s = socket.create_connection(("127.0.0.1", port))
p = subprocess.Popen(["/proc/self/fd/%d" % fd, "30"], pass_fds=[fd, s.fileno()])
s.close()
print(p.pid, flush=True)
sys.stdin.readline()
`

// A program run from a memory file its owner may still write has no
// fixed bytes to name (it can be rewritten through a shared mapping with
// its size and times unchanged): it is not identified, and so decided by
// no rule. One sealed against writes is identified as any file is.
func TestMemfdExecutable(t *testing.T) {
	for _, tc := range []struct {
		seal string
		ok   bool
	}{{"sealed", true}, {"unsealed", false}} {
		t.Run(tc.seal, func(t *testing.T) {
			_, conn, stdout, _ := pythonConnected(t, runFromMemfd, tc.seal)
			var pid int
			if _, err := fmt.Fscan(stdout, &pid); err != nil {
				t.Fatal(err)
			}
			r := treeResolver(t)
			var err error
			// The child may not have exec'd yet: until it has, python
			// holds the socket too.
			var p *Process
			for range 100 {
				if p, err = r.Lookup(addrs(conn)); err == nil || strings.Contains(err.Error(), "memory file") {
					break
				}
				syscall.Nanosleep(&syscall.Timespec{Nsec: 20e6}, nil)
			}
			if tc.ok && (err != nil || p.PID != pid) {
				t.Fatalf("Lookup = %+v, %v; want pid %d identified", p, err, pid)
			}
			if !tc.ok && (err == nil || !strings.Contains(err.Error(), "not sealed with F_SEAL_WRITE")) {
				t.Fatalf("Lookup = %+v, %v; want it refused as an unsealed memory file", p, err)
			}
		})
	}
}

// connectMapped connects a dual-stack AF_INET6 socket, as Java's are, to
// an IPv4 port through its IPv4-mapped address, and waits.
const connectMapped = `
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.connect(("::ffff:127.0.0.1", int(sys.argv[1])))
print("connected", flush=True)
sys.stdin.readline()
`

// A connection from a dual-stack socket to an IPv4 address is attributed
// like any other: the kernel names its ends IPv4-mapped, and every such
// client (Java's, by default) was identity_unknown.
func TestDualStackClientSocket(t *testing.T) {
	cmd, conn, stdout, _ := pythonConnected(t, connectMapped)
	stdout.ReadString('\n')
	r := treeResolver(t)
	if p, err := r.Lookup(addrs(conn)); err != nil || p.PID != cmd.Process.Pid {
		t.Fatalf("Lookup = %+v, %v; want python (pid %d)", p, err, cmd.Process.Pid)
	}
}

// runFromTmpfs runs a copy of /usr/bin/sleep from /dev/shm (tmpfs, which
// answers F_GET_SEALS as a memfd does), holding a connection to port.
const runFromTmpfs = `
import os, shutil, socket, subprocess, sys
path = "/dev/shm/airlock-test-sleep-%d" % os.getpid()
shutil.copy("/usr/bin/sleep", path)
os.chmod(path, 0o755)
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
try:
    p = subprocess.Popen([path, "30"], pass_fds=[s.fileno()])
except PermissionError:  # /dev/shm mounted noexec
    print(-1, flush=True)
    os.unlink(path)
    sys.exit(0)
s.close()
print(p.pid, flush=True)
sys.stdin.readline()
os.unlink(path)
`

// A program run from a tmpfs file (a /tmp or /dev/shm of tmpfs) is
// identified as any file is: exec keeps it from being written, and only a
// memfd is refused.
func TestTmpfsExecutable(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm")
	}
	cmd, conn, stdout, _ := pythonConnected(t, runFromTmpfs)
	t.Cleanup(func() { os.Remove(fmt.Sprintf("/dev/shm/airlock-test-sleep-%d", cmd.Process.Pid)) })
	var pid int
	if _, err := fmt.Fscan(stdout, &pid); err != nil {
		t.Fatal(err)
	}
	if pid < 0 {
		t.Skip("/dev/shm is mounted noexec here")
	}
	r := treeResolver(t)
	var err error
	var p *Process
	for range 100 {
		if p, err = r.Lookup(addrs(conn)); err == nil && p.PID == pid {
			break
		}
		syscall.Nanosleep(&syscall.Timespec{Nsec: 20e6}, nil)
	}
	if err != nil || p.PID != pid {
		t.Fatalf("Lookup = %+v, %v; want pid %d identified", p, err, pid)
	}
}

// forgetfulHook has no record of the connect looked up: its table was
// flooded (blind: it never saw any, and says so).
type forgetfulHook struct{ blind bool }

func (forgetfulHook) Lookup(uint64) (int, int, time.Duration, bool) { return 0, 0, 0, false }
func (forgetfulHook) ExecsOf(int) Execs                             { return Execs{} }
func (h forgetfulHook) Blind() bool                                 { return h.blind }

// execHook saw pid connect, on a descriptor it does not know, at at, and
// has execs on record for it.
type execHook struct {
	pid   int
	at    time.Duration
	execs Execs
}

func (h execHook) Lookup(uint64) (int, int, time.Duration, bool) { return h.pid, -1, h.at, true }
func (h execHook) ExecsOf(int) Execs                             { return h.execs }
func (execHook) Blind() bool                                     { return false }

// An exec on record that began before the connector started is a dead
// process's of the same pid (kept after it where the kernel does not say
// when a process's last thread exits), not the connector's: it says
// nothing of it, even one that never ended. One that began after the
// connector started is its own.
func TestHookIgnoresAnExecFromBeforeTheConnectorStarted(t *testing.T) {
	client, server := clientProcess(t)
	pid := client.Process.Pid
	d, err := openProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	st, err := readStat(d)
	d.close()
	if err != nil {
		t.Fatal(err)
	}
	at := st.start + time.Second
	r := treeResolver(t)
	r.WithConnHook(execHook{pid, at, Execs{Recorded: true, Began: st.start - time.Second, Running: true}})
	if p, err := r.Lookup(addrs(server)); err != nil || p.PID != pid {
		t.Fatalf("Lookup with a running exec begun before pid %d started = %+v, %v; want pid %d", pid, p, err, pid)
	}
	r.WithConnHook(execHook{pid, at, Execs{Recorded: true, Began: at - time.Millisecond, Running: true}})
	if p, err := r.Lookup(addrs(server)); !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), "while it was executing") {
		t.Fatalf("Lookup with a running exec begun before the connect = %+v, %v; want it refused as ambiguous", p, err)
	}
}

// With the connect hook, a socket it has no record of is refused: its
// record was pushed out (a flood of connects does that), and the scan
// would name whoever holds the socket now, its connector hidden.
func TestHookWithoutARecordRefuses(t *testing.T) {
	_, server := clientProcess(t)
	r := treeResolver(t)
	r.WithConnHook(forgetfulHook{})
	if p, err := r.Lookup(addrs(server)); !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "no record") {
		t.Fatalf("Lookup = %+v, %v; want identity_unknown: the hook has no record", p, err)
	}
	// A hook the kernel never runs has recorded nothing: the scan decides.
	r.WithConnHook(forgetfulHook{blind: true})
	if p, err := r.Lookup(addrs(server)); err != nil || p == nil {
		t.Fatalf("Lookup with a blind hook = %+v, %v; want the scan's answer", p, err)
	}
}
