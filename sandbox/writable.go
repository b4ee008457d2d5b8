package sandbox

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// Landlock refuses writes outside Config.RW, but not all of what a file's
// owner may do to it: its mode (chmod 666 of a secret, a setuid bit), its
// owner, its times, its extended attributes and ACLs are changed with no
// Landlock right at all, on any file the sandbox's uid owns and can name,
// given to read or not given. A mount made read-only refuses each of those
// (EROFS). So every mount of the sandbox's namespace is made read-only
// (noDevices, in the same call as nodev), and writable again only where the
// sandbox is given to write: each mount whose point is within a path of
// Config.RW and that was writable before (writableMounts). A path given to write that is no
// mount point of its own is made one first (bindWritable), bound onto
// itself, so that it, not the whole filesystem it is on, is what stays
// writable.

// bindWritable binds each path the sandbox is given to write onto itself,
// where it is not a mount point already (a path mounted back below a
// covered directory is one): the mounts noDevices makes writable again.
// Devices are left alone (a read-only mount does not stop a device's
// writes) and so is a path that does not exist (Landlock's open refuses
// it; without Landlock, there is nothing there to write). One root may not
// open (below a FUSE mount without allow_other) refuses the launch: it
// could not be made writable but with its whole mount.
func bindWritable(c *Config) error {
	mounts, err := readMounts()
	if err != nil {
		return err
	}
	for _, p := range outermost(resolved(c, c.RW)) {
		if isMountPoint(mounts, p) {
			continue
		}
		f, err := openResolved(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("path %s, given to write: %w (the sandbox's mounts are read-only but where it is given to write, each path bound onto itself by root)", p, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(int(f.Fd()), &st)
		if err == nil && st.Mode&unix.S_IFMT != unix.S_IFCHR && st.Mode&unix.S_IFMT != unix.S_IFBLK {
			// By the descriptor, which names what was opened: a link
			// swapped in on the way since would lead the bind
			// elsewhere, and the point outside every path given.
			src := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
			if err = unix.Mount(src, src, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				err = &os.SyscallError{Syscall: "mount(" + p + ", MS_BIND) onto itself", Err: err}
			}
		}
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// writableMounts says which of mounts stay writable: those that were and
// whose point is within a path given to write (rw, resolved; bindWritable
// made each one a mount point), and the innermost mount holding a v1
// cgroup directory the command stage joins by writing its tasks file
// (cgroups; its files are root's: the sandbox's uid writes none of them).
// A path given to write is never reason to keep the mount that holds it
// writable: gone, or renamed away, when it was to be bound, it would make
// the whole filesystem it was on the sandbox's to chmod.
func writableMounts(mounts []mount, rw, cgroups []string) map[uint64]bool {
	out := map[uint64]bool{}
	for _, m := range mounts {
		if m.HasOpt("ro") {
			continue
		}
		if slices.ContainsFunc(rw, func(p string) bool { return within(m.Point, p) }) ||
			slices.ContainsFunc(cgroups, func(d string) bool { return innermost(mounts, d) == m.Point }) {
			out[m.ID] = true
		}
	}
	return out
}

// isMountPoint says whether a mount has p as its point.
func isMountPoint(mounts []mount, p string) bool {
	return slices.ContainsFunc(mounts, func(m mount) bool { return m.Point == p })
}

// innermost is the point of the deepest mount p is within.
func innermost(mounts []mount, p string) string {
	best := "/"
	for _, m := range mounts {
		if within(p, m.Point) && len(m.Point) > len(best) {
			best = m.Point
		}
	}
	return best
}

// outermost is paths, each once, less those within another of them.
func outermost(paths []string) []string {
	paths = slices.Compact(slices.Sorted(slices.Values(paths)))
	return slices.DeleteFunc(slices.Clone(paths), func(p string) bool {
		return slices.ContainsFunc(paths, func(q string) bool { return q != p && within(p, q) })
	})
}
