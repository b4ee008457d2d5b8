package demo

import (
	"bufio"
	"encoding/json"
	"io"
	"io/fs"
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
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
)

// extract writes the embedded files into a fresh directory, as `airlock up`
// does before it boots the demo.
func extract(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	err := fs.WalkDir(Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := Files.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, p), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// start runs the demo's service name, its command as the manifest gives
// it, in dir (where extract wrote the files) as a plain process with
// exactly env; it waits for the line the service prints once it listens
// ("NAME listening on ADDR...") and returns ADDR. At the end of the test
// it is stopped with SIGTERM, as the supervisor stops it, and must exit 0.
func start(t *testing.T, dir, name string, env ...string) string {
	t.Helper()
	p, err := manifest.Parse("pod.yaml", Manifest, dir)
	if err != nil {
		t.Fatal(err)
	}
	var argv []string
	for _, s := range p.Services {
		if s.Name == name {
			argv = s.Command
		}
	}
	if len(argv) == 0 {
		t.Fatalf("the demo has no service %q", name)
	}
	testutil.RequireTool(t, argv[0])
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	cmd.Dir = dir
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			t.Logf("%s: %s", name, sc.Text())
		}
	}()
	exited := make(chan error, 1)
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("%s after SIGTERM: %v, want exit 0", name, err)
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Errorf("%s did not exit within 10s of SIGTERM", name)
		}
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), name+" listening on "); ok {
				addr <- strings.TrimSuffix(strings.Fields(rest)[0], ",")
			}
		}
		io.Copy(io.Discard, stdout)
		<-logged // Wait closes the pipes: read them to the end first
		exited <- cmd.Wait()
	}()
	select {
	case a := <-addr:
		return a
	case err := <-exited:
		exited <- err
		t.Fatalf("%s exited before listening: %v", name, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not listen within 30s", name)
	}
	return ""
}

// call makes one request and decodes the JSON answer into out.
func call(t *testing.T, method, url string, header http.Header, body string, out any) int {
	t.Helper()
	return callFrom(t, "", method, url, header, body, out)
}

// callFrom is call from the loopback address src ("": any).
func callFrom(t *testing.T, src, method, url string, header http.Header, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	// Straight to loopback, whatever the test's environment says.
	tr := &http.Transport{Proxy: nil}
	if src != "" {
		tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext
	}
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, url, ct)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("%s %s: %d %q: %v", method, url, resp.StatusCode, data, err)
	}
	return resp.StatusCode
}
