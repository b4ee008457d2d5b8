package main

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testca"
)

// mitmproxy, as the bench runs it, verifies the origin against the bench's
// CA only, and its clients trust its own CA: the inspected load succeeds;
// with an origin signed by another CA it fails, and the failure is the
// measurement's error, not a figure.
func TestMitmproxyVerifiesOrigin(t *testing.T) {
	if _, err := exec.LookPath("mitmdump"); err != nil {
		t.Skip("mitmdump not installed (apt-get install mitmproxy)")
	}
	defer func(d time.Duration, c int) { *duration, *conc = d, c }(*duration, *conc)
	*duration, *conc = 200*time.Millisecond, 2
	dir := t.TempDir()
	up, err := startUpstreams(dir)
	if err != nil {
		t.Fatal(err)
	}
	other, err := testca.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, trusted, wantErr string
	}{
		{"the bench's CA", up.caFile, ""},
		{"another CA", other.File, "status 502"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := *up
			u.caFile = tc.trusted
			r, err := startMitmproxy(dir, &u)
			if err != nil {
				t.Fatal(err)
			}
			defer r.stop()
			res := inspectedPath.load(r, &u, &window{proxy: r.cmd})
			switch {
			case tc.wantErr == "" && (res.err != nil || res.ops == 0):
				t.Fatalf("inspected keep-alive through mitmproxy trusting %s: %d ops, error %v; want some, no error", tc.name, res.ops, res.err)
			case tc.wantErr != "" && (res.err == nil || !strings.Contains(res.err.Error(), tc.wantErr)):
				t.Fatalf("inspected keep-alive through mitmproxy trusting %s: error %v; want %q", tc.name, res.err, tc.wantErr)
			}
		})
	}
}
