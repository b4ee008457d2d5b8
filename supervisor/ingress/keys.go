package ingress

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/durable"
	"github.com/airlock-sandbox/airlock/internal/trusted"
)

// Key file format, one line per key:
//
//	# comments and blank lines are allowed
//	alice sha256:<64 hex digits: the sha256 of alice's key>
//
// An operator may have several lines (a key being rotated); a hash may
// appear only once, since a key names exactly one operator.
const (
	hashPrefix = "sha256:"
	keyPrefix  = "alk_"
)

// operatorName is what an operator may be called: it appears in audit
// lines and in the X-Airlock-Operator header, so nothing that could break
// either.
var operatorName = regexp.MustCompile(`^[A-Za-z0-9._@-]+$`)

// ValidOperator reports whether name is a valid operator name.
func ValidOperator(name string) bool { return operatorName.MatchString(name) }

// Keys is a loaded key file.
type Keys struct {
	path    string
	entries []keyEntry
	stamp   fileStamp // of the file the entries were read from
}

// fileStamp tells one version of a file from another: a file replaced
// (renamed over) has another inode, one written in place another ctime.
type fileStamp struct {
	dev, ino     uint64
	size         int64
	ctime, mtime syscall.Timespec
}

func stampOf(st os.FileInfo) fileStamp {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileStamp{}
	}
	return fileStamp{dev: sys.Dev, ino: sys.Ino, size: sys.Size, ctime: sys.Ctim, mtime: sys.Mtim}
}

type keyEntry struct {
	operator string
	hash     [sha256.Size]byte
	line     int
}

// Len is the number of keys.
func (k *Keys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.entries)
}

// Path is the file the keys were loaded from.
func (k *Keys) Path() string { return k.path }

// LoadKeys reads a key file. Anything short of a well-formed file with at
// least one key that only its owner can change is an error: a route that
// cannot tell operators apart must not start.
func LoadKeys(path string) (*Keys, error) {
	// Its directories too: one another user may write lets them put
	// another file (another route's keys, through a link) in its place.
	if err := trusted.Path(path); err != nil {
		return nil, fmt.Errorf("ingress key file: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ingress key file: %w", err)
	}
	defer f.Close()
	st, err := checkKeyFile(f, path)
	if err != nil {
		return nil, err
	}
	k, err := parseKeys(f, path)
	if err != nil {
		return nil, err
	}
	k.stamp = stampOf(st)
	if len(k.entries) == 0 {
		return nil, fmt.Errorf("ingress key file %s: no keys (add one with `airlock ingress key --operator NAME --keys %s`)", path, path)
	}
	return k, nil
}

// checkKeyFile refuses a key file someone other than its owner could
// rewrite (to add their own key), or one owned by another user than root
// or us, as sshd's StrictModes refuses an authorized_keys file.
func checkKeyFile(f *os.File, path string) (os.FileInfo, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("ingress key file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("ingress key file %s: not a regular file (%s)", path, st.Mode().Type())
	}
	if err := trusted.Mode(st); err != nil {
		return nil, fmt.Errorf("ingress key file %s: %w (chmod 600 it, owned by root or this user)", path, err)
	}
	return st, nil
}

// parseKeys parses the lines of a key file; errors name path:line.
func parseKeys(r io.Reader, path string) (*Keys, error) {
	k := &Keys{path: path}
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		e, err := parseKeyLine(line)
		if err != nil {
			return nil, fmt.Errorf("ingress key file %s:%d: %w", path, n, err)
		}
		if first, dup := seen[e.hash]; dup {
			return nil, fmt.Errorf("ingress key file %s:%d: the same key hash as line %d (a key names one operator)", path, n, first)
		}
		seen[e.hash] = n
		e.line = n
		k.entries = append(k.entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ingress key file %s: %w", path, err)
	}
	return k, nil
}

func parseKeyLine(line string) (keyEntry, error) {
	fields := strings.Fields(line)
	if len(fields) != 2 {
		return keyEntry{}, fmt.Errorf("want `OPERATOR sha256:HEX`, got %d fields", len(fields))
	}
	name, hash := fields[0], fields[1]
	if !ValidOperator(name) {
		return keyEntry{}, fmt.Errorf("operator %q: names are made of A-Z a-z 0-9 . _ @ -", name)
	}
	hexHash, ok := strings.CutPrefix(hash, hashPrefix)
	if !ok {
		return keyEntry{}, fmt.Errorf("operator %s: the hash must start with %q (the key itself never goes in this file)", name, hashPrefix)
	}
	raw, err := hex.DecodeString(hexHash)
	if err != nil || len(raw) != sha256.Size {
		return keyEntry{}, fmt.Errorf("operator %s: the hash must be %d hex digits", name, 2*sha256.Size)
	}
	e := keyEntry{operator: name}
	copy(e.hash[:], raw)
	return e, nil
}

// Operator returns the operator whose key this is. The presented key is
// hashed and compared against every stored hash in constant time, with no
// early exit, so the answer's timing tells neither how much of a hash
// matched nor which line did.
func (k *Keys) Operator(key string) (operator string, ok bool) {
	if k == nil || key == "" {
		return "", false
	}
	h := sha256.Sum256([]byte(key))
	match := -1
	for i := range k.entries {
		eq := subtle.ConstantTimeCompare(h[:], k.entries[i].hash[:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 {
		return "", false
	}
	return k.entries[match].operator, true
}

// NewKey returns a fresh random key: "alk_" and 32 random bytes, base64url.
func NewKey() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("ingress key: %w", err)
	}
	return keyPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// HashKey is the form a key is stored in: "sha256:HEX".
func HashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hashPrefix + hex.EncodeToString(h[:])
}

// ErrOperatorExists is returned by AddKey when the operator already has a
// key and replace was not asked for.
var ErrOperatorExists = errors.New("operator already has a key")

// AddKey makes a new key for operator, records its hash in the key file at
// path (created 0600 if missing) and returns the key, which is nowhere
// else: it is shown once. An operator who already has a key is refused
// unless replace, which removes their other lines. The result must load.
func AddKey(path, operator string, replace bool) (string, error) {
	if !ValidOperator(operator) {
		return "", fmt.Errorf("operator %q: names are made of A-Z a-z 0-9 . _ @ -", operator)
	}
	key, err := NewKey()
	if err != nil {
		return "", err
	}
	// Before anything is created there: in a directory another user may
	// write, root would create (or append to) what a link of theirs
	// names.
	if err := trusted.Path(filepath.Dir(path)); err != nil {
		return "", fmt.Errorf("ingress key file %s: its directory: %w", path, err)
	}
	f, err := lockKeyFile(path)
	if err != nil {
		return "", err
	}
	defer f.Close() // releases the lock
	if _, err := checkKeyFile(f, path); err != nil {
		return "", err
	}
	old, err := io.ReadAll(f)
	if err != nil {
		return "", fmt.Errorf("ingress key file %s: %w", path, err)
	}
	k, err := parseKeys(bytes.NewReader(old), path)
	if err != nil {
		return "", err
	}
	entry := operator + " " + HashKey(key) + "\n"
	var lines []int
	for _, e := range k.entries {
		if e.operator == operator {
			lines = append(lines, e.line)
		}
	}
	switch {
	case len(lines) == 0:
		if len(old) > 0 && old[len(old)-1] != '\n' {
			entry = "\n" + entry
		}
		err = appendSync(f, entry)
	case !replace:
		return "", fmt.Errorf("ingress key file %s:%d: %w: %s (use --replace to replace it)", path, lines[0], ErrOperatorExists, operator)
	default:
		err = durable.WriteFile(path, []byte(withoutLines(old, lines)+entry), 0o600) // a crash leaves the old file or the new one
	}
	if err != nil {
		return "", fmt.Errorf("ingress key file %s: %w", path, err)
	}
	if _, err := LoadKeys(path); err != nil {
		return "", fmt.Errorf("the key file no longer loads after adding %s: %w", operator, err)
	}
	return key, nil
}

// lockKeyFile opens (creating 0600) and exclusively locks the key file, so
// two runs cannot both find an operator absent and both add it. A run that
// replaced the file while we waited leaves us holding the old inode's
// lock: open it again.
func lockKeyFile(path string) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("ingress key file %s is a symbolic link: give the file itself", path)
		}
		if err != nil {
			return nil, fmt.Errorf("ingress key file: %w", err)
		}
		if err := durable.Flock(f, syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("ingress key file %s: flock: %w", path, err)
		}
		held, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("ingress key file: %w", err)
		}
		now, err := os.Stat(path)
		if err == nil && os.SameFile(held, now) {
			return f, nil
		}
		f.Close()
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("ingress key file: %w", err)
		}
	}
}

func appendSync(f *os.File, s string) error {
	if _, err := f.WriteString(s); err != nil {
		return err
	}
	return f.Sync()
}

// withoutLines is content without the given (1-based) lines.
func withoutLines(content []byte, drop []int) string {
	var b strings.Builder
	n := 0
	for line := range strings.Lines(string(content)) {
		n++
		if len(drop) > 0 && drop[0] == n {
			drop = drop[1:]
			continue
		}
		b.WriteString(line)
		if !strings.HasSuffix(line, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}
