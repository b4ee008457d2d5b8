package integration

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// TestMakeRunBootsTheDemoPod runs `make run` as an operator would on a
// fresh machine, and drives the demo pod it boots: the printed key opens
// the ingress (HTTP and WebSocket), the boot showed one allowed and one
// denied egress request with the denial's reason, and ^C stops it all.
func TestMakeRunBootsTheDemoPod(t *testing.T) {
	testutil.RequireRoot(t, "the demo pod (network namespace, cgroups, uid switch)")
	testutil.RequireTool(t, "make")
	testutil.RequireTool(t, "node")
	// Under a directory the services' uids can traverse.
	dir, err := os.MkdirTemp("", "airlock-demo-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	state := filepath.Join(dir, "demo")
	repo, _ := filepath.Abs("..")
	cmd := exec.Command("make", "-s", "-C", repo, "run", "RUN_ARGS=--state-dir "+state)
	cmd.Env = cleanEnv()
	// Its own process group, as a terminal's foreground job: ^C reaches
	// make and airlock together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var printed strings.Builder
	lines := make(chan string, 256)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	go func() {
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	// Up to the demo's last word.
	deadline := time.After(3 * time.Minute)
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("make run ended before the demo was shown:\n%s", printed.String())
			}
			if !strings.HasPrefix(l, "{") {
				printed.WriteString(l + "\n")
			}
			done = strings.Contains(l, "Ctrl-C stops the pod")
		case <-deadline:
			t.Fatalf("the demo pod did not come up:\n%s", printed.String())
		}
	}
	text := printed.String()
	for _, want := range []string{"READY", "boot: lock", "ingress gateway: http://127.0.0.1:18789", "GET /models → 200", `GET /models/direct → 502`, `"reason":"host_not_allowed"`, "agent-inbox.jsonl", "audit.jsonl"} {
		if !strings.Contains(text, want) {
			t.Errorf("make run did not print %q:\n%s", want, text)
		}
	}
	key := regexp.MustCompile(`alk_[A-Za-z0-9_-]+`).FindString(text)
	if key == "" {
		t.Fatalf("no demo key printed:\n%s", text)
	}

	code, body := call(t, "127.0.0.1:18789", key, "/")
	if code != 200 || !strings.Contains(body, `"demo"`) {
		t.Errorf("GET / with the demo key: %d %s", code, body)
	}
	if code, _ := call(t, "127.0.0.1:18789", "", "/"); code != 401 {
		t.Errorf("GET / without a key: %d, want 401", code)
	}
	ws, err := exec.Command(realpath(t, "/usr/bin/python3"), "../supervisor/ingress/testdata/ws_client.py", "127.0.0.1:18789", "hello through the ingress", "Authorization: Bearer "+key).Output()
	if err != nil {
		t.Fatalf("WebSocket through the ingress: %v %s", err, ws)
	}
	var got struct {
		Status int
		Echo   string
	}
	json.Unmarshal(ws, &got)
	if got.Status != 101 || got.Echo != "hello through the ingress" {
		t.Errorf("WebSocket through the ingress: %s", ws)
	}
	st, err := exec.Command(airlockBin, "status", "--socket", filepath.Join(state, "admin.sock")).Output()
	if err != nil || !strings.Contains(string(st), "ready: yes") || !strings.Contains(string(st), "gateway") {
		t.Errorf("airlock status: %v\n%s", err, st)
	}

	// ^C, as in the terminal.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	select {
	case err := <-exited:
		// make dies of the ^C itself once airlock has exited; what
		// airlock did is in its output.
		var ee *exec.ExitError
		if err != nil && !(errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT) {
			t.Errorf("make run after ^C: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the demo pod did not stop within 30s of ^C")
	}
	var rest strings.Builder
	for l := range lines {
		rest.WriteString(l + "\n")
	}
	if !strings.Contains(rest.String(), `"msg":"pod stopped"`) || strings.Contains(rest.String(), `"level":"ERROR"`) {
		t.Errorf("the demo pod's stop:\n%s", rest.String())
	}
	if _, err := os.Stat(filepath.Join(state, "admin.sock")); err == nil {
		t.Errorf("the admin socket outlived the pod")
	}
	if _, err := os.Stat(podGroup(t, "airlock-demo")); err == nil {
		t.Errorf("the demo pod's cgroup outlived it")
	}
}
