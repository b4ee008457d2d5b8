package durable

import (
	"fmt"
	"os"
)

// SyncDir fsyncs dir: a name created, renamed or removed in it survives a
// crash only once its directory is on disk.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
