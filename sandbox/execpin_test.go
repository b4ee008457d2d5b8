package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// pinDir is a directory the sandbox's uid can reach and execute from.
func pinDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "airlock-pin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A pinned command runs only if the file the command stage opens has the
// pinned digest: one swapped after whoever checked it (here: a pin that
// is not the file's) is refused at setup, naming the path and both
// digests, and nothing runs.
func TestPinnedBinaryMismatchRefused(t *testing.T) {
	dir := pinDir(t)
	marker := filepath.Join(dir, "ran")
	c := base(t, "/bin/sh", "-c", "touch "+marker)
	c.RW = append(c.RW, dir)
	c.CommandSHA256 = strings.Repeat("0", 64)
	_, _, err := run(t, c)
	var se *SetupError
	got := sha256File(t, "/bin/sh")
	if !errors.As(err, &se) || se.Step != "verify pinned binary" ||
		!strings.Contains(se.Err, "/bin/sh has sha256 "+got+", want "+c.CommandSHA256) {
		t.Fatalf("launch with a wrong pin = %v; want the step, the path and both digests", err)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the refused command ran (%s: %v)", marker, err)
	}
}

// A FIFO where the pinned binary was is refused at once, as no regular
// file: opened as the binary is, it would hold the launch until a writer
// came.
func TestPinnedBinaryFIFORefused(t *testing.T) {
	dir := pinDir(t)
	fifo := filepath.Join(dir, "agent")
	if err := unix.Mkfifo(fifo, 0o755); err != nil {
		t.Fatal(err)
	}
	c := base(t, fifo)
	c.Exec = append(c.Exec, dir)
	c.CommandSHA256 = strings.Repeat("0", 64)
	done := make(chan error, 1)
	go func() { _, _, err := run(t, c); done <- err }()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		// Let the launch go, so that the test ends.
		if f, oerr := os.OpenFile(fifo, os.O_WRONLY, 0); oerr == nil {
			f.Close()
		}
		err = <-done
		t.Fatalf("the launch waited on the FIFO for a writer (then: %v)", err)
	}
	var se *SetupError
	if !errors.As(err, &se) || se.Step != "verify pinned binary" || !strings.Contains(se.Err, fifo+" is not a regular file") {
		t.Fatalf("launch of a pinned FIFO = %v; want it refused as no regular file", err)
	}
}

// A pinned binary or script with its digest runs, and what the kernel
// execs is the descriptor the digest was checked on, not the path: a
// pinned script is handed to its interpreter as /proc/self/fd/N.
func TestPinnedBinaryRunsTheVerifiedFile(t *testing.T) {
	dir := pinDir(t)
	script := filepath.Join(dir, "agent")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$0 $1\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cmd  []string
		want *regexp.Regexp
		code int
	}{
		{"binary", []string{"/bin/sh", "-c", "echo ok; exit 7"}, regexp.MustCompile(`^ok\n$`), 7},
		{"script", []string{script, "arg"}, regexp.MustCompile(`^/proc/self/fd/[0-9]+ arg\n$`), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base(t, tc.cmd...)
			c.Exec = append(c.Exec, dir)
			c.CommandSHA256 = sha256File(t, tc.cmd[0])
			out, code, err := run(t, c)
			if err != nil || code != tc.code || !tc.want.MatchString(out) {
				t.Fatalf("pinned %v = %q, exit %d, %v; want %v, exit %d", tc.cmd, out, code, err, tc.want, tc.code)
			}
		})
	}
}

func TestValidatePin(t *testing.T) {
	for _, tc := range []struct {
		name, cmd, pin, want string
	}{
		{"relative", "sh", strings.Repeat("a", 64), `pinned command "sh" must be an absolute path`},
		{"not hex", "/bin/sh", "sha256:" + strings.Repeat("a", 64), "want 64 lower-case hex digits"},
		{"upper case", "/bin/sh", strings.Repeat("A", 64), "want 64 lower-case hex digits"},
		{"short", "/bin/sh", strings.Repeat("a", 63), "want 64 lower-case hex digits"},
		{"a letter past f", "/bin/sh", strings.Repeat("a", 63) + "g", "want 64 lower-case hex digits"},
		{"good", "/bin/sh", strings.Repeat("a", 64), ""},
	} {
		c := Defaults()
		c.Net = NetNone
		c.Command, c.CommandSHA256 = []string{tc.cmd}, tc.pin
		err := c.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: Validate = %v; want %q", tc.name, err, tc.want)
		}
	}
}
