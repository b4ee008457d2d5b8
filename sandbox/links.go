package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

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
// path where this found it (Config.found), never by resolving it again,
// which a link swapped in meanwhile would lead elsewhere. A path that
// cannot be resolved is left to Landlock's open, which refuses it.
func resolveGiven(c *Config) error {
	c.found = map[string]namedPath{}
	for _, p := range slices.Concat(c.RO, c.RW, c.Exec, []string{c.Dir}) {
		if p == "" {
			continue
		}
		n := namedPath{path: filepath.Clean(p)}
		fd, err := openGiven(p, c.UID, c.GID)
		var pe *os.PathError
		if errors.As(err, &pe) {
			n.refused = errors.Is(err, unix.EACCES) // else missing
			c.found[n.path] = n
			continue
		}
		if err != nil {
			return err
		}
		n.real, err = os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		unix.Close(fd)
		if err != nil {
			return err
		}
		c.found[n.path] = n
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
// time through the descriptor of the directory it is in (trusted.Walk),
// and refuses it when a link on its way is one uid (of group gid) could
// have made or replaced (resolveGiven): unlike a walk by path and then an
// open, no link swapped in between the two is followed. For Landlock's
// rules, whose paths a sandbox of the same uid running meanwhile could
// change.
func openGiven(p string, uid, gid int) (int, error) {
	return trusted.Walk(p, func(l trusted.Link) error {
		if replaceable(l.Dir.Uid, l.Dir.Gid, l.Dir.Mode, l.Stat.Uid, hasACL("/proc/self/fd/"+strconv.Itoa(l.DirFD)), uid, gid) {
			return plantedLink(p, l.Path, uid)
		}
		return nil
	})
}
