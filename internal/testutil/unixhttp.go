package testutil

import (
	"net"
	"net/http"
	"path/filepath"
	"testing"
)

// ServeUnix serves srv on a fresh Unix socket, as a pod's admin socket is,
// until the test ends, and returns the socket's path.
func ServeUnix(t testing.TB, srv *http.Server) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return socket
}
