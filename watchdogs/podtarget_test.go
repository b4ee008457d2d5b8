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

// A probe the pod refuses to dial (a port no service declares: 403; a
// name where it wants an address: 400) is a blind round, not a dead
// service: nothing is restarted, round after round, and the gateway
// watchdog's line keeps the blind kind, which inbox readers look for. A
// dial that reaches nothing (502 naming ECONNREFUSED) is a dead one (for
// a gateway its pod says runs, a strike toward hung).
func TestPodDialRefusalIsBlind(t *testing.T) {
	for _, tc := range []struct {
		name          string
		status        int
		body          string
		kind, gateway string // the shim's finding, the gateway's
		blind         bool
	}{
		{"undeclared port", http.StatusForbidden, `{"error":"port 8901 is no service's","rule":"dial_service_ports_only"}`, KindUnobservable, KindUnobservable, true},
		{"a name", http.StatusBadRequest, `{"error":"addr \"localhost:8901\": want a loopback IP:PORT"}`, KindUnobservable, KindUnobservable, true},
		{"nothing listens", http.StatusBadGateway, `{"error":"dial tcp 127.0.0.1:8901: connect: connection refused","errno":"ECONNREFUSED"}`, KindShimDead, KindGatewayHung, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("GET /v1/dial", func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			})
			mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
				io.WriteString(w, `{"pod":"p","services":[{"name":"shim","state":"healthy","launches":1},{"name":"gateway","state":"healthy","launches":1}]}`)
			})
			sock := testutil.ServeUnix(t, &http.Server{Handler: mux})
			pod := PodTarget{Socket: sock, Service: "shim", Timeout: time.Second}
			f := NewHTTPProbe("http://127.0.0.1:8901/v1/models", time.Second, KindShimDead, KindShimHung, pod.Dial).Probe(context.Background())
			if f.Kind != tc.kind || f.Blind != tc.blind {
				t.Errorf("finding %+v; want kind %s, blind %v", f, tc.kind, tc.blind)
			}
			pod.Service = "gateway"
			g := &Gateway{Target: pod, Health: NewHTTPProbe("http://127.0.0.1:8901/healthz", time.Second, KindGatewayCrash, KindGatewayHung, pod.Dial),
				Heap: Steps{Max: 4096}, Memory: Steps{Max: 8 << 30}}
			if f := g.Probe(context.Background()); f.Kind != tc.gateway || f.Blind != tc.blind {
				t.Errorf("the gateway's finding %+v; want kind %s, blind %v", f, tc.gateway, tc.blind)
			}
		})
	}
}
