package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/adminclient"
)

// A flag the pod decides is refused beside --pod-socket even when an
// AIRLOCK_* variable set it, and the refusal names the variable: the user
// typed no such flag.
func TestPodLaunchNamesTheVariable(t *testing.T) {
	t.Setenv("AIRLOCK_POLICY", t.TempDir())
	var out, errs strings.Builder
	code := run([]string{"launch", "--pod-socket", "/nonexistent/pod.sock", "--preset", "strict", "--", "/bin/true"}, strings.NewReader(""), &out, &errs)
	if code != ExitUsage || !strings.Contains(errs.String(), "--policy (from AIRLOCK_POLICY in the environment: unset it)") {
		t.Fatalf("exit %d, stderr %q; want %d naming AIRLOCK_POLICY", code, errs.String(), ExitUsage)
	}
}

// --memory-max and --pids-max go to the pod, which takes them as lower
// limits than its own for the one-off; its refusal of one above them is a
// usage error, and a non-positive one never reaches it.
func TestPodLaunchPassesLimits(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	specs := make(chan adminclient.SandboxSpec, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var spec adminclient.SandboxSpec
		json.NewDecoder(r.Body).Decode(&spec)
		specs <- spec
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error": "pids_max 4096: above the pod's limit for a one-off sandbox, 1024"}`)
	})}
	go srv.Serve(ln)
	defer srv.Close()

	var out, errs strings.Builder
	code := run([]string{"launch", "--pod-socket", sock, "--preset", "strict", "--memory-max", "1048576", "--pids-max", "4096", "--", "/bin/true"}, strings.NewReader(""), &out, &errs)
	if code != ExitUsage || !strings.Contains(errs.String(), "above the pod's limit") {
		t.Errorf("exit %d, stderr %q; want %d with the pod's refusal", code, errs.String(), ExitUsage)
	}
	select {
	case spec := <-specs:
		if spec.MemoryMax != 1<<20 || spec.PidsMax != 4096 {
			t.Errorf("the pod was sent memory_max %d, pids_max %d; want 1048576 and 4096", spec.MemoryMax, spec.PidsMax)
		}
	default:
		t.Fatal("the pod was sent no spec")
	}

	errs.Reset()
	code = run([]string{"launch", "--pod-socket", sock, "--preset", "strict", "--pids-max", "0", "--", "/bin/true"}, strings.NewReader(""), &out, &errs)
	if code != ExitUsage || !strings.Contains(errs.String(), "--pids-max 0: want a positive number of processes") || len(specs) != 0 {
		t.Errorf("--pids-max 0: exit %d, stderr %q, %d specs sent; want %d, refused here", code, errs.String(), len(specs), ExitUsage)
	}
}

// A pod running as many one-offs as its manifest's sandboxes.max refuses
// another (429): the launcher exits 125 and shows the pod's reason, so its
// user knows to wait for one to end rather than to fix a flag.
func TestPodLaunchShowsTheCountRefusal(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	const reason = "pod p runs 16 one-off sandboxes, its most (its manifest's sandboxes.max): launch again once one has ended"
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
		json.NewEncoder(w).Encode(map[string]string{"error": reason})
	})}
	go srv.Serve(ln)
	defer srv.Close()
	var out, errs strings.Builder
	code := run([]string{"launch", "--pod-socket", sock, "--preset", "strict", "--", "/bin/true"}, strings.NewReader(""), &out, &errs)
	if code != ExitLaunch || !strings.Contains(errs.String(), "429 Too Many Requests: "+reason) {
		t.Errorf("exit %d, stderr %q; want %d with the pod's reason", code, errs.String(), ExitLaunch)
	}
}
