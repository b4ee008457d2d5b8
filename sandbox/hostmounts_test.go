package sandbox

import (
	"slices"
	"testing"
)

func TestHostViews(t *testing.T) {
	mountinfo := `22 1 0:21 / /proc rw,nosuid - proc proc rw
23 1 0:5 / /dev rw,nosuid - devtmpfs udev rw
24 23 0:22 / /dev/pts rw - devpts devpts rw
25 1 8:1 / / rw - ext4 /dev/sda1 rw
26 25 0:22 / /srv/chroot/dev/pts rw - devpts devpts rw
27 25 0:5 / /srv/chroot/dev rw - devtmpfs udev rw
28 25 0:21 / /srv/my\040chroot/proc rw - proc proc rw
29 22 0:30 / /proc/sys/fs/binfmt_misc rw - binfmt_misc binfmt_misc rw
30 25 0:31 / /srv/proc-like rw - tmpfs tmpfs rw
31 25 0:5 /null /srv/null rw shared:2 master:1 - devtmpfs udev rw
`
	got := hostViews([]byte(mountinfo))
	want := []string{"/srv/chroot/dev/pts", "/srv/chroot/dev", "/srv/my chroot/proc", "/srv/null"}
	if !slices.Equal(got, want) {
		t.Fatalf("hostViews = %q; want %q (deepest first, the sandbox's own places and other filesystems left)", got, want)
	}
}
