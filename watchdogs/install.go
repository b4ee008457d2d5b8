package watchdogs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Written says what Install did with one file.
type Written struct {
	Path    string
	Changed bool // false: the same content was there already
}

// Install writes files into dir (made if missing). Every file is checked
// before any is written: one already there with other content is refused,
// unless force. Each file is written whole (a temporary file
// renamed over it), so an init system never reads half a unit.
func Install(dir string, files []File, force bool) ([]Written, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%q is not an absolute directory", dir)
	}
	var out []Written
	var conflicts []error
	for _, f := range files {
		p := filepath.Join(dir, f.Name)
		old, err := os.ReadFile(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			out = append(out, Written{p, true})
		case err != nil:
			return nil, err
		case bytes.Equal(old, f.Data):
			out = append(out, Written{p, false})
		case force:
			out = append(out, Written{p, true})
		default:
			conflicts = append(conflicts, fmt.Errorf("%s exists with other content (--force replaces it)", p))
		}
	}
	if err := errors.Join(conflicts...); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for i, f := range files {
		if out[i].Changed {
			if err := writeWhole(out[i].Path, f.Data); err != nil {
				return out[:i], err
			}
		}
	}
	return out, nil
}

func writeWhole(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
