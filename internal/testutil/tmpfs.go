package testutil

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a tmpfs of size bytes on a new temporary directory and
// returns it, unmounted when the test ends: a real filesystem that fills
// up, for tests of what a full disk does. It needs root.
func Tmpfs(t testing.TB, size int) string {
	t.Helper()
	RequireRoot(t, "a full filesystem (tmpfs mount)")
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}
