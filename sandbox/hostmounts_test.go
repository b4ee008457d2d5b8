package sandbox

import (
	"slices"
	"testing"
)

// Taken away: the host's views outside their places, and other mounts of
// what the socket directories hide; left: the sandbox's own /proc and /dev
// trees (whatever the host mounted in them: a container masks /proc/kcore
// with its /dev/null), the views at their places, and other filesystems.
func TestExposing(t *testing.T) {
	mountinfo := `22 1 0:21 / /proc rw,nosuid - proc proc rw
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
`
	mounts, err := parseMounts([]byte(mountinfo))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range exposing(mounts, []string{"/run", "/var/lib/sss/pipes"}) {
		got = append(got, m.point)
	}
	want := []string{"/srv/chroot/home/u/rt", "/srv/chroot/sys/fs/cgroup", "/srv/chroot/var/lib", "/srv/my chroot/proc", "/srv/chroot/run", "/srv/mq"}
	if !slices.Equal(got, want) {
		t.Fatalf("exposing = %q; want %q (deepest first)", got, want)
	}
	// Off the host network only: on it, the host's sockets are the
	// sandbox's.
	got = got[:0]
	for _, m := range exposing(mounts, nil) {
		got = append(got, m.point)
	}
	if want := []string{"/srv/chroot/sys/fs/cgroup", "/srv/my chroot/proc", "/srv/mq"}; !slices.Equal(got, want) {
		t.Fatalf("exposing, no socket directories = %q; want %q", got, want)
	}
}

// A line that cannot be read fails the whole: a mount left unread could be
// one to take away.
func TestParseMountsFailsClosed(t *testing.T) {
	for _, bad := range []string{"", "22 1 0:21 / /proc rw\n", "x 1 0:21 / /proc rw - proc proc rw\n"} {
		if _, err := parseMounts([]byte(bad)); err == nil {
			t.Errorf("parseMounts(%q) = nil error; want one", bad)
		}
	}
}
