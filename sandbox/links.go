package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/trusted"
	"golang.org/x/sys/unix"
)

// plantedLinks refuses a path the sandbox is given (RO, RW, Exec) that
// leads through a link its uid could have made or replaced: in a directory
// that uid may write, a sandbox (this one's last run, a pod's service
// before its restart, another of the same uid) would point it anywhere,
// and Landlock, which follows it, would give the sandbox what it names (/,
// a person's home whole). Each link met resolving the path is looked at,
// as the kernel meets them (through other links' targets, a ".." after
// one); a path that cannot be resolved is left to Landlock's open, which
// refuses it.
func plantedLinks(c *Config) error {
	for _, p := range slices.Concat(c.RO, c.RW, c.Exec) {
		var planted error
		trusted.WalkLinks(p, func(link string, fi fs.FileInfo, dir string) error {
			if !replaceableBy(dir, fi, c.UID, c.GID) {
				return nil
			}
			to, _ := filepath.EvalSymlinks(p)
			planted = fmt.Errorf("path %s leads through the link %s, in a directory uid %d may write: a link a sandbox made there would give this one what it names; name the path it leads to (%s)", p, link, c.UID, to)
			return planted
		})
		if planted != nil {
			return planted
		}
	}
	return nil
}

// replaceableBy says whether uid (of group gid) may replace link in dir:
// dir is its own (whose mode it may change), has an access ACL, or its
// mode lets it write there, and, sticky, the link or dir is its own.
func replaceableBy(dir string, link os.FileInfo, uid, gid int) bool {
	fi, err := os.Stat(dir)
	if err != nil {
		return true // unknown: not taken on trust
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	lst, lok := link.Sys().(*syscall.Stat_t)
	if !ok || !lok {
		return true
	}
	if int(st.Uid) == uid {
		return true
	}
	if _, err := unix.Getxattr(dir, "system.posix_acl_access", nil); !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EOPNOTSUPP) {
		return true // an ACL may let it write there
	}
	perm := fi.Mode().Perm()
	writable := int(st.Gid) == gid && perm&0o020 != 0 || perm&0o002 != 0
	if !writable || fi.Mode()&os.ModeSticky == 0 {
		return writable
	}
	return int(lst.Uid) == uid
}
