package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// The example input the README shows explains as the README says, given
// as a file or on stdin.
func TestExampleInput(t *testing.T) {
	path := filepath.Join("..", "..", exampleInput)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme, _ := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if cmd := "airlock policy explain --input " + exampleInput; !strings.Contains(string(readme), cmd) {
		t.Errorf("README.md does not show %q", cmd)
	}
	for _, tc := range []struct {
		stdin string
		args  []string
		want  []string
	}{
		{"", []string{"policy", "explain", "--input", path}, []string{"DENY", "reason=binary_not_allowed", `rule="github-api-read"`, "/usr/bin/wget"}},
		{string(raw), []string{"policy", "explain"}, []string{"DENY", "reason=binary_not_allowed", "/usr/bin/wget"}},
		{"", []string{"policy", "eval", "--input", path}, []string{`"allow": false`, `"reason": "binary_not_allowed"`}},
		{"", []string{"policy", "explain", "--preset", "strict", "--input", path}, []string{"DENY", "preset=strict"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := airlock(t, tc.stdin, tc.args...)
			for _, w := range tc.want {
				if code != ExitOK || !strings.Contains(out, w) {
					t.Errorf("airlock %v = %d, lacks %q:\n%s%s", tc.args, code, w, out, errs)
				}
			}
		})
	}
}

// With no --input and stdin a terminal, eval and explain say what they
// want and exit 2 rather than wait silently for a JSON document; with
// stdin empty they say so.
func TestPolicyInputWanted(t *testing.T) {
	for _, sub := range []string{"eval", "explain"} {
		t.Run(sub+" on a terminal", func(t *testing.T) {
			_, tty := testutil.OpenPty(t)
			type result struct {
				code int
				errs strings.Builder
			}
			done := make(chan *result, 1)
			go func() {
				r := &result{}
				r.code = run([]string{"policy", sub, "--preset", "reviewer"}, tty, &strings.Builder{}, &r.errs)
				done <- r
			}()
			select {
			case r := <-done:
				if errs := r.errs.String(); r.code != ExitUsage || !strings.Contains(errs, "--input FILE") || !strings.Contains(errs, exampleInput) {
					t.Errorf("policy %s with stdin a terminal = %d %q; want %d naming --input and the example", sub, r.code, errs, ExitUsage)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("policy %s waits on the terminal for input it does not name", sub)
			}
		})
		t.Run(sub+" on empty stdin", func(t *testing.T) {
			code, _, errs := airlock(t, "", "policy", sub, "--preset", "reviewer")
			if code != ExitUsage || !strings.Contains(errs, "input - is empty") {
				t.Errorf("policy %s on empty stdin = %d %q; want %d saying it is empty", sub, code, errs, ExitUsage)
			}
		})
	}
}
