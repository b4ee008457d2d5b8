package connhook

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// What a launcher hands to a holder at its exit (Tracepoints) is every
// tracepoint the hook attached, the connect(2) one and the exec table's
// six, each its own link: one left out would detach in the launcher's
// exit after all.
func TestTracepointsAreTheHooks(t *testing.T) {
	testutil.RequireRoot(t, "BPF tracepoint programs")
	_, err := connectFDs()
	testutil.RequireFeature(t, "the connect(2) tracepoint (tracefs at /sys/kernel/tracing; .ci/run mounts it)", err)
	_, err = execTimes()
	testutil.RequireFeature(t, "the exec tracepoints", err)
	files, err := Tracepoints()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range files {
		defer f.Close()
		got[linkID(t, int(f.Fd()))] = true
	}
	want := map[string]bool{}
	tracepoints.Lock()
	links := slices.Clone(tracepoints.links)
	tracepoints.Unlock()
	for _, l := range links {
		fl, ok := l.(interface{ FD() int })
		if !ok {
			testutil.RequireFeature(t, "BPF perf links (Linux 5.15)", fmt.Errorf("a %T link", l))
		}
		want[linkID(t, fl.FD())] = true
	}
	if len(want) != 7 {
		t.Errorf("%d tracepoint links kept for the process, want 7", len(want))
	}
	if !maps.Equal(got, want) {
		t.Errorf("the links handed over %v, want the kept ones %v", got, want)
	}
}

// linkID is the BPF link fd refers to, from its fdinfo.
func linkID(t *testing.T, fd int) string {
	t.Helper()
	info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	_, id, ok := strings.Cut(string(info), "\nlink_id:\t")
	if !ok {
		t.Fatalf("descriptor %d is no BPF link:\n%s", fd, info)
	}
	id, _, _ = strings.Cut(id, "\n")
	return id
}
