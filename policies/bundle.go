package policies

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
)

// Bundle is one loaded generation of policy source: every Rego file (tests
// included) and any data document, with the shared library added when the
// bundle lacks it. Its hash covers exactly what is compiled and tested.
type Bundle struct {
	// Origin is where the bundle came from (a directory, a tarball, or
	// "embedded").
	Origin  string
	Modules []bundle.ModuleFile
	Data    map[string]any
}

// Source says where to load a bundle from: Path (a directory, or a .tar.gz
// as `opa build` writes it) or, when Path is empty, FS.
type Source struct {
	Path string
	FS   fs.FS
}

// Verification configures checking of OPA-style signed bundles
// (.signatures.json, as `opa build --signing-key` writes it).
type Verification struct {
	PublicKey string // PEM public key, or an HMAC secret for HS* algorithms
	KeyID     string // default "default"
	Algorithm string // default "RS256"
	Scope     string
}

// ErrIntegrity is the class of errors where the bundle is not the one the
// operator pinned or signed. Callers refuse to start on it.
var ErrIntegrity = errors.New("policy bundle integrity check failed")

// IntegrityError says how the bundle differs from what was expected.
type IntegrityError struct {
	Origin string
	Want   string
	Got    string
	Detail string // which files changed, or the signature failure
}

func (e *IntegrityError) Error() string {
	msg := fmt.Sprintf("policy bundle %s: ", e.Origin)
	if e.Want != "" {
		msg += fmt.Sprintf("hash %s does not match pinned %s", e.Got, e.Want)
	} else {
		msg += "signature verification failed"
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

func (e *IntegrityError) Is(target error) bool { return target == ErrIntegrity }

// LoadBundle reads a bundle from src. With v non-nil the bundle must carry a
// valid signature by v's key covering every file, or loading fails with an
// IntegrityError.
func LoadBundle(src Source, v *Verification) (*Bundle, error) {
	b, origin, err := readBundle(src, nil)
	if err != nil {
		return nil, fmt.Errorf("load policy bundle %s: %w", origin, err)
	}
	if v != nil {
		// Read again with verification: the first pass has already reported
		// I/O and parse errors as such, so any failure now is the signature.
		if _, _, err := readBundle(src, v); err != nil {
			return nil, &IntegrityError{Origin: origin, Detail: err.Error()}
		}
	}
	out := &Bundle{Origin: origin, Modules: b.Modules, Data: b.Data}
	for i := range out.Modules {
		out.Modules[i].Path = strings.TrimPrefix(path.Clean("/"+out.Modules[i].Path), "/")
	}
	if !out.hasPackage("airlock.lib") {
		if err := out.addLib(); err != nil {
			return nil, err
		}
	}
	sort.Slice(out.Modules, func(i, j int) bool { return out.Modules[i].Path < out.Modules[j].Path })
	if len(out.Modules) == 0 {
		return nil, fmt.Errorf("load policy bundle %s: no .rego files", origin)
	}
	return out, nil
}

func readBundle(src Source, v *Verification) (bundle.Bundle, string, error) {
	loader, origin, closeFn, err := openLoader(src)
	if err != nil {
		return bundle.Bundle{}, src.Path, err
	}
	defer closeFn()
	r := bundle.NewCustomReader(loader).
		WithRegoVersion(ast.RegoV1).
		WithProcessAnnotations(true).
		WithSkipBundleVerification(v == nil)
	if v != nil {
		keyID := v.KeyID
		if keyID == "" {
			keyID = "default"
		}
		alg := v.Algorithm
		if alg == "" {
			alg = "RS256"
		}
		keys := map[string]*bundle.KeyConfig{keyID: {Key: v.PublicKey, Algorithm: alg, Scope: v.Scope}}
		r = r.WithBundleVerificationConfig(bundle.NewVerificationConfig(keys, keyID, v.Scope, nil))
	}
	b, err := r.Read()
	return b, origin, err
}

func openLoader(src Source) (bundle.DirectoryLoader, string, func(), error) {
	if src.Path == "" {
		if src.FS == nil {
			return nil, "", nil, errors.New("no policy bundle given")
		}
		return bundle.NewFSLoaderWithRoot(src.FS, "."), "embedded", func() {}, nil
	}
	st, err := os.Stat(src.Path)
	if err != nil {
		return nil, "", nil, fmt.Errorf("policy bundle: %w", err)
	}
	if st.IsDir() {
		return bundle.NewDirectoryLoader(src.Path), src.Path, func() {}, nil
	}
	f, err := os.Open(src.Path)
	if err != nil {
		return nil, "", nil, fmt.Errorf("policy bundle: %w", err)
	}
	return bundle.NewTarballLoaderWithBaseURL(f, ""), src.Path, func() { f.Close() }, nil
}

func (b *Bundle) hasPackage(pkg string) bool {
	for _, m := range b.Modules {
		if m.Parsed != nil && strings.TrimPrefix(m.Parsed.Package.Path.String(), "data.") == pkg {
			return true
		}
	}
	return false
}

func (b *Bundle) addLib() error {
	return fs.WalkDir(libFS, "lib", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := libFS.ReadFile(p)
		if err != nil {
			return err
		}
		m, err := ast.ParseModuleWithOpts(p, string(raw), ast.ParserOptions{RegoVersion: ast.RegoV1, ProcessAnnotation: true})
		if err != nil {
			return fmt.Errorf("embedded policy library %s: %w", p, err)
		}
		b.Modules = append(b.Modules, bundle.ModuleFile{Path: p, URL: p, Raw: raw, Parsed: m})
		return nil
	})
}

// files lists the bundle's content as (path, bytes), sorted by path: every
// module, then the data document in canonical JSON when there is one.
func (b *Bundle) files() [][2][]byte {
	out := make([][2][]byte, 0, len(b.Modules)+1)
	for _, m := range b.Modules {
		out = append(out, [2][]byte{[]byte(m.Path), m.Raw})
	}
	if len(b.Data) > 0 {
		data, _ := json.Marshal(b.Data) // map keys are sorted: canonical
		out = append(out, [2][]byte{[]byte("data.json"), data})
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i][0], out[j][0]) < 0 })
	return out
}

// Hash is "sha256:<hex>" over the canonical encoding of the bundle: for each
// file in path order, the length-prefixed path then the length-prefixed
// content. Lengths make the encoding unambiguous: no two bundles share it.
func (b *Bundle) Hash() string {
	h := sha256.New()
	h.Write([]byte("airlock-bundle-v1\x00"))
	var n [8]byte
	for _, f := range b.files() {
		for _, part := range f {
			binary.BigEndian.PutUint64(n[:], uint64(len(part)))
			h.Write(n[:])
			h.Write(part)
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// FileHashes maps each file to its own sha256, so a mismatch can name the
// file that changed.
func (b *Bundle) FileHashes() map[string]string {
	out := map[string]string{}
	for _, f := range b.files() {
		sum := sha256.Sum256(f[1])
		out[string(f[0])] = "sha256:" + hex.EncodeToString(sum[:])
	}
	return out
}

// Lock is the content of a lock file: the bundle hash a reviewer approved
// and, to name what changed on a mismatch, each file's hash.
type Lock struct {
	Version int               `json:"version"`
	Bundle  string            `json:"bundle"`
	Files   map[string]string `json:"files"`
}

// LockFileName is the lock file `airlock policy lock DIR` writes into DIR and
// that loading DIR enforces when present. It is not part of the bundle.
const LockFileName = "airlock.lock"

// NewLock records b's hashes.
func NewLock(b *Bundle) Lock {
	return Lock{Version: 1, Bundle: b.Hash(), Files: b.FileHashes()}
}

// ReadLock reads a lock file written by WriteLock.
func ReadLock(file string) (Lock, error) {
	var l Lock
	raw, err := os.ReadFile(file)
	if err != nil {
		return l, fmt.Errorf("policy lock: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return l, fmt.Errorf("policy lock %s: %w", file, err)
	}
	if l.Version != 1 || !strings.HasPrefix(l.Bundle, "sha256:") {
		return l, fmt.Errorf("policy lock %s: unsupported version %d or hash %q", file, l.Version, l.Bundle)
	}
	return l, nil
}

// WriteLock writes l to file atomically (write, fsync, rename), so a watcher
// never sees half a lock.
func WriteLock(file string, l Lock) error {
	raw, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	tmp := file + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("policy lock: %w", err)
	}
	if _, err = f.Write(append(raw, '\n')); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("policy lock %s: %w", file, err)
	}
	return os.Rename(tmp, file)
}

// Verify checks b against a pinned hash. With lock non-nil the error names
// the files that were added, removed or changed.
func (b *Bundle) Verify(pin string, lock *Lock) error {
	got := b.Hash()
	if pin == "" && lock != nil {
		pin = lock.Bundle
	}
	if pin == "" || strings.EqualFold(pin, got) {
		return nil
	}
	e := &IntegrityError{Origin: b.Origin, Want: pin, Got: got}
	if lock != nil && lock.Bundle == pin {
		e.Detail = diffFiles(lock.Files, b.FileHashes())
	}
	return e
}

func diffFiles(want, got map[string]string) string {
	var changes []string
	for f, h := range got {
		switch w, ok := want[f]; {
		case !ok:
			changes = append(changes, "added "+f)
		case w != h:
			changes = append(changes, "changed "+f)
		}
	}
	for f := range want {
		if _, ok := got[f]; !ok {
			changes = append(changes, "removed "+f)
		}
	}
	sort.Strings(changes)
	return strings.Join(changes, ", ")
}
