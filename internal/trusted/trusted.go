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
	"syscall"
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
// The directories above path as written are checked too: a symbolic link
// in one another user may write is theirs to point elsewhere later.
func Path(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err == nil {
		real, err = filepath.Abs(real)
	}
	if err != nil {
		return err
	}
	if err := chain(path, real, real); err != nil {
		return err
	}
	if dir := filepath.Dir(abs); abs != real {
		return chain(path, dir, real)
	}
	return nil
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

func owner(fi fs.FileInfo) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("owned by uid %d, neither root nor uid %d: %w", st.Uid, os.Geteuid(), ErrUntrusted)
	}
	return nil
}

func mode(fi fs.FileInfo) error {
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("mode %04o is writable by group or others: %w", perm, ErrUntrusted)
	}
	return nil
}
