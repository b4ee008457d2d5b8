package watchdogs

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// A restart the pod accepts but whose new instance the watchdog never
// sees says why the last look saw nothing: here, the service gone from the
// pod's status.
func TestPodRestartTimeoutSaysWhy(t *testing.T) {
	var restarted atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		if restarted.Load() {
			io.WriteString(w, `{"pod":"p","services":[]}`)
			return
		}
		io.WriteString(w, `{"pod":"p","services":[{"name":"shim","state":"running","launches":1}]}`)
	})
	mux.HandleFunc("POST /v1/services/shim/restart", func(w http.ResponseWriter, _ *http.Request) {
		restarted.Store(true)
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"restarting":"shim"}`)
	})
	sock := testutil.ServeUnix(t, &http.Server{Handler: mux})
	target := PodTarget{Socket: sock, Service: "shim", Timeout: 300 * time.Millisecond}
	err := target.Restart(context.Background(), Change{}, &TargetMemory{})
	if err == nil || !strings.Contains(err.Error(), "did not begin a new instance") || !strings.Contains(err.Error(), `has no service "shim"`) {
		t.Errorf("Restart = %v; want the timeout, and the last status read's error", err)
	}
}
