package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"golang.org/x/sys/unix"
)

// Taken away: the host's views outside their places, and what the socket
// directories hide where another mount shows it again (a mount of nothing
// else, or the spot in one that holds it); left: the sandbox's own /proc
// and /dev trees (whatever the host mounted in them: a container masks
// /proc/kcore with its /dev/null), the views at their places, device
// filesystems (nodev does for them), hugetlbfs, and a disk's filesystem
// mounted below a socket directory (a backup tool's view of the root),
// whose other mounts are not sockets.
func TestExposing(t *testing.T) {
	info := `22 1 0:21 / /proc rw,nosuid - proc proc rw
23 1 0:5 / /dev rw,nosuid - devtmpfs udev rw
24 23 0:22 / /dev/pts rw - devpts devpts rw
25 1 8:1 / / rw - ext4 /dev/sda1 rw
26 25 0:22 / /srv/chroot/dev/pts rw - devpts devpts rw
28 25 0:21 / /srv/my\040chroot/proc rw - proc proc rw
29 22 0:30 / /proc/sys/fs/binfmt_misc rw - binfmt_misc binfmt_misc rw
30 22 0:5 /null /proc/kcore ro - devtmpfs udev rw
31 1 0:25 / /run rw shared:5 - tmpfs tmpfs rw
32 31 0:26 / /run/user/1000 rw shared:6 - tmpfs tmpfs rw
33 25 0:25 / /srv/chroot/run rw - tmpfs tmpfs rw
34 25 0:26 / /srv/chroot/home/u/rt rw - tmpfs tmpfs rw
35 25 8:1 /var/lib /srv/chroot/var/lib rw - ext4 /dev/sda1 rw
36 25 8:1 /home /srv/chroot/home rw - ext4 /dev/sda1 rw
37 25 0:27 / /sys rw - sysfs sysfs rw
38 37 0:28 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw
39 25 0:28 /user.slice /srv/chroot/sys/fs/cgroup rw - cgroup2 cgroup2 rw
40 25 0:29 / /srv/mq rw - mqueue mqueue rw
41 25 0:31 / /mnt/huge rw - hugetlbfs hugetlbfs rw
42 31 0:40 / /run/timeshift/backup rw - btrfs /dev/sdb1 rw
43 25 0:40 /@home /data rw - btrfs /dev/sdb1 rw
44 25 0:45 / /tmp rw - tmpfs tmpfs rw
45 25 0:45 / /var/tmp rw - tmpfs tmpfs rw
`
	mounts, err := mountinfo.Parse([]byte(info))
	if err != nil {
		t.Fatal(err)
	}
	var tmp, started []string // the tmp directories, as privateTmp has them; where the sandbox starts
	spots := func(socketDirs []string, named ...string) (got []string) {
		for _, sh := range exposing(mounts, socketDirs, tmp, named, append(started, named...)) {
			got = append(got, sh.spot)
		}
		return got
	}
	got := spots([]string{"/run", "/var/lib/sss/pipes", "/tmp/.X11-unix"})
	want := []string{"/srv/mq", "/srv/my chroot/proc", "/srv/chroot/run", "/var/tmp/.X11-unix",
		"/srv/chroot/home/u/rt", "/srv/chroot/sys/fs/cgroup", "/srv/chroot/var/lib/sss/pipes"}
	if !slices.Equal(got, want) {
		t.Fatalf("exposing = %q; want %q (outermost first)", got, want)
	}
	// Off the host network only: on it, the host's sockets are the
	// sandbox's.
	if got, want := spots(nil), []string{"/srv/mq", "/srv/my chroot/proc", "/srv/chroot/sys/fs/cgroup"}; !slices.Equal(got, want) {
		t.Fatalf("exposing, no socket directories = %q; want %q", got, want)
	}
	// A path named below a socket directory is bound back whole: a mount
	// in it that shows the directory's sockets again goes first; the
	// part's own mounts stay.
	again := `1 0 8:1 / / rw - ext4 /dev/sda1 rw
2 1 0:25 / /run rw - tmpfs tmpfs rw
3 2 0:26 / /run/app rw - tmpfs tmpfs rw
4 3 0:25 / /run/app/all rw - tmpfs tmpfs rw
`
	if mounts, err = mountinfo.Parse([]byte(again)); err != nil {
		t.Fatal(err)
	}
	if got, want := spots([]string{"/run"}, "/run/app"), []string{"/run/app/all"}; !slices.Equal(got, want) {
		t.Fatalf("exposing, /run/app named = %q; want %q", got, want)
	}
	if got := spots([]string{"/run"}); len(got) != 0 {
		t.Fatalf("exposing, nothing named = %q; want none (all hidden with /run)", got)
	}
	// A filesystem's top mounted as the root (btrfs) shows a socket
	// directory of a subvolume mounted elsewhere at another path.
	btrfs := `1 0 0:50 / / rw - btrfs /dev/sda2 rw
2 1 0:50 /@var /var rw - btrfs /dev/sda2 rw
`
	if mounts, err = mountinfo.Parse([]byte(btrfs)); err != nil {
		t.Fatal(err)
	}
	if got, want := spots([]string{"/var/lib/sss/pipes"}), []string{"/@var/lib/sss/pipes"}; !slices.Equal(got, want) {
		t.Fatalf("exposing, btrfs = %q; want %q", got, want)
	}
	// The tmp directories, on any network: a mount that shows one whole
	// elsewhere (the root bound at /host, once for /tmp and once for the
	// /var/tmp bound from it) has the spot covered; a directory bound
	// from one (an operator's work tree), and one bound on the other,
	// are left: the sandbox has its own of both.
	tmpViews := `1 0 8:1 / / rw - ext4 /dev/sda1 rw
2 1 8:1 / /host rw - ext4 /dev/sda1 rw
3 1 8:1 /tmp/work /srv/work rw - ext4 /dev/sda1 rw
4 1 8:1 /tmp /var/tmp rw - ext4 /dev/sda1 rw
5 1 0:45 / /mnt/t rw - tmpfs tmpfs rw
`
	if mounts, err = mountinfo.Parse([]byte(tmpViews)); err != nil {
		t.Fatal(err)
	}
	tmp = []string{"/tmp", "/var/tmp"}
	if got, want := spots(nil), []string{"/host/tmp"}; !slices.Equal(got, want) {
		t.Fatalf("exposing, tmp directories = %q; want %q", got, want)
	}
	// A chroot in /tmp, kept (named, or where the sandbox starts), is
	// mounted back with what is mounted in it: its view of the root, and
	// its bind of /tmp, go first.
	chroot := `1 0 8:1 / / rw - ext4 /dev/sda1 rw
2 1 8:1 / /tmp/chroot/host rw - ext4 /dev/sda1 rw
3 1 8:1 /tmp /tmp/chroot/tmp rw - ext4 /dev/sda1 rw
`
	if mounts, err = mountinfo.Parse([]byte(chroot)); err != nil {
		t.Fatal(err)
	}
	if got := spots(nil); len(got) != 0 {
		t.Fatalf("exposing, a chroot in /tmp not kept = %q; want none (under the sandbox's /tmp)", got)
	}
	if got, want := spots(nil, "/tmp/chroot"), []string{"/tmp/chroot/tmp", "/tmp/chroot/host/tmp", "/tmp/chroot/host/var/tmp"}; !slices.Equal(got, want) {
		t.Fatalf("exposing, a chroot in /tmp kept = %q; want %q", got, want)
	}
	started = []string{"/tmp/chroot"}
	if got, want := spots(nil), []string{"/tmp/chroot/tmp", "/tmp/chroot/host/tmp", "/tmp/chroot/host/var/tmp"}; !slices.Equal(got, want) {
		t.Fatalf("exposing, a chroot in /tmp started in = %q; want %q", got, want)
	}
	// Kept inside such a mount: the path is the host's /tmp (or
	// /var/tmp) itself, whatever is mounted below it.
	for kept, spot := range map[string]string{
		"/tmp/chroot/host/tmp": "/tmp/chroot/host/tmp", "/tmp/chroot/host/var/tmp": "/tmp/chroot/host/var/tmp",
		"/tmp/chroot/host/tmp/x": "/tmp/chroot/host/tmp", "/tmp/chroot/tmp/x": "/tmp/chroot/tmp",
	} {
		started = []string{kept}
		if got, want := spots(nil), []string{spot}; !slices.Equal(got, want) {
			t.Fatalf("exposing, started in %s = %q; want %q", kept, got, want)
		}
	}
	started = nil
	// /tmp a tmpfs of its own, and /var/tmp another mount of it.
	tmpfs := `1 0 8:1 / / rw - ext4 /dev/sda1 rw
2 1 0:45 / /tmp rw - tmpfs tmpfs rw
3 1 0:45 / /var/tmp rw - tmpfs tmpfs rw
4 1 0:45 /x /srv/x rw - tmpfs tmpfs rw
5 1 0:45 / /srv/all rw - tmpfs tmpfs rw
`
	if mounts, err = mountinfo.Parse([]byte(tmpfs)); err != nil {
		t.Fatal(err)
	}
	if got, want := spots(nil), []string{"/srv/all"}; !slices.Equal(got, want) {
		t.Fatalf("exposing, tmpfs /tmp = %q; want %q", got, want)
	}
}

// On a kernel without mount_setattr, every mount is remounted nodev with
// the flags it had: a device node there no longer opens; and read-only
// unless the sandbox is given to write there.
func TestRemountNoDev(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	inMountNamespace(t, func() error {
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", other, "tmpfs", 0, ""); err != nil {
			return err
		}
		null := filepath.Join(dir, "null")
		if err := unix.Mknod(null, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			return err
		}
		f, err := os.OpenFile(null, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("the device before: %w", err)
		}
		f.Close()
		mounts, err := readMounts()
		if err != nil {
			return err
		}
		if err := remountNoDev(mounts, writableMounts(mounts, []string{dir}, nil)); err != nil {
			return err
		}
		if f, err := os.OpenFile(null, os.O_WRONLY, 0); err == nil {
			f.Close()
			return errors.New("the device opened after remountNoDev")
		}
		if mounts, err = readMounts(); err != nil {
			return err
		}
		for _, m := range mounts {
			if m.Point == dir && (!(m.HasOpt("nodev") && m.HasOpt("nosuid") && m.HasOpt("noexec")) || m.HasOpt("ro")) {
				return fmt.Errorf("%s remounted %s; want nodev and its own nosuid,noexec, writable", dir, m.Opts)
			}
			if m.Point == other && !(m.HasOpt("nodev") && m.HasOpt("ro")) {
				return fmt.Errorf("%s, not given to write, remounted %s; want nodev,ro", other, m.Opts)
			}
		}
		return nil
	})
}

// inMountNamespace runs f on a thread in a private mount namespace of its
// own, which ends with it.
func inMountNamespace(t *testing.T, f func() error) {
	t.Helper()
	testutil.RequireRoot(t, "mount namespaces")
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return err
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return err
			}
			return f()
		}()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// A kept path inside another kept one is left to the other's bind: its
// mount point, made there, was the host's own file, and was emptied.
func TestHideDirLeavesTheHostsFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "app", "state")
	if err := os.Mkdir(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	inMountNamespace(t, func() error {
		return hideDir(dir, nil, []string{filepath.Dir(file), file}, nil)
	})
	if got, err := os.ReadFile(file); err != nil || string(got) != "kept" {
		t.Fatalf("the host's %s after hideDir: %q, %v; want it as it was", file, got, err)
	}
}

// A path to mount back whose way changed after its links were resolved (a
// user who owns the directory above it swapped a link in, or in and back
// while the links on the way were read) is refused, and nothing is
// mounted: the bind, or the link made again on the tmpfs, would lead to
// what the link names on the host, past the checks made on the resolved
// path.
func TestCoverDirRefusesALinkSwappedIn(t *testing.T) {
	for _, back := range []bool{false, true} {
		t.Run(fmt.Sprintf("and back %v", back), func(t *testing.T) { coverDirRefusesTheSwap(t, back) })
	}
	// Two links, the one read below the other: a directory when the
	// deeper was resolved, a link when read itself. Made again, the
	// deeper would be made on the host, where the other points.
	dir, elsewhere := t.TempDir(), t.TempDir()
	inMountNamespace(t, func() error {
		err := coverDir(dir, true, nil, nil, map[string]string{filepath.Join(dir, "a"): elsewhere, filepath.Join(dir, "a", "l"): "/"})
		if err == nil || !strings.Contains(err.Error(), "link") {
			return fmt.Errorf("coverDir with a link below a link: %v; want it refused", err)
		}
		return nil
	})
	if entries, err := os.ReadDir(elsewhere); err != nil || len(entries) > 0 {
		t.Errorf("the outer link's target after coverDir: %v, %v; want it as it was", entries, err)
	}
}

func coverDirRefusesTheSwap(t *testing.T, back bool) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	for _, d := range []string{filepath.Join(dir, "a", "b"), filepath.Join(elsewhere, "b")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	kept := filepath.Join(dir, "a", "b") // resolved: no link on its way
	links := map[string]string{}
	if back {
		// Read as a link by under, a directory again since.
		links[filepath.Join(dir, "a")] = elsewhere
	} else {
		if err := os.RemoveAll(filepath.Join(dir, "a")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(elsewhere, filepath.Join(dir, "a")); err != nil {
			t.Fatal(err)
		}
	}
	inMountNamespace(t, func() error {
		err := coverDir(dir, true, nil, []string{kept}, links)
		if err == nil || errors.Is(err, errUnkept) || !strings.Contains(err.Error(), "link") {
			return fmt.Errorf("coverDir with %s's way changed (and back: %v): %v; want it refused for the link", kept, back, err)
		}
		mounts, err := readMounts()
		if err != nil {
			return err
		}
		for _, m := range mounts {
			if within(m.Point, dir) || within(m.Point, elsewhere) {
				return fmt.Errorf("%s mounted on %s; want nothing mounted", m.FSType, m.Point)
			}
		}
		return nil
	})
	if entries, err := os.ReadDir(filepath.Join(elsewhere, "b")); err != nil || len(entries) > 0 {
		t.Errorf("the link's target after coverDir: %v, %v; want it as it was", entries, err)
	}
}

// /dev's links among the paths it keeps are made again, and what they
// lead to kept: /dev/ptmx is a link to pts/ptmx in some containers.
func TestPrivateDevMakesItsLinksAgain(t *testing.T) {
	inMountNamespace(t, func() error {
		null, err := os.OpenFile("/dev/null", unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer null.Close()
		if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID, "mode=0755"); err != nil {
			return err
		}
		if err := os.Mkdir("/dev/pts", 0o755); err != nil {
			return err
		}
		if err := os.Symlink("pts/ptmx", "/dev/ptmx"); err != nil {
			return err
		}
		if err := mountBack(null, "/dev/null"); err != nil {
			return err
		}
		if err := privateDev(&Config{}); err != nil {
			return err
		}
		if target, err := os.Readlink("/dev/ptmx"); err != nil || target != "pts/ptmx" {
			return fmt.Errorf("/dev/ptmx in the sandbox's /dev: %q, %v; want the link to pts/ptmx", target, err)
		}
		if st, err := os.Stat("/dev/null"); err != nil || st.Mode()&os.ModeCharDevice == 0 {
			return fmt.Errorf("/dev/null in the sandbox's /dev: %v, %v; want the device", st, err)
		}
		if st, err := os.Stat("/dev/pts"); err != nil || !st.IsDir() {
			return fmt.Errorf("/dev/pts in the sandbox's /dev: %v, %v; want the directory", st, err)
		}
		return nil
	})
}

// Without statx's mount id, fdinfo gives the same.
func TestFDMountID(t *testing.T) {
	fd, err := unix.Open("/proc", unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &st); err != nil || st.Mask&unix.STATX_MNT_ID == 0 {
		t.Fatalf("statx: %v, mask %#x", err, st.Mask)
	}
	if id, err := fdMountID(fd); err != nil || id != st.Mnt_id {
		t.Fatalf("fdMountID = %d, %v; want %d", id, err, st.Mnt_id)
	}
}

// The sandbox's own /tmp is noexec where the host's is, and executable
// where the host's is.
func TestPrivateTmpKeepsNoexec(t *testing.T) {
	for _, noexec := range []bool{true, false} {
		dir := t.TempDir()
		inMountNamespace(t, func() error {
			flags := uintptr(unix.MS_NOSUID)
			if noexec {
				flags |= unix.MS_NOEXEC
			}
			if err := unix.Mount("tmpfs", dir, "tmpfs", flags, ""); err != nil {
				return err
			}
			if err := coverDir(dir, true, nil, nil, nil); err != nil {
				return err
			}
			mounts, err := readMounts()
			if err != nil {
				return err
			}
			var top mount
			for _, m := range mounts {
				if m.Point == dir {
					top = m // the last at the point is on top
				}
			}
			if top.HasOpt("noexec") != noexec || top.HasOpt("ro") || top.FSType != "tmpfs" {
				return fmt.Errorf("host's /tmp noexec %v: the sandbox's is %s %s", noexec, top.FSType, top.Opts)
			}
			return nil
		})
	}
}

// A device named both as one of every sandbox's and in Config.RW (as
// Defaults does) is mounted back once.
func TestPrivateDevMountsEachDeviceOnce(t *testing.T) {
	inMountNamespace(t, func() error {
		if err := privateDev(&Config{RW: []string{"/dev/null", "/dev/zero", "/dev/null"}}); err != nil {
			return err
		}
		mounts, err := mountinfo.Read("/proc/thread-self/mountinfo")
		if err != nil {
			return err
		}
		for _, dev := range []string{"/dev/null", "/dev/zero", "/dev/tty"} {
			n := 0
			for _, m := range mounts {
				if m.Point == dev {
					n++
				}
			}
			if n != 1 {
				return fmt.Errorf("%s is mounted %d times in the sandbox's /dev; want once", dev, n)
			}
		}
		return nil
	})
}
