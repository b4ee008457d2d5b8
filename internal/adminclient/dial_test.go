package adminclient

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// TestDialHandshakeRespectsCtx: a pod that takes the connection and never
// answers does not hold Dial past its ctx's deadline or cancellation.
func TestDialHandshakeRespectsCtx(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, unanswered
		}
	}()
	deadline, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := Dial(deadline, socket, "127.0.0.1:8001"); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Dial past its deadline: %v, want a deadline exceeded", err)
	}
	(<-accepted).Close()

	cancelled, cancel2 := context.WithCancel(context.Background())
	go func() {
		c := <-accepted // held open until the test ends
		t.Cleanup(func() { c.Close() })
		cancel2()
	}()
	if _, err := Dial(cancelled, socket, "127.0.0.1:8001"); !errors.Is(err, context.Canceled) {
		t.Errorf("Dial cancelled during its handshake: %v, want context.Canceled", err)
	}
}

// TestErrnoValue: the errno the API names is found back.
func TestErrnoValue(t *testing.T) {
	for name, want := range map[string]syscall.Errno{"ECONNREFUSED": syscall.ECONNREFUSED, "ETIMEDOUT": syscall.ETIMEDOUT, "": 0, "ENOSUCH": 0} {
		if got := errnoValue(name); got != want {
			t.Errorf("errnoValue(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestDialKeepsBytesReadWithTheHandshake: what the service sent at once,
// read along with the 101 answer, is the connection's first bytes.
func TestDialKeepsBytesReadWithTheHandshake(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		http.ReadRequest(bufio.NewReader(c))
		// One write: the answer and the service's banner arrive together.
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n220 banner\r\n")
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := Dial(ctx, socket, "127.0.0.1:8001")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got, err := io.ReadAll(conn)
	if string(got) != "220 banner\r\n" || err != nil {
		t.Errorf("read %q, %v; want the banner sent with the answer", got, err)
	}
}

// A socket another user listens on where a pod's was (the pod down, the
// path in a shared directory) is refused before anything is sent to it:
// a request, a launch's spec, the launcher's descriptors.
func TestImpostorSocketRefused(t *testing.T) {
	testutil.RequireRoot(t, "a listener of another uid")
	// The system's python3: uid 61000 can execute it.
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("python3: %v", err)
	}
	dir, err := os.MkdirTemp("", "airlock-impostor-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777)
	socket := filepath.Join(dir, "admin.sock")
	impostor := exec.Command(python, "-c", `import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(8)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    if c.recv(1):
        print("sent to", flush=True)
`, socket)
	impostor.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 61000, Gid: 61000}}
	out, err := impostor.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := impostor.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { impostor.Process.Kill(); impostor.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "listening" {
		t.Fatalf("the impostor did not listen: %q", lines.Text())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const want = "served by uid 61000"
	if _, err := Do(ctx, socket, http.MethodGet, "/v1/status"); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Do on the impostor's socket = %v; want it refused as %s", err, want)
	}
	if _, err := Launch(ctx, socket, SandboxSpec{ID: "x", Command: []string{"/bin/true"}}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Launch on the impostor's socket = %v; want it refused as %s", err, want)
	}
	impostor.Process.Kill()
	impostor.Wait()
	for lines.Scan() {
		t.Errorf("the impostor was %s", lines.Text())
	}
}
