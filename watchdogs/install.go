package watchdogs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/durable"
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
			if err := durable.WriteFile(out[i].Path, f.Data, 0o644); err != nil {
				return out[:i], err
			}
		}
	}
	return out, nil
}
