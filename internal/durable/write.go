package durable

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data, mode perm: a temporary file in the
// same directory, fsync'd, renamed over path, and the directory fsync'd.
// A reader sees the old file or the new one, whole.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing is there
	// By its descriptor, never its name: whoever can write dir could put
	// a symbolic link in the file's place, and a chmod by name would
	// change the mode of what it points to.
	err = tmp.Chmod(perm)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
