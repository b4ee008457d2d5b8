package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"golang.org/x/sys/unix"
)

// The stage a launcher embeds runs from a memory file that nothing can
// change once sealed, through a read-only, close-on-exec descriptor, and
// runs whatever numbers the launcher's descriptors have.
func TestSealedStage(t *testing.T) {
	bin, err := os.ReadFile(testutil.RequireTool(t, "true"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := sealedStage(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("F_GETFD = %#x, %v: want FD_CLOEXEC (only stageCommand passes it on)", flags, err)
	}
	// The stage at 200, a passed pipe at 199: the child moves its own
	// pipe to just above the highest descriptor passed, 200, before
	// exec; a path naming the launcher's number would run that pipe.
	high := func(f *os.File, n int) *os.File {
		if err := unix.Dup3(int(f.Fd()), n, unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		g := os.NewFile(uintptr(n), f.Name())
		t.Cleanup(func() { g.Close() })
		return g
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	cmd := stageCommandOf(high(f, 200), []*os.File{r, w, high(r, 199)}, modeReaper)
	if err := cmd.Run(); err != nil {
		t.Errorf("exec %s with descriptors 199 and 200 passed: %v", cmd.Path, err)
	}
	// Even root reopening it for writing cannot change a sealed file.
	sw, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), os.O_WRONLY, 0)
	if err == nil {
		_, err = sw.Write([]byte("x"))
		sw.Close()
	}
	if !errors.Is(err, syscall.EPERM) {
		t.Errorf("writing the sealed stage: %v, want EPERM", err)
	}
}

// The command is looked up in the sandbox's PATH, its absolute entries
// only: an empty or relative entry would find a file of the directory the
// sandbox happens to be in.
func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for _, tc := range []struct {
		path, want string
	}{
		{"PATH=" + dir, tool},
		{"PATH=/nonexistent:" + dir, tool},
		{"PATH=", ""},
		{"PATH=:/nonexistent", ""},
		{"PATH=.", ""},
	} {
		got, err := lookPath("tool", []string{tc.path})
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("lookPath(tool, %s) = %q, %v; want %q", tc.path, got, err, tc.want)
		}
	}
}
