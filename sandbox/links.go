package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/trusted"
	"golang.org/x/sys/unix"
)

// resolveGiven resolves each path the sandbox names (RO, RW, Exec, and
// the working directory) once, as the kernel does, a component at a time
// (openGiven), and refuses one that leads through a link its uid could
// have made or replaced: in a directory that uid may write, a sandbox
// (this one's last run, a pod's service before its restart, another of
// the same uid, running meanwhile) would point it anywhere, and Landlock,
// which follows it, would give the sandbox what it names (/, a person's
// home whole); a working directory under one the sandbox gets a private
// or empty one of (/tmp, a hidden home) is mounted back, and pointed at
// the host's /tmp/tmux-UID it would mount the sockets of programs that
// run what they are sent outside any sandbox. Every later step finds a
// path where this found it (Config.real), never by resolving it again,
// which a link swapped in meanwhile would lead elsewhere. A path that
// cannot be resolved is left to Landlock's open, which refuses it.
func resolveGiven(c *Config) error {
	c.real = map[string]string{}
	for _, p := range slices.Concat(c.RO, c.RW, c.Exec, []string{c.Dir}) {
		if p == "" {
			continue
		}
		fd, err := openGiven(p, c.UID, c.GID)
		var pe *os.PathError
		if errors.As(err, &pe) {
			c.real[filepath.Clean(p)] = "" // missing, or not root's to open
			continue
		}
		if err != nil {
			return err
		}
		real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		unix.Close(fd)
		if err != nil {
			return err
		}
		c.real[filepath.Clean(p)] = real
	}
	return nil
}

// plantedLink is the refusal of path p, which leads through link in a
// directory uid may write.
func plantedLink(p, link string, uid int) error {
	return fmt.Errorf("path %s leads through the link %s, in a directory uid %d may write: a link a sandbox made there would give this one what it names; name the path it leads to", p, link, uid)
}

// replaceable says whether uid (of group gid) may replace a link owned by
// linkUID in a directory of dirUID, dirGID and mode: the directory is its
// own (whose mode it may change), has an access ACL, or its mode lets it
// write there, and, sticky, the link is its own.
func replaceable(dirUID, dirGID, mode, linkUID uint32, acl bool, uid, gid int) bool {
	if int(dirUID) == uid || acl {
		return true
	}
	writable := int(dirGID) == gid && mode&0o020 != 0 || mode&0o002 != 0
	if !writable || mode&unix.S_ISVTX == 0 {
		return writable
	}
	return int(linkUID) == uid
}

// hasACL says whether dir may have an access ACL: one that may let another
// user write there whatever the mode says.
func hasACL(dir string) bool {
	_, err := unix.Getxattr(dir, "system.posix_acl_access", nil)
	return !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EOPNOTSUPP)
}

// openGiven opens p (O_PATH) as the kernel resolves it, a component at a
// time through the descriptor of the directory it is in, and refuses it
// when a link on its way is one uid (of group gid) could have made or
// replaced (plantedLinks): unlike a walk by path and then an open, no link
// swapped in between the two is followed. For Landlock's rules, whose
// paths a sandbox of the same uid running meanwhile could change.
func openGiven(p string, uid, gid int) (int, error) {
	start := "/"
	if !filepath.IsAbs(p) {
		start = "."
	}
	cur, err := unix.Open(start, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: start, Err: err}
	}
	at := start // where cur is, for messages
	rest := strings.Split(p, "/")
	for hops := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		fd, err := unix.Openat(cur, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			unix.Close(cur)
			return -1, &os.PathError{Op: "open", Path: p, Err: err}
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
			// Not a link (one root may not look at is the root of a
			// mount that refuses root: never a link).
			unix.Close(cur)
			cur, at = fd, filepath.Join(at, name)
			continue
		}
		unix.Close(fd)
		link := filepath.Join(at, name)
		var dst unix.Stat_t
		if err := unix.Fstat(cur, &dst); err != nil || replaceable(dst.Uid, dst.Gid, dst.Mode, st.Uid, hasACL("/proc/self/fd/"+strconv.Itoa(cur)), uid, gid) {
			unix.Close(cur)
			return -1, plantedLink(p, link, uid)
		}
		if hops++; hops > trusted.MaxLinks {
			unix.Close(cur)
			return -1, &os.PathError{Op: "open", Path: p, Err: unix.ELOOP}
		}
		target, err := readlinkat(cur, name)
		if err != nil {
			unix.Close(cur)
			return -1, &os.PathError{Op: "readlink", Path: link, Err: err}
		}
		if filepath.IsAbs(target) {
			unix.Close(cur)
			if cur, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
				return -1, &os.PathError{Op: "open", Path: "/", Err: err}
			}
			at = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return cur, nil
}

// readlinkat is the target of the link name in the directory open as dir.
func readlinkat(dir int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dir, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}
