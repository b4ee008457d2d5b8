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
// runs, when its leaf would be a service's, and once the pod stops.
func TestOneOffAddRefusals(t *testing.T) {
	o := newOneOffs(&Pod{m: &manifest.Pod{Name: "p"}})
	o.services = map[string]proxy.Service{"/airlock-pod-p/airlock-p-svc": {ID: "svc"}}
	o.byID["spawn-1"] = &oneOff{}
	for _, tc := range []struct {
		name, id, cg string
		closed       bool
		status       int
		want         string
	}{
		{"id running", "spawn-1", "/airlock-pod-p/airlock-spawn-1", false, 409, `id "spawn-1": a sandbox of that id is running`},
		{"a service's leaf", "p-svc", "/airlock-pod-p/airlock-p-svc", false, 409, "its cgroup is a service's"},
		{"pod stopping", "spawn-2", "/airlock-pod-p/airlock-spawn-2", true, 503, "pod p is stopping"},
	} {
		if tc.closed {
			o.byID = map[string]*oneOff{}
			o.close(context.Background())
		}
		err := o.add(&oneOff{spec: adminclient.SandboxSpec{ID: tc.id}, cg: tc.cg})
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
		if got := validSandboxID(tc.id); got != tc.want {
			t.Errorf("validSandboxID(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}
