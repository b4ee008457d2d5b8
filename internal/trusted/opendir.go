package trusted

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Link is a symbolic link Walk met: where it is, its own stat, and the
// directory it is in, open (O_PATH), with its stat and whether it and
// every directory above it are ones no other user may write.
type Link struct {
	Path       string
	Stat       unix.Stat_t
	DirFD      int
	Dir        unix.Stat_t
	DirTrusted bool
}

// Walk opens p (O_PATH) as the kernel resolves it, a component at a time
// through the descriptor of the directory it is in, and follows a symbolic
// link only once follow has let it (nil): unlike a check of the path and
// then an open by it, no link swapped in between the two is followed, and
// what is open is where the checked walk led. follow's error is returned as
// it is; one of the walk's own is an *os.PathError. A relative p is taken
// from the working directory's path; nothing is cleaned: a ".." after a
// link is the parent of where the link leads, as the kernel reads it. The
// descriptor is the caller's to close.
func Walk(p string, follow func(Link) error) (int, error) {
	s, err := walk(p, follow)
	if err != nil {
		return -1, err
	}
	return s.fd, nil
}

// walk is Walk, returning the step it ended at: its trust too.
func walk(p string, follow func(Link) error) (step, error) {
	abs := p
	if !filepath.IsAbs(p) {
		wd, err := os.Getwd()
		if err != nil {
			return step{}, err
		}
		abs = wd + "/" + p
	}
	root, err := openStep(unix.AT_FDCWD, "/", "/", true)
	if err != nil {
		return step{}, err
	}
	stack := []step{root} // the directories walked through, outermost first
	defer func() {
		for _, s := range stack {
			unix.Close(s.fd)
		}
	}()
	rest, hops := strings.Split(abs, "/"), 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		top := stack[len(stack)-1]
		switch name {
		case "", ".":
			continue
		case "..":
			if len(stack) > 1 {
				unix.Close(top.fd)
				stack = stack[:len(stack)-1]
			}
			continue
		}
		s, err := openStep(top.fd, name, filepath.Join(top.path, name), top.trusted)
		if err != nil {
			return step{}, err
		}
		if s.st.Mode&unix.S_IFMT != unix.S_IFLNK {
			stack = append(stack, s)
			continue
		}
		unix.Close(s.fd)
		if err := follow(Link{Path: s.path, Stat: s.st, DirFD: top.fd, Dir: top.st, DirTrusted: top.trusted}); err != nil {
			return step{}, err
		}
		if hops++; hops > MaxLinks {
			return step{}, &os.PathError{Op: "open", Path: p, Err: syscall.ELOOP}
		}
		target, err := readlinkat(top.fd, name)
		if err != nil {
			return step{}, &os.PathError{Op: "readlink", Path: s.path, Err: err}
		}
		if filepath.IsAbs(target) {
			for _, s := range stack[1:] {
				unix.Close(s.fd)
			}
			stack = stack[:1]
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	top := stack[len(stack)-1]
	stack = stack[:len(stack)-1] // handed over, not closed
	return top, nil
}

// OpenDir opens the directory dir (O_PATH) by Walk, following a symbolic
// link only where Links would: one owned by root or this user, in a
// directory that, with every one above it, no other user may write (a
// sticky one passes). A file made by openat in it is made where the checked
// path leads, whatever link another user swaps in meanwhile. A link not
// followed is an error wrapping ErrUntrusted.
func OpenDir(dir string) (*os.File, error) {
	f, _, err := OpenDirTrust(dir)
	return f, err
}

// OpenDirTrust is OpenDir, and says whether the directory opened and every
// one the walk went through to reach it are ones no other user may write
// (a sticky one passes): what the walk knows, so that no second walk, which
// another user's rename could lead elsewhere, is needed to tell. Only then
// is what is in the directory where root or this user put it: another user
// who may write a directory above it may rename another directory into its
// place.
func OpenDirTrust(dir string) (*os.File, bool, error) {
	s, err := walk(dir, func(l Link) error {
		if err := ownerUID(l.Stat.Uid); err != nil {
			return fmt.Errorf("%s: the link %s: %w", dir, l.Path, err)
		}
		if !l.DirTrusted {
			return fmt.Errorf("%s: the link %s is in %s, which another user may write (or one above it): %w", dir, l.Path, filepath.Dir(l.Path), ErrUntrusted)
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(s.fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(s.fd)
		return nil, false, &os.PathError{Op: "open", Path: dir, Err: syscall.ENOTDIR}
	}
	return os.NewFile(uintptr(s.fd), dir), s.trusted, nil
}

// step is one component Walk went through: its descriptor, stat and path,
// and whether it and every directory above it are ones no other user may
// write.
type step struct {
	fd      int
	st      unix.Stat_t
	path    string
	trusted bool
}

// openStep opens name in the directory at (O_PATH, no link followed). One
// whose stat root is refused (the root of a FUSE mount without
// allow_other) is no link: a link's own stat is never refused.
func openStep(at int, name, where string, parentTrusted bool) (step, error) {
	fd, err := unix.Openat(at, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return step{}, &os.PathError{Op: "open", Path: where, Err: err}
	}
	s := step{fd: fd, path: where}
	if err := unix.Fstat(fd, &s.st); err != nil {
		// Unknown, so taken for anyone's to write: a link in it is
		// never trusted.
		s.st = unix.Stat_t{Mode: unix.S_IFDIR | 0o777, Uid: ^uint32(0), Gid: ^uint32(0)}
		return s, nil
	}
	s.trusted = parentTrusted && ownerUID(s.st.Uid) == nil &&
		(s.st.Mode&0o022 == 0 || s.st.Mode&unix.S_IFMT == unix.S_IFDIR && s.st.Mode&unix.S_ISVTX != 0)
	return s, nil
}

// ownerUID is owner's check of a uid: root or this process's user.
func ownerUID(uid uint32) error {
	if uid != 0 && int(uid) != os.Geteuid() {
		return fmt.Errorf("owned by uid %d, neither root nor uid %d: %w", uid, os.Geteuid(), ErrUntrusted)
	}
	return nil
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
