package testutil

import (
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GitHTTPRemote serves a GitRemote over smart HTTP on loopback (git
// http-backend behind net/http/cgi) that answers only requests carrying
// user and secret by basic auth. It returns the remote's URL with the
// credentials in it (http://user:secret@127.0.0.1:port/remote.git), as a
// CI job's remote carries its token, and the bare repository's path.
func GitHTTPRemote(t testing.TB, user, secret string) (url, bare string) {
	t.Helper()
	bare = GitRemote(t)
	Git(t, "", "--git-dir", bare, "config", "http.receivepack", "true")
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	h := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(backend)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Dir(bare), "GIT_HTTP_EXPORT_ALL=1"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != secret {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return "http://" + user + ":" + secret + "@" + strings.TrimPrefix(srv.URL, "http://") + "/" + filepath.Base(bare), bare
}
