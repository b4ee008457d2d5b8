package supervisor

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// Launching a one-off sandbox is root's alone, by the socket's peer
// credentials: a peer of another uid that reaches the socket (here it is
// left open to all, as a misconfigured mode would) is refused, naming its
// uid, and root is let through.
func TestPeerRoot(t *testing.T) {
	testutil.RequireRoot(t, "a peer of another uid (setuid)")
	python := testutil.RequireTool(t, "/usr/bin/python3") // the system's: uid 61000 may run it
	// Not t.TempDir: its parent is not traversable by the other uid.
	dir, err := os.MkdirTemp("", "airlock-peer-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	sock := filepath.Join(dir, "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(sock, 0o777)
	srv := &http.Server{ConnContext: withConn, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := peerRoot(r); err != nil {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{})
	})}
	go srv.Serve(ln)
	defer srv.Close()

	client := exec.Command(python, "-c", `import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
print(s.recv(4096).decode())`, sock)
	client.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 61000, Gid: 61000}}
	out, err := client.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "HTTP/1.0 403") || !strings.Contains(string(out), "peer uid 61000") {
		t.Errorf("uid 61000's request: %v\n%s\nwant 403 naming the uid", err, out)
	}
	c := &http.Client{Transport: &http.Transport{Dial: func(_, _ string) (net.Conn, error) { return net.Dial("unix", sock) }}}
	resp, err := c.Get("http://pod/")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("root's request: %v %v; want 200", resp, err)
	}
	resp.Body.Close()
}
