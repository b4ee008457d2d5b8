package sandbox

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// kernelViews are the filesystems that show the host's processes, hardware,
// cgroups, BPF objects or IPC wherever they are mounted, each with the one
// place the host has it. Device filesystems (devpts, devtmpfs) are not
// among them: outside /dev no device can be opened at all (noDevices).
var kernelViews = map[string]string{
	"proc": "/proc", "sysfs": "/sys", "cgroup": "/sys", "cgroup2": "/sys", "bpf": "/sys",
	"mqueue": "/dev", "hugetlbfs": "/dev",
}

// ownTrees are replaced whole by the sandbox's own (mountProc, privateDev):
// what the host mounted below them is out of reach.
var ownTrees = []string{"/proc", "/dev"}

// maxHostViews bounds hideHostViews' rounds: each takes one mount away.
const maxHostViews = 256

// hideHostViews takes away, in the sandbox's mount namespace, every mount
// that would show the host under a path the sandbox is given, through the
// rules that let it read there:
//   - kernelViews outside their places (a chroot's /proc shows the host's
//     processes, their command lines and, to their uid, environments);
//   - off the host network, any other mount of what hostSocketDirs hide (a
//     chroot's bind of /run, /tmp or /var/lib): Landlock does not mediate
//     connect(2) to a socket by path, and hideHostServices hides each
//     directory only where it is.
//
// Deepest first, one at a time, reading the mounts again after each: a
// mount stacked on one of them is taken away first (it is what the path
// reaches), and a mount detached with its parent is gone. One hidden under
// another mount is out of reach, and left. Any that cannot be taken away,
// or mounts that cannot be read, refuse the launch.
func hideHostViews(c *Config) error {
	var socketDirs []string
	if c.Net != NetHost {
		for _, d := range hostSocketDirs {
			if real, err := filepath.EvalSymlinks(d); err == nil && !slices.Contains(socketDirs, real) {
				socketDirs = append(socketDirs, real)
			}
		}
	}
	for range maxHostViews {
		mounts, err := readMounts()
		if err != nil {
			return err
		}
		var next *mount
		for _, m := range exposing(mounts, socketDirs) {
			if m.reachable() {
				next = &m
				break
			}
		}
		if next == nil {
			return nil
		}
		if err := unix.Unmount(next.point, unix.MNT_DETACH); err != nil {
			return &os.SyscallError{Syscall: "umount2(" + next.point + ", MNT_DETACH)", Err: err}
		}
	}
	return fmt.Errorf("more than %d mounts of the host's views to take away", maxHostViews)
}

// noDevices makes every mount outside /dev nodev: a device node anywhere
// else (a chroot's /dev/pts or /dev/console, a container's /dev bound under
// /srv) cannot be opened, so the sandbox reaches no terminal or device but
// those its own /dev holds (privateDev, ownPTYs). The whole tree is set,
// then /dev's again cleared: no mount is looked up by path.
func noDevices(*Config) error {
	set := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", unix.AT_RECURSIVE, set); err != nil {
		return &os.SyscallError{Syscall: "mount_setattr(/, AT_RECURSIVE, MOUNT_ATTR_NODEV) (Linux 5.12)", Err: err}
	}
	clear := &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(unix.AT_FDCWD, "/dev", unix.AT_RECURSIVE, clear); err != nil {
		return &os.SyscallError{Syscall: "mount_setattr(/dev, AT_RECURSIVE, clear MOUNT_ATTR_NODEV)", Err: err}
	}
	return nil
}

// mount is one line of mountinfo (proc(5)).
type mount struct {
	id     uint64
	dev    string // major:minor of its filesystem
	root   string // what of its filesystem is mounted
	point  string
	fstype string
}

// reachable says whether the mount is what its mount point reaches, not
// one hidden under another mount there or above it.
func (m mount) reachable() bool {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, m.point, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT, unix.STATX_MNT_ID, &st)
	return err == nil && st.Mask&unix.STATX_MNT_ID != 0 && st.Mnt_id == m.id
}

func readMounts() ([]mount, error) {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseMounts(raw)
}

// parseMounts reads mountinfo whole, or fails: a mount left unread could
// be one to take away.
func parseMounts(raw []byte) ([]mount, error) {
	var mounts []mount
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if len(f) < 5 || sep < 6 || sep+1 >= len(f) {
			return nil, fmt.Errorf("mountinfo: cannot read the line %q", sc.Text())
		}
		id, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("mountinfo: cannot read the line %q", sc.Text())
		}
		mounts = append(mounts, mount{id: id, dev: f[2], root: unescapeMount(f[3]), point: unescapeMount(f[4]), fstype: f[sep+1]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	if len(mounts) == 0 {
		return nil, errors.New("mountinfo: no mounts")
	}
	return mounts, nil
}

// exposing is the mounts that hideHostViews takes away, deepest first.
func exposing(mounts []mount, socketDirs []string) []mount {
	hidden := hiddenParts(mounts, socketDirs)
	var found []mount
	for _, m := range mounts {
		if slices.ContainsFunc(ownTrees, func(t string) bool { return within(m.point, t) }) {
			continue
		}
		own, view := kernelViews[m.fstype]
		if view && !within(m.point, own) || showsHidden(m, hidden) {
			found = append(found, m)
		}
	}
	slices.SortStableFunc(found, func(a, b mount) int {
		return cmp.Compare(strings.Count(b.point, "/"), strings.Count(a.point, "/"))
	})
	return found
}

// hiddenPart is what of a filesystem a socket directory shows: the
// directory (its own mount's part of it, or the mount it lies in), and
// every mount below it.
type hiddenPart struct {
	dir  string // the socket directory
	dev  string
	path string // within the filesystem
}

func hiddenParts(mounts []mount, socketDirs []string) []hiddenPart {
	var parts []hiddenPart
	for _, d := range socketDirs {
		// The topmost mount d lies in: the longest mount point above
		// it, the last of equals (a later mount is stacked on top).
		var in *mount
		for i, m := range mounts {
			if within(d, m.point) && (in == nil || len(m.point) >= len(in.point)) {
				in = &mounts[i]
			}
		}
		if in != nil {
			rel, _ := filepath.Rel(in.point, d)
			parts = append(parts, hiddenPart{d, in.dev, filepath.Join(in.root, rel)})
		}
		for _, m := range mounts {
			if within(m.point, d) && m.point != d {
				parts = append(parts, hiddenPart{d, m.dev, m.root})
			}
		}
	}
	return parts
}

// showsHidden says whether m, mounted outside the socket directories,
// shows some of what they hide: the same filesystem, and a part of it that
// holds or lies in a hidden part.
func showsHidden(m mount, hidden []hiddenPart) bool {
	return slices.ContainsFunc(hidden, func(h hiddenPart) bool {
		return m.dev == h.dev && !within(m.point, h.dir) && !within(h.dir, m.point) &&
			(within(m.root, h.path) || within(h.path, m.root))
	})
}

// unescapeMount undoes mountinfo's escapes of a path: space, tab, newline
// and backslash as three octal digits.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out = append(out, byte(n))
				i += 3
				continue
			}
		}
		out = append(out, s[i])
	}
	return string(out)
}
