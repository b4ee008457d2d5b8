// Package mountinfo reads a mount namespace's mounts, as
// /proc/<pid>/mountinfo lists them (proc(5)).
package mountinfo

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Mount is one line of mountinfo.
type Mount struct {
	ID     uint64
	Dev    string // major:minor of its filesystem
	Root   string // what of its filesystem is mounted
	Point  string
	Opts   string // its per-mount options (rw,nosuid,nodev,...)
	FSType string
}

// HasOpt says whether the mount has the per-mount option opt.
func (m Mount) HasOpt(opt string) bool { return slices.Contains(strings.Split(m.Opts, ","), opt) }

// Read reads the mountinfo file at path (/proc/self/mountinfo, or
// /proc/thread-self/mountinfo for a thread in a mount namespace of its own).
func Read(path string) ([]Mount, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(raw)
}

// Parse reads mountinfo whole, or fails: a caller that looks for a mount
// must not take one left unread for one that is not there.
func Parse(raw []byte) ([]Mount, error) {
	var mounts []Mount
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if len(f) < 5 || sep < 6 || sep+1 >= len(f) {
			return nil, fmt.Errorf("mountinfo: cannot read the line %q", sc.Text())
		}
		id, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("mountinfo: cannot read the line %q", sc.Text())
		}
		mounts = append(mounts, Mount{ID: id, Dev: f[2], Root: unescape(f[3]), Point: unescape(f[4]), Opts: f[5], FSType: f[sep+1]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	if len(mounts) == 0 {
		return nil, errors.New("mountinfo: no mounts")
	}
	return mounts, nil
}

// unescape undoes mountinfo's escapes of a path: space, tab, newline and
// backslash as three octal digits.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out = append(out, byte(n))
				i += 3
				continue
			}
		}
		out = append(out, s[i])
	}
	return string(out)
}
