package cgroup2_test

import (
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// A directory under the v2 mount is named as /proc/<pid>/cgroup names it;
// one outside it is an error.
func TestPath(t *testing.T) {
	mnt := testutil.RequireCgroup2(t)
	for _, tc := range []struct {
		dir, want string
	}{
		{mnt, "/"},
		{mnt + "/", "/"},
		{filepath.Join(mnt, "airlock-pod", "agent"), "/airlock-pod/agent"},
		{filepath.Join(mnt, "a", "..", "b"), "/b"},
		{filepath.Join(mnt, ".."), ""},
		{"/tmp", ""},
	} {
		got, err := cgroup2.Path(tc.dir)
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("Path(%q) = %q, %v; want %q", tc.dir, got, err, tc.want)
		}
	}
}
