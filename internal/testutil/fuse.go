package testutil

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// HungFUSE mounts on a new temporary directory a FUSE filesystem whose
// server never answers, as one whose daemon has hung does: a look at or
// below the directory waits in the kernel (killably, as FUSE's waits are)
// until the test ends, when the connection is ended (its device closed:
// every wait fails with ENOTCONN) and the mount taken away. It needs root
// and the kernel's fuse.
func HungFUSE(t testing.TB) string {
	t.Helper()
	RequireRoot(t, "a hung FUSE mount")
	dir := t.TempDir()
	dev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	RequireFeature(t, "FUSE (/dev/fuse)", err)
	// allow_other: every uid's look waits, the sandbox's included, not
	// only the mounting root's.
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", dev.Fd())
	if err := unix.Mount("airlock-test", dir, "fuse.hung", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		dev.Close()
		RequireFeature(t, "a FUSE mount", err)
	}
	t.Cleanup(func() {
		dev.Close()
		unix.Unmount(dir, unix.MNT_DETACH)
	})
	return dir
}
