package sandbox

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
	"golang.org/x/sys/unix"
)

// kernelViews are the filesystems that show the host's processes, hardware,
// cgroups, BPF objects or IPC wherever they are mounted, each with the one
// place the host has it. Device filesystems (devpts, devtmpfs) are not
// among them: outside /dev no device can be opened at all (noDevices).
// Nor is hugetlbfs, which shows no more than a tmpfs (and has its place
// where a DPDK setup or a Kubernetes volume puts it).
var kernelViews = map[string]string{
	"proc": "/proc", "sysfs": "/sys", "cgroup": "/sys", "cgroup2": "/sys", "bpf": "/sys", "mqueue": "/dev",
}

// ownTrees are replaced whole by the sandbox's own (mountProc, privateDev):
// what the host mounted below them is out of reach.
var ownTrees = []string{"/proc", "/dev"}

// maxViewRounds bounds hideHostViews' rounds: each takes away every view
// a path reaches, and a later one only what that uncovered.
const maxViewRounds = 16

// hideHostViews takes away, in the sandbox's mount namespace, what would
// show the host under a path the sandbox is given, through the rules that
// let it read there:
//   - kernelViews outside their places (a chroot's /proc shows the host's
//     processes, their command lines and, to their uid, environments): the
//     mount is taken away;
//   - off the host network, what hostSocketDirs hide, shown again by
//     another mount of its filesystem (a chroot's bind of /run, a /var/tmp
//     bound from /tmp, the whole root bound under /host): Landlock does not
//     mediate connect(2) to a socket by path, and hideHostServices hides
//     each directory only where it is. A mount of nothing but that is taken
//     away; one that holds it has the spot covered by an empty read-only
//     tmpfs, as the directory itself is.
//
// Outermost first, every one a path reaches in a round (one hidden under
// another mount is out of reach, and left; one inside a mount taken away
// went with it), then the mounts are read again, for what taking one away
// uncovered. A spot a path the sandbox names lies in (--ro, --rw, --exec)
// refuses the launch, as anything that cannot be taken away does.
func hideHostViews(c *Config) error {
	var socketDirs []string
	if c.Net != NetHost {
		var err error
		if socketDirs, err = existingDirs(hostSocketDirs); err != nil {
			return err
		}
	}
	tmp, err := existingDirs(tmpDirs)
	if err != nil {
		return err
	}
	named := resolved(c, slices.Concat(c.RO, c.RW, c.Exec))
	// What privateTmp mounts back below the tmp directories, with all
	// that is mounted below it.
	kept := resolved(c, slices.Concat(c.RO, c.RW, c.Exec, []string{c.Dir}))
	var last string
	for range maxViewRounds {
		mounts, err := readMounts()
		if err != nil {
			return err
		}
		var gone []string // mounts taken away this round
		hid := 0
		for _, sh := range exposing(mounts, socketDirs, tmp, named, kept) {
			if slices.ContainsFunc(gone, func(g string) bool { return within(sh.spot, g) }) {
				continue
			}
			ok, err := sh.reachable()
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if i := slices.IndexFunc(named, func(p string) bool { return within(p, sh.spot) }); i >= 0 {
				return fmt.Errorf("path %s: it lies in %s, which shows the host's %s; name it where the host has it", named[i], sh.spot, sh.what)
			}
			if err := sh.hide(); err != nil {
				return err
			}
			if !sh.cover {
				gone = append(gone, sh.spot)
			}
			hid, last = hid+1, sh.spot
		}
		if hid == 0 {
			return nil
		}
	}
	return fmt.Errorf("the host's views still show after %d rounds of taking them away (the last at %s)", maxViewRounds, last)
}

// existingDirs is dirs as the kernel reaches them, those that exist, each
// once (/var/run is /run); one that cannot be looked at refuses the launch.
func existingDirs(dirs []string) ([]string, error) {
	var out []string
	for _, d := range dirs {
		real, err := filepath.EvalSymlinks(d)
		if errors.Is(err, os.ErrNotExist) || slices.Contains(out, real) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, real)
	}
	return out, nil
}

// resolved is paths as the kernel reaches them: their links followed (one
// that does not exist, as named; "" left out).
func resolved(c *Config, paths []string) []string {
	var out []string
	for _, n := range namedPaths(c, paths) {
		out = append(out, cmp.Or(n.real, n.path))
	}
	return out
}

// noDevices makes every mount outside /dev nodev: a device node anywhere
// else (a chroot's /dev/pts or /dev/console, a container's /dev bound under
// /srv) cannot be opened, so the sandbox reaches no terminal or device but
// those its own /dev holds (privateDev, ownPTYs). The whole tree at once,
// without looking a mount up by path, then the /dev mounts that allowed
// devices allow them again (and no other: /dev's tmpfs and /dev/shm stay
// nodev). A kernel before 5.12, or a root that is no mount (a chroot), has
// each mount remounted instead. A device the sandbox is given outside /dev
// refuses the launch, rather than fail to open in it.
func noDevices(c *Config) error {
	for _, p := range resolved(c, slices.Concat(c.RO, c.RW, c.Exec)) {
		if st, err := os.Stat(p); err == nil && st.Mode()&os.ModeDevice != 0 && !within(p, "/dev") {
			return fmt.Errorf("path %s: a device outside /dev, which opens in the sandbox only under /dev", p)
		}
	}
	mounts, err := readMounts()
	if err != nil {
		return err
	}
	writable := writableMounts(mounts, resolved(c, c.RW), c.Cgroups)
	set := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_RDONLY}
	err = unix.MountSetattr(unix.AT_FDCWD, "/", unix.AT_RECURSIVE, set)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		return remountNoDev(mounts, writable)
	}
	if err != nil {
		return &os.SyscallError{Syscall: "mount_setattr(/, AT_RECURSIVE, MOUNT_ATTR_NODEV|MOUNT_ATTR_RDONLY)", Err: err}
	}
	for _, m := range mounts {
		var clear uint64
		if within(m.Point, "/dev") && !m.HasOpt("nodev") {
			clear |= unix.MOUNT_ATTR_NODEV
		}
		if writable[m.ID] {
			clear |= unix.MOUNT_ATTR_RDONLY
		}
		if clear == 0 {
			continue
		}
		// By the descriptor that reached it: looked up again by path,
		// the point could lead (a directory on the way swapped for a
		// link meanwhile) to another mount, the root made writable.
		fd, err := openReached(m.Point, m.ID, false)
		if err != nil || fd < 0 {
			continue // hidden under another: nothing reaches it to clear
		}
		err = unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_clr: clear})
		unix.Close(fd)
		if err != nil {
			return &os.SyscallError{Syscall: "mount_setattr(" + m.Point + ", clear nodev or rdonly)", Err: err}
		}
	}
	return nil
}

// remountNoDev is noDevices mount by mount, each remounted with its own
// flags, nodev outside /dev, and read-only unless writable (by mount id):
// every one a path reaches that lacks either.
func remountNoDev(mounts []mount, writable map[uint64]bool) error {
	for _, m := range mounts {
		nodev := !within(m.Point, "/dev") && !m.HasOpt("nodev")
		rdonly := !writable[m.ID] && !m.HasOpt("ro")
		if !nodev && !rdonly {
			continue
		}
		fd, err := openReached(m.Point, m.ID, false)
		if err != nil || fd < 0 {
			continue // as noDevices: what root cannot look at (a FUSE mount whose server is gone), it cannot remount
		}
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT)
		for opt, f := range mountFlags {
			if m.HasOpt(opt) {
				flags |= f
			}
		}
		if nodev {
			flags |= unix.MS_NODEV
		}
		if rdonly {
			flags |= unix.MS_RDONLY
		}
		// By the descriptor that reached it, as noDevices clears.
		err = unix.Mount("", "/proc/self/fd/"+strconv.Itoa(fd), "", flags, "")
		unix.Close(fd)
		if err != nil {
			return &os.SyscallError{Syscall: "mount(" + m.Point + ", MS_REMOUNT|MS_BIND|MS_NODEV|MS_RDONLY)", Err: err}
		}
	}
	return nil
}

// mountFlags are the per-mount options a bind remount must repeat, or
// lose.
var mountFlags = map[string]uintptr{"ro": unix.MS_RDONLY, "nosuid": unix.MS_NOSUID, "noexec": unix.MS_NOEXEC,
	"noatime": unix.MS_NOATIME, "nodiratime": unix.MS_NODIRATIME, "relatime": unix.MS_RELATIME,
	"nosymfollow": unix.MS_NOSYMFOLLOW}

// mount is one mount of the init's mount namespace.
type mount = mountinfo.Mount

// readMounts is the mounts of the calling thread's mount namespace.
func readMounts() ([]mount, error) { return mountinfo.Read("/proc/thread-self/mountinfo") }

// shown is a spot to take away: a mount (spot is its point), or a part of
// one that shows a socket directory's content (cover).
type shown struct {
	m     mount
	spot  string
	cover bool
	what  string // what it shows, for an error
}

// reachable says whether the spot's path leads into its mount (reaches).
func (sh shown) reachable() (bool, error) { return reaches(sh.spot, sh.m.ID, sh.cover) }

// reaches says whether path leads into mount id, not into one stacked on
// it there or above it, by its mount id (device numbers will not do:
// btrfs gives each subvolume its own); with dir, only to a directory. A
// path that is gone, or is a link, does not; one that cannot be looked at
// refuses the launch.
func reaches(path string, id uint64, dir bool) (bool, error) {
	fd, err := openReached(path, id, dir)
	if fd >= 0 {
		unix.Close(fd)
	}
	return fd >= 0, err
}

// openReached is reaches with the descriptor (O_PATH) that reached the
// mount, -1 where path does not.
func openReached(path string, id uint64, dir bool) (int, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return -1, nil
	}
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	reached := false
	defer func() {
		if !reached {
			unix.Close(fd)
		}
	}()
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_TYPE|unix.STATX_MNT_ID, &st); err != nil {
		return -1, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK || dir && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return -1, nil // a link leads elsewhere; a spot to cover holds no directory here
	}
	got := st.Mnt_id
	if st.Mask&unix.STATX_MNT_ID == 0 { // before Linux 5.8
		if got, err = fdMountID(fd); err != nil {
			return -1, &os.PathError{Op: "mount id", Path: path, Err: err}
		}
	}
	if reached = got == id; !reached {
		return -1, nil
	}
	return fd, nil
}

// fdMountID is the mount id of what fd is open on, from its fdinfo.
func fdMountID(fd int) (uint64, error) {
	raw, err := os.ReadFile("/proc/thread-self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "mnt_id:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("no mnt_id in fdinfo")
}

func (sh shown) hide() error {
	if sh.cover {
		return hideDir(sh.spot, nil, nil, nil)
	}
	if err := unix.Unmount(sh.spot, unix.MNT_DETACH); err != nil {
		return &os.SyscallError{Syscall: "umount2(" + sh.spot + ", MNT_DETACH)", Err: err}
	}
	return nil
}

// exposing is what hideHostViews takes away, outermost first. Of the
// tmp directories (privateTmp), only a mount showing one whole is: a
// directory bound from one elsewhere is the operator's, not its sockets.
// One in a tmp directory is left to privateTmp's tmpfs, unless it lies in
// a path kept there (mounted back with all below it).
func exposing(mounts []mount, socketDirs, tmp, named, kept []string) []shown {
	hidden := slices.Concat(hiddenParts(mounts, socketDirs, false), hiddenParts(mounts, tmp, true))
	// A mount below a socket directory is hidden with it, unless it lies
	// in a path the sandbox names there, which hideHostServices binds
	// back whole (privateTmp: a path kept).
	shownAgain := func(point string, h hiddenPart) bool {
		back := named
		if h.whole {
			back = kept
		}
		// Kept whole, with what is mounted on or below it, and for
		// privateTmp inside what is mounted above it: a mount of the
		// root in /tmp holds the host's /tmp at a path kept below it.
		return slices.ContainsFunc(back, func(p string) bool {
			return below(p, h.dir) && (within(point, p) || h.whole && within(p, point))
		})
	}
	var found []shown
	for _, m := range mounts {
		if slices.ContainsFunc(ownTrees, func(t string) bool { return within(m.Point, t) }) {
			continue
		}
		if own, view := kernelViews[m.FSType]; view && !within(m.Point, own) {
			found = append(found, shown{m: m, spot: m.Point, what: m.FSType})
			continue
		}
		for _, h := range hidden {
			if m.Dev != h.dev || m.ID == h.src || within(m.Point, h.dir) && !shownAgain(m.Point, h) {
				continue // another filesystem, the part's own mount, or hidden with the directory
			}
			ownTmp := func(spot string) bool {
				return h.whole && slices.ContainsFunc(tmp, func(d string) bool { return within(spot, d) }) &&
					!slices.ContainsFunc(kept, func(k string) bool { return within(spot, k) || within(k, spot) })
			}
			switch {
			case within(m.Root, h.path) && (!h.whole || m.Root == h.path):
				if !ownTmp(m.Point) {
					found = append(found, shown{m: m, spot: m.Point, what: "sockets in " + h.dir})
				}
			case within(h.path, m.Root):
				rel, _ := filepath.Rel(m.Root, h.path)
				if spot := filepath.Join(m.Point, rel); spot != h.dir && !ownTmp(spot) {
					found = append(found, shown{m: m, spot: spot, cover: true, what: "sockets in " + h.dir})
				}
			}
		}
	}
	slices.SortStableFunc(found, func(a, b shown) int {
		return cmp.Compare(strings.Count(a.spot, "/"), strings.Count(b.spot, "/"))
	})
	// One spot may show several directories (/tmp, and /var/tmp bound
	// from it): taken away once.
	return slices.CompactFunc(found, func(a, b shown) bool { return a.spot == b.spot && a.cover == b.cover })
}

// hiddenPart is what of a filesystem a socket directory shows.
type hiddenPart struct {
	dir  string // the socket directory
	src  uint64 // the mount it is of
	dev  string
	path string // within the filesystem
	// whole: only a mount of all of it, or of more, shows it.
	whole bool
}

// socketFS are the filesystems a mount below a socket directory is hidden
// with as a whole, where daemons' sockets are (/run/user/UID): a disk's
// filesystem mounted there (a backup tool's view of the root at
// /run/timeshift) is not its sockets.
var socketFS = []string{"tmpfs", "ramfs"}

// hiddenParts is what the socket directories hide: each one's part of the
// topmost mount it lies in, and the socketFS mounts below it; with whole,
// only the part, shown by a mount of all of it.
func hiddenParts(mounts []mount, socketDirs []string, whole bool) []hiddenPart {
	var parts []hiddenPart
	for _, d := range socketDirs {
		// The longest mount point above it, the last of equals (a later
		// mount is stacked on top).
		var in *mount
		for i, m := range mounts {
			if within(d, m.Point) && (in == nil || len(m.Point) >= len(in.Point)) {
				in = &mounts[i]
			}
		}
		if in != nil {
			rel, _ := filepath.Rel(in.Point, d)
			parts = append(parts, hiddenPart{d, in.ID, in.Dev, filepath.Join(in.Root, rel), whole})
		}
		if whole {
			continue
		}
		for _, m := range mounts {
			if below(m.Point, d) && slices.Contains(socketFS, m.FSType) {
				parts = append(parts, hiddenPart{d, m.ID, m.Dev, m.Root, false})
			}
		}
	}
	return parts
}
