package identity

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// hiddenHolder connects to the port in argv[1] and hands the socket to a
// child running sleep, which holds it plainly; then its main thread exits
// (pthread_exit) while another thread writes on the socket and lives on:
// the writer's table is out of /proc/PID/fd's sight.
const hiddenHolder = `
import ctypes, os, socket, sys, threading, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
os.set_inheritable(s.fileno(), True)
child = os.fork()
if child == 0:
    os.execv("/bin/sleep", ["sleep", "30"])
def write():
    time.sleep(0.3)
    s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\n\r\n")
    time.sleep(30)
threading.Thread(target=write).start()
print(child, flush=True)
ctypes.CDLL(None).pthread_exit(None)
`

// A socket a process holds whose main thread has exited (its table empty
// through /proc/PID/fd, while its other threads use it) is found through
// those threads: it is not attributed to the other holder, sleep, and the
// writer, whose executable its exited main thread no longer shows, fails
// the lookup.
func TestHolderBehindAnExitedMainThread(t *testing.T) {
	cmd, server, stdout, _ := pythonConnected(t, hiddenHolder)
	var child int
	if _, err := fmt.Fscan(stdout, &child); err != nil {
		t.Fatal(err)
	}
	server.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := bufio.NewReader(server).ReadString('\n'); err != nil || !strings.HasPrefix(line, "CONNECT") {
		t.Fatalf("read %q, %v; want the hidden thread's request", line, err)
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if !strings.Contains(string(status), "State:\tZ") {
		t.Fatalf("the writer's main thread has not exited:\n%s", status)
	}
	r := treeResolver(t)
	p, err := r.Lookup(addrs(server))
	if p != nil || !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", cmd.Process.Pid)) {
		t.Errorf("Lookup = %+v, %v; want the lookup refused, naming the writer, pid %d (not sleep, pid %d)", p, err, cmd.Process.Pid, child)
	}
}

// A process whose main thread has exited, holding nothing of the
// connection's, is passed over like any other: on a host-wide scan one
// such process anywhere must not fail every lookup.
func TestExitedMainThreadElsewhereIsPassedOver(t *testing.T) {
	python := testutil.RequireTool(t, "python3")
	bystander := exec.Command(python, "-c", `import ctypes, threading, time
threading.Thread(target=lambda: time.sleep(30)).start()
print("up", flush=True)
ctypes.CDLL(None).pthread_exit(None)`)
	out, err := bystander.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { bystander.Process.Kill(); bystander.Wait() }()
	bufio.NewReader(out).ReadString('\n')
	// The connection's one holder: sleep, given the client socket.
	client, server := testutil.TCPPair(t)
	f, err := client.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	client.Close()
	holder := exec.Command("/bin/sleep", "30")
	holder.ExtraFiles = []*os.File{f}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	defer func() { holder.Process.Kill(); holder.Wait() }()
	r := treeResolver(t)
	p, err := r.Lookup(addrs(server))
	if err != nil || p.PID != holder.Process.Pid {
		t.Errorf("Lookup = %+v, %v; want sleep (pid %d), past pid %d", p, err, holder.Process.Pid, bystander.Process.Pid)
	}
}
