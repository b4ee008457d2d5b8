// Package trusted says whether a privileged process may believe a file:
// whether no one but root, or the process's own user, could have written
// it. sshd's StrictModes is the model.
package trusted

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrUntrusted is wrapped by every refusal.
var ErrUntrusted = errors.New("another user could write it")

// Mode checks one file's owner and mode: owned by root or by this
// process's user, and writable by neither its group nor others.
func Mode(fi fs.FileInfo) error {
	if err := owner(fi); err != nil {
		return err
	}
	return mode(fi)
}

// Path checks path, symbolic links resolved, and every directory above
// it: one that another user may write lets that user put another file in
// its place. A directory others may write but whose sticky bit keeps them
// from what they do not own (/tmp) passes; what is below it is checked.
// So is each symbolic link met on the way, and the directory it is in: a
// link another user owns, or in a directory they may write, is theirs to
// point elsewhere later.
func Path(path string) error {
	// Resolved as written: a ".." after a link is the parent of where
	// the link leads, as the kernel reads it, not a lexical step back.
	real, err := filepath.EvalSymlinks(path)
	if err == nil {
		real, err = filepath.Abs(real)
	}
	if err != nil {
		return err
	}
	if err := chain(path, real, real); err != nil {
		return err
	}
	hops := 0
	return links(path, path, &hops)
}

// MaxLinks bounds the links one path may lead through, as the kernel's 40.
const MaxLinks = 40

// links checks each symbolic link met resolving p (for Path(orig)), each
// owned by root or this user, in a directory chain passes.
func links(orig, p string, hops *int) error {
	return walkLinks(orig, p, hops, func(link string, fi fs.FileInfo, dir string) error {
		if err := owner(fi); err != nil {
			return fmt.Errorf("%s: the link %s: %w", orig, link, err)
		}
		return chain(orig, dir, "")
	})
}

// WalkLinks calls visit with each symbolic link met resolving p as the
// kernel does (those of its directory part, recursively, then those its
// last component leads through; a ".." after a link is the parent of where
// it leads), its Lstat and the directory it is in, resolved, before the
// link is followed; at most 40, as the kernel's bound. A part of p that
// is missing ends the walk with its error.
func WalkLinks(p string, visit func(link string, fi fs.FileInfo, dir string) error) error {
	hops := 0
	return walkLinks(p, p, &hops, visit)
}

func walkLinks(orig, p string, hops *int, visit func(link string, fi fs.FileInfo, dir string) error) error {
	dir, base := SplitLast(p)
	for {
		if dir != "." && dir != "/" {
			if err := walkLinks(orig, dir, hops, visit); err != nil {
				return err
			}
		}
		realDir, err := filepath.EvalSymlinks(dir)
		if err == nil {
			realDir, err = filepath.Abs(realDir)
		}
		if err != nil {
			return err
		}
		full := filepath.Join(realDir, base)
		fi, err := os.Lstat(full)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return nil
		}
		if *hops++; *hops > MaxLinks {
			return fmt.Errorf("%s: more than %d symbolic links on the way: %w", orig, MaxLinks, ErrUntrusted)
		}
		if err := visit(full, fi, realDir); err != nil {
			return err
		}
		target, err := os.Readlink(full)
		if err != nil {
			return err
		}
		if !filepath.IsAbs(target) {
			target = realDir + "/" + target
		}
		dir, base = SplitLast(target)
	}
}

// Links checks, as Path does, each symbolic link met resolving path, but
// not the directories the path itself lies in: for a file written as root
// in a directory others may write (a sandbox's job directory), where only
// a link of theirs on the way could lead the write elsewhere.
func Links(path string) error {
	hops := 0
	return links(path, path, &hops)
}

// SplitLast splits p at its last slash, cleaning nothing: ("a/b/..", "c")
// for "a/b/../c"; (".", p) without one; ("/", "x") for "/x". A file made in
// OpenDir(dir) is base there.
func SplitLast(p string) (dir, base string) {
	i := strings.LastIndexByte(p, '/')
	switch {
	case i < 0:
		return ".", p
	case i == 0:
		return "/", p[1:]
	}
	return p[:i], p[i+1:]
}

// chain checks from and every directory above it, for Path(path): from
// is the file itself when it is real.
func chain(path, from, real string) error {
	for p := from; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		err = owner(fi)
		if err == nil && (!fi.IsDir() || fi.Mode()&fs.ModeSticky == 0) {
			err = mode(fi)
		}
		if err != nil {
			if p == real {
				return fmt.Errorf("%s: %w", p, err)
			}
			return fmt.Errorf("%s: its directory %s: %w", path, p, err)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// OpenOutput opens path for a privileged process to write what it makes
// (a log, a status), with flags (O_APPEND) and, made, perm: not through a
// symbolic link as its last component (one planted, or swapped in after
// any check, would have it write where the link points: an error wrapping
// ELOOP), and without blocking on a FIFO that no one reads. Nothing is
// truncated here: a caller that wants it empty truncates what it got, once
// it has looked at it.
func OpenOutput(path string, flags int, perm os.FileMode) (*os.File, error) {
	return openOutputAt(unix.AT_FDCWD, path, path, flags, perm)
}

// OpenOutputIn is OpenOutput of name in dir (OpenDir's): the directory
// part of the path is the one checked, whatever another user swaps in on
// its way meanwhile.
func OpenOutputIn(dir *os.File, name string, flags int, perm os.FileMode) (*os.File, error) {
	return openOutputAt(int(dir.Fd()), name, filepath.Join(dir.Name(), name), flags, perm)
}

func openOutputAt(at int, name, path string, flags int, perm os.FileMode) (*os.File, error) {
	fd, err := unix.Openat(at, name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_CLOEXEC|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|flags, uint32(perm.Perm()))
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	// Blocking again before os.NewFile sees it: a FIFO is then written as
	// a file is, not through the poller.
	if err := syscall.SetNonblock(fd, false); err != nil {
		syscall.Close(fd)
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// Owner checks one file's owner only: root or this process's user.
func Owner(fi fs.FileInfo) error { return owner(fi) }

func owner(fi fs.FileInfo) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return ownerUID(st.Uid)
	}
	return nil
}

func mode(fi fs.FileInfo) error {
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("mode %04o is writable by group or others: %w", perm, ErrUntrusted)
	}
	return nil
}
