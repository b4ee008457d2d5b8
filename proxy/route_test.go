package proxy

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/proxy/identity"
)

func TestByCgroup(t *testing.T) {
	a := Service{ID: "pod-a", Kind: "svc", Preset: "a"}
	deep := Service{ID: "pod-deep", Kind: "svc", Preset: "deep"}
	route := ByCgroup(map[string]Service{"/pod/a": a, "/pod/a/deep/": deep})
	for _, tc := range []struct {
		cgroup string
		want   Service
	}{
		{"/pod/a", a},
		{"/pod/a/worker", a},            // a descendant of the service's leaf
		{"/pod/a/deep", deep},           // nested services: the deepest wins
		{"/pod/a/deep/x/y", deep},       //
		{"/pod/ab", Service{}},          // a sibling whose name extends the leaf's
		{"/pod", Service{}},             // the pod's own cgroup is no service's
		{"/", Service{}},                //
		{"", Service{}},                 // no cgroup v2
		{"pod/a", Service{}},            // not a /proc/<pid>/cgroup path
		{"/pod/a (deleted)", Service{}}, // a removed cgroup is no longer the leaf
	} {
		got, err := route(&identity.Process{PID: 7, Exe: "/usr/bin/curl", Cgroup: tc.cgroup})
		if got != tc.want {
			t.Errorf("ByCgroup(%q) = %+v, %v; want %+v", tc.cgroup, got, err, tc.want)
		}
		if (err == nil) != (tc.want != Service{}) {
			t.Errorf("ByCgroup(%q) error = %v", tc.cgroup, err)
		}
		if err != nil && tc.cgroup != "" && !strings.Contains(err.Error(), "cgroup "+tc.cgroup+",") {
			t.Errorf("ByCgroup(%q) error %q does not name the process's cgroup", tc.cgroup, err)
		}
	}
}
