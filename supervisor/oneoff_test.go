package supervisor

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/adminclient"
	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
)

// A one-off is refused, with the status and field, when one of its id
// runs, when its leaf would be a service's, when its id is a service's or
// the pod's, and once the pod stops.
func TestOneOffAddRefusals(t *testing.T) {
	o := newOneOffs(&Pod{m: &manifest.Pod{Name: "p"}})
	o.services = map[string]proxy.Service{"/airlock-pod-p/airlock-p-svc": {ID: "svc"}, "/airlock-pod-p/airlock-p-gateway": {ID: "gateway"}}
	o.byID["spawn-1"] = &oneOff{}
	for _, tc := range []struct {
		name, id, cg string
		closed       bool
		status       int
		want         string
	}{
		{"id running", "spawn-1", "/airlock-pod-p/airlock-spawn-1", false, 409, `id "spawn-1": a sandbox of that id is running`},
		{"a service's leaf", "p-svc", "/airlock-pod-p/airlock-p-svc", false, 409, "its cgroup is a service's"},
		// Lines and metrics are keyed by id: a one-off named gateway
		// would be given the service's lines (tee) and end its series.
		{"a service's id", "gateway", "/airlock-pod-p/airlock-gateway", false, 409, `id "gateway": a service of pod p has that id`},
		{"the pod's name", "p", "/airlock-pod-p/airlock-p", false, 409, `id "p": it is pod p's own name`},
		// A service's exec probe runs in that leaf.
		{"a probe's", "p-svc.probe", "/airlock-pod-p/airlock-p-svc.probe", false, 409, `id "p-svc.probe": ids ending ".probe" are the services' probes'`},
		{"pod stopping", "spawn-2", "/airlock-pod-p/airlock-spawn-2", true, 503, "pod p is stopping"},
	} {
		if tc.closed {
			o.byID = map[string]*oneOff{}
			o.close(context.Background())
		}
		x := &oneOff{spec: adminclient.SandboxSpec{ID: tc.id}, cg: tc.cg}
		err := o.add(x)
		if err == nil { // taken: the pod's stop below would wait for it
			delete(o.byID, tc.id)
			o.wg.Done()
		}
		var r *refusal
		if !errors.As(err, &r) || r.status != tc.status || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: add = %v; want %d naming %q", tc.name, err, tc.status, tc.want)
		}
	}
}

// A one-off's ID is its cgroup's name: 1 to 100 of letters, digits, '.',
// '_', '-', not starting with punctuation; nothing else (no '/', no "..").
func TestValidSandboxID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"spawn-1", true}, {"a", true}, {"A.b_c-9", true}, {strings.Repeat("x", 100), true},
		{"", false}, {strings.Repeat("x", 101), false}, {"-a", false}, {".a", false}, {"_a", false},
		{"..", false}, {"a/b", false}, {"a b", false}, {"é", false}, {"a\n", false},
	} {
		if got := ValidSandboxID(tc.id); got != tc.want {
			t.Errorf("ValidSandboxID(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}
