package sandbox

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// kernelViews are the filesystems that show the host's terminals, devices
// or processes wherever they are mounted, each with the one place the
// sandbox has its own of it: a terminal's devpts, a devtmpfs of every
// device, the host's procfs (other processes' command lines and
// environments, to a sandbox with their uid).
var kernelViews = map[string]string{"devpts": "/dev", "devtmpfs": "/dev", "proc": "/proc"}

// maxHostViews bounds hideHostViews' rounds: each takes one mount away.
const maxHostViews = 256

// hideHostViews takes away, in the sandbox's mount namespace, every mount of
// kernelViews outside its own place: a chroot's /dev/pts, a bind of /proc
// under /srv. Under a path the sandbox is given they would show, through
// the rules that let it read there, what its own /dev and /proc leave out
// (ownPTYs, privateDev, mountProc). Deepest first, one at a time, reading
// the mounts again after each: a mount stacked on one of them is taken away
// first (it is what the path reaches), and a mount of them detached with
// its parent is gone. Any that cannot be taken away refuses the launch.
func hideHostViews(*Config) error {
	for range maxHostViews {
		raw, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		found := hostViews(raw)
		if len(found) == 0 {
			return nil
		}
		mp := found[0]
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
			return &os.SyscallError{Syscall: "umount2(" + mp + ", MNT_DETACH)", Err: err}
		}
	}
	return fmt.Errorf("more than %d mounts of the host's devices and processes to take away", maxHostViews)
}

// hostViews is the mount points of kernelViews outside their own places in
// mountinfo (proc(5)), deepest first.
func hostViews(mountinfo []byte) []string {
	var found []string
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		sep := slices.IndexFunc(f, func(b []byte) bool { return string(b) == "-" })
		if len(f) < 5 || sep < 0 || sep+1 >= len(f) {
			continue
		}
		own, ok := kernelViews[string(f[sep+1])]
		mp := unescapeMount(f[4])
		if ok && !within(mp, own) {
			found = append(found, mp)
		}
	}
	slices.SortStableFunc(found, func(a, b string) int { return cmp.Compare(strings.Count(b, "/"), strings.Count(a, "/")) })
	return found
}

// unescapeMount undoes mountinfo's escapes of a path: space, tab, newline
// and backslash as three octal digits.
func unescapeMount(b []byte) string {
	var out []byte
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+3 < len(b) {
			if n, err := strconv.ParseUint(string(b[i+1:i+4]), 8, 8); err == nil {
				out = append(out, byte(n))
				i += 3
				continue
			}
		}
		out = append(out, b[i])
	}
	return string(out)
}
