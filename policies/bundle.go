package policies

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing/fstest"

	"github.com/airlock-sandbox/airlock/internal/durable"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
)

// Bundle is one generation of policy source: every Rego file (tests
// included) and data document, with the shared library added when the bundle
// lacks it. The bytes that are hashed are the bytes that are parsed and
// compiled: Parse reads Files, never the source again.
type Bundle struct {
	// Origin is where the bundle came from (a directory, a tarball, or
	// "embedded").
	Origin string
	// Files is the policy content, sorted by path: what Hash covers.
	Files []File
	// meta holds .manifest and .signatures.json: checked, not hashed.
	meta []File
	// injected are the paths of the embedded library's files, added to a
	// bundle that lacks it: no signature can cover them, so they, and
	// nothing else, are excluded from verification.
	injected []string
	// Modules and Data are set by Parse.
	Modules []bundle.ModuleFile
	Data    map[string]any
}

// File is one file of a bundle, its path relative to the bundle root.
type File struct {
	Path string
	Raw  []byte
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
	PublicKey string // PEM public key
	KeyID     string // default "default"
	Algorithm string // default "RS256"; one of SigningAlgorithms
	Scope     string
}

// SigningAlgorithms are the signature algorithms a bundle may be verified
// with: public-key ones only. With HS256 OPA takes the "public key" for the
// HMAC secret, and anyone who has the public key (it is public) signs.
var SigningAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"}

// CheckSigningAlg refuses an algorithm not in SigningAlgorithms ("" is
// RS256).
func CheckSigningAlg(alg string) error {
	if alg == "" || slices.Contains(SigningAlgorithms, alg) {
		return nil
	}
	return fmt.Errorf("signing algorithm %q: want one of %s (a public key's; an HMAC one would make the public key its secret)", alg, strings.Join(SigningAlgorithms, ", "))
}

// ErrIntegrity is the class of errors where the bundle is not the one the
// operator pinned or signed. Callers refuse to start on it.
var ErrIntegrity = errors.New("policy bundle integrity check failed")

// ParsePin reads a bundle hash as an operator writes it, `sha256:<64 hex>`
// or the 64 hex digits alone, and returns it as Hash spells it. A malformed
// pin is a mistake in the configuration, not an integrity failure: it
// could never match any bundle.
func ParsePin(s string) (string, error) {
	h := strings.TrimPrefix(s, "sha256:")
	if len(h) != sha256.Size*2 {
		return "", fmt.Errorf("policy pin %q: want sha256:<64 hex digits> (see `airlock policy hash`)", s)
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", fmt.Errorf("policy pin %q: want sha256:<64 hex digits> (see `airlock policy hash`)", s)
	}
	return "sha256:" + strings.ToLower(h), nil
}

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

// LoadBundle reads and parses a bundle (see ReadBundle and Parse).
func LoadBundle(src Source, v *Verification) (*Bundle, error) {
	b, err := ReadBundle(src)
	if err != nil {
		return nil, err
	}
	return b, b.Parse(v)
}

// libPackage finds a file that declares the library package, without
// parsing: the hash must be known before any parsing happens.
var libPackage = regexp.MustCompile(`(?m)^[ \t]*package[ \t]+airlock\.lib[ \t\r]*(#.*)?$`)

// ReadBundle reads a bundle's files without interpreting them, so that a
// pinned hash is checked before any byte is parsed.
func ReadBundle(src Source) (*Bundle, error) {
	loader, origin, closeFn, err := openLoader(src)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	b := &Bundle{Origin: origin}
	hasLib := false
	seen := map[string]bool{}
	for {
		d, err := loader.NextFile()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read policy bundle %s: %w", origin, err)
		}
		p := strings.TrimPrefix(path.Clean("/"+d.Path()), "/")
		// Two entries one path (a tarball's rv.rego and ./x/../rv.rego)
		// would both be hashed and only one parsed; and tar refuses to
		// extract a ".." member, so a reviewer reads another bundle.
		if slices.Contains(strings.Split(d.Path(), "/"), "..") {
			return nil, fmt.Errorf("read policy bundle %s: %q: a path with a .. segment", origin, d.Path())
		}
		if seen[p] {
			return nil, fmt.Errorf("read policy bundle %s: two files are %s", origin, p)
		}
		seen[p] = true
		var buf bytes.Buffer
		_, err = d.Read(&buf, maxBundleFile) // io.CopyN: EOF when shorter
		d.Close()
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read policy bundle %s: %s: %w", origin, p, err)
		}
		if buf.Len() >= maxBundleFile {
			return nil, fmt.Errorf("read policy bundle %s: %s is larger than %d bytes", origin, p, maxBundleFile)
		}
		f := File{Path: p, Raw: buf.Bytes()}
		switch base := path.Base(p); {
		case strings.HasSuffix(p, ".rego"):
			// A test of the library is no library: with only that, the
			// presets would compile against nothing.
			hasLib = hasLib || !isTestFile(p) && libPackage.Match(f.Raw)
			b.Files = append(b.Files, f)
		case base == "data.json" || base == "data.yaml" || base == "data.yml":
			b.Files = append(b.Files, f)
		case base == ".manifest":
			if err := checkManifest(f.Raw); err != nil {
				return nil, fmt.Errorf("read policy bundle %s: %s: %w", origin, p, err)
			}
			b.meta = append(b.meta, f)
		case base == ".signatures.json":
			b.meta = append(b.meta, f)
		}
	}
	if !hasLib {
		if err := b.addLib(); err != nil {
			return nil, err
		}
	}
	sort.Slice(b.Files, func(i, j int) bool { return b.Files[i].Path < b.Files[j].Path })
	if len(b.Files) == 0 {
		return nil, fmt.Errorf("read policy bundle %s: no .rego files", origin)
	}
	return b, nil
}

// checkManifest refuses a .manifest that would change how the hashed
// files are parsed: it is not hashed, and every file is parsed as Rego v1.
func checkManifest(raw []byte) error {
	var m struct {
		RegoVersion      *int           `json:"rego_version"`
		FileRegoVersions map[string]int `json:"file_rego_versions"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("not a manifest: %w", err)
	}
	if m.RegoVersion != nil && *m.RegoVersion != 1 {
		return fmt.Errorf("rego_version %d: this bundle's files are parsed as Rego v1, and the manifest is not hashed", *m.RegoVersion)
	}
	for f, v := range m.FileRegoVersions {
		if v != 1 {
			return fmt.Errorf("file_rego_versions[%q] %d: this bundle's files are parsed as Rego v1, and the manifest is not hashed", f, v)
		}
	}
	return nil
}

// maxBundleFile bounds one policy file; a larger one is refused, not cut.
const maxBundleFile = 16 << 20

// Parse parses exactly the bytes read by ReadBundle. With v non-nil the
// bundle must carry a valid signature by v's key covering every file, or
// Parse fails with an IntegrityError.
func (b *Bundle) Parse(v *Verification) error {
	if _, err := b.read(nil); err != nil {
		return fmt.Errorf("load policy bundle %s: %w", b.Origin, err)
	}
	if v != nil {
		// Read again with verification: the first pass has already reported
		// parse errors as such, so any failure now is the signature.
		if _, err := b.read(v); err != nil {
			return &IntegrityError{Origin: b.Origin, Detail: err.Error()}
		}
	}
	return nil
}

func (b *Bundle) read(v *Verification) (bundle.Bundle, error) {
	// An in-memory file system (fstest.MapFS is a plain map, nothing
	// test-only) so OPA's reader sees the very bytes that were hashed.
	fsys := fstest.MapFS{}
	for _, f := range append(append([]File{}, b.Files...), b.meta...) {
		if v == nil && path.Base(f.Path) == ".signatures.json" {
			continue
		}
		fsys["b/"+f.Path] = &fstest.MapFile{Data: f.Raw, Mode: 0o444}
	}
	// Rooted at a directory, not ".": OPA's FS loader strips a "." root
	// from the front of ".signatures.json".
	r := bundle.NewCustomReader(bundle.NewFSLoaderWithRoot(fsys, "b")).
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
		if err := CheckSigningAlg(alg); err != nil {
			return bundle.Bundle{}, err
		}
		keys := map[string]*bundle.KeyConfig{keyID: {Key: v.PublicKey, Algorithm: alg, Scope: v.Scope}}
		r = r.WithBundleVerificationConfig(bundle.NewVerificationConfig(keys, keyID, v.Scope, b.injected))
	}
	ob, err := r.Read()
	if err != nil {
		return ob, err
	}
	b.Modules, b.Data = ob.Modules, ob.Data
	for i := range b.Modules {
		b.Modules[i].Path = strings.TrimPrefix(path.Clean("/"+b.Modules[i].Path), "/")
		if err := b.checkLibInjected(b.Modules[i]); err != nil {
			return ob, err
		}
	}
	sort.Slice(b.Modules, func(i, j int) bool { return b.Modules[i].Path < b.Modules[j].Path })
	return ob, nil
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

// libDir is where the embedded library is placed in a bundle that lacks
// one. A signature cannot cover it (the signer never saw it); it is part of
// the airlock binary instead, and part of the hash.
const libDir = "lib"

func (b *Bundle) addLib() error {
	return fs.WalkDir(libFS, libDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := libFS.ReadFile(p)
		if err != nil {
			return err
		}
		for _, f := range b.Files {
			if f.Path == p {
				return fmt.Errorf("policy bundle %s: %s exists but is not the library (no file but a test declares package airlock.lib)", b.Origin, p)
			}
		}
		b.Files = append(b.Files, File{Path: p, Raw: raw})
		b.injected = append(b.injected, p)
		return nil
	})
}

// checkLibInjected refuses a module of the bundle's own that would define
// documents inside the library when the library was taken to be missing
// (ReadBundle's look at package lines, made before parsing, did not see
// it): its rules would join the injected library, which the bundle is
// reviewed against but does not carry, and with a signature it would be the
// one file of the bundle's own whose absence from the signature went
// unseen. The package alone does not say where a rule lands: in `package
// airlock`, `lib._bins_ok(_) := true` is a rule of data.airlock.lib, so
// each rule's full path is checked. Test files are CheckTests' to refuse
// (compile leaves them out of every decision, so none joins the library
// that decides).
func (b *Bundle) checkLibInjected(m bundle.ModuleFile) error {
	if len(b.injected) == 0 || slices.Contains(b.injected, m.Path) || m.Parsed == nil || isTestFile(m.Path) {
		return nil
	}
	if m.Parsed.Package.Path.HasPrefix(libRef) {
		return fmt.Errorf("%s declares package %s, which ReadBundle did not see as the library's: write its package line as `package airlock.lib` alone on its line", m.Path, m.Parsed.Package.Path)
	}
	for _, r := range m.Parsed.Rules {
		if p := rulePath(m.Parsed, r); within(p, libRef) {
			return fmt.Errorf("%s:%d: rule %s (in package %s) defines %s, inside the embedded library %s, which a bundle may not extend: a bundle that changes the library brings all of it (a package airlock.lib of its own)", m.Path, r.Location.Row, r.Head.Ref(), m.Parsed.Package.Path, p, libRef)
		}
	}
	return nil
}

// libRef is the library's package.
var libRef = ast.MustParseRef("data.airlock.lib")

// decidingRoots are the documents the engine evaluates whatever modules a
// bundle has: the library, the presets and the action gate's policy.
var decidingRoots = []ast.Ref{libRef, ast.MustParseRef("data.airlock.presets"), ast.MustParseRef("data.airlock.gate")}

// testRoot is a document a test file's rules may not reach into, and why.
type testRoot struct {
	ref ast.Ref
	why string
	// below says which packages below ref a test file may have.
	below belowRoot
}

type belowRoot int

const (
	// noneBelow: none; nothing at or below ref is the tests'.
	noneBelow belowRoot = iota
	// testsBelow: a test package of its own (ownTestPackage), as
	// airlock.presets.coder_test is: the engine reads every package
	// below the presets as a preset, and the library and the gate by
	// name.
	testsBelow
	// anyBelow: any package below ref. A package root: a bare name
	// reaches the rules of its own package only, and a policy module
	// that declares the package below has a root of its own.
	anyBelow
)

// CheckTests refuses a test file with a rule inside what decides: the
// library, the presets or the gate; the package of a policy module (a file
// other than a test), where a bare name in its rules is a rule of that
// package, a test file's too (`i := 0` beside `[h | h := hosts[i]]` makes
// the comprehension take one host); a document a policy module defines;
// or one it reads by a data reference or an import. Compile leaves test
// files out of every decision, so the engine loads such a bundle and
// decides as if the tests were absent; but `airlock policy test` compiles
// them with the rest, and the tests would pass on another policy than the
// one that decides: a clause added to lib._bins_ok, a document a preset
// misspells defined. `policy test` calls it before running any test.
func (b *Bundle) CheckTests() error {
	var roots, packages []testRoot
	for _, r := range decidingRoots {
		roots = append(roots, testRoot{r, "which decides", testsBelow})
	}
	for _, m := range b.Modules {
		if m.Parsed == nil || isTestFile(m.Path) {
			continue
		}
		// OPA resolves a bare name in a module against the rules of
		// every module of its package, test files' too: the whole
		// package is the policy module's. (Checked after the other
		// roots, which say more of why.)
		packages = append(packages, testRoot{m.Parsed.Package.Path, "the package of " + m.Path + ", where a bare name is any rule of the package, a test file's too", anyBelow})
		for _, r := range m.Parsed.Rules {
			roots = append(roots, testRoot{rulePath(m.Parsed, r), "which " + m.Path + " defines", noneBelow})
		}
		// The package line is no reference: what a policy module
		// reads is in its imports and rules.
		reads := func(ref ast.Ref) bool {
			if ref[0].Equal(ast.DefaultRootDocument) {
				roots = append(roots, testRoot{ref.ConstantPrefix(), "which " + m.Path + " reads", noneBelow})
			}
			return false
		}
		for _, imp := range m.Parsed.Imports {
			ast.WalkRefs(imp, reads)
		}
		for _, r := range m.Parsed.Rules {
			ast.WalkRefs(r, reads)
		}
	}
	roots = append(roots, packages...)
	for _, m := range b.Modules {
		if m.Parsed == nil || !isTestFile(m.Path) {
			continue
		}
		pkg := m.Parsed.Package.Path
		for _, r := range m.Parsed.Rules {
			p := rulePath(m.Parsed, r)
			for _, root := range roots {
				if !overlaps(p, root.ref) || root.allows(pkg) {
					continue
				}
				return fmt.Errorf("%s:%d: test rule %s (in package %s) defines %s, inside %s, %s: compile leaves a test file out of every decision and `airlock policy test` does not, so the tests would pass on another policy than the one that decides; move the test to a package of its own (package %s_test, importing what it tests)",
					m.Path, r.Location.Row, r.Head.Ref(), pkg, p, root.ref, root.why, strings.TrimPrefix(pkg.String(), "data."))
			}
		}
	}
	return nil
}

// allows: a test file of package pkg may define documents inside root,
// its package being one of the tests' own below root.
func (root testRoot) allows(pkg ast.Ref) bool {
	switch root.below {
	case testsBelow:
		return ownTestPackage(pkg, root.ref)
	case anyBelow:
		return len(pkg) > len(root.ref) && pkg.HasPrefix(root.ref)
	}
	return false
}

// ownTestPackage: pkg is a test package (its last name ends in _test)
// strictly below root.
func ownTestPackage(pkg, root ast.Ref) bool {
	last, ok := pkg[len(pkg)-1].Value.(ast.String)
	return ok && strings.HasSuffix(string(last), "_test") && len(pkg) > len(root) && pkg.HasPrefix(root)
}

// overlaps reports whether the documents two rule or reference paths
// name may overlap, one at, below or above the other: a variable in
// either stands for any key.
func overlaps(p, q ast.Ref) bool {
	for i := 0; i < len(p) && i < len(q); i++ {
		_, pVar := p[i].Value.(ast.Var)
		_, qVar := q[i].Value.(ast.Var)
		if i > 0 && (pVar || qVar) {
			continue
		}
		if !p[i].Equal(q[i]) {
			return false
		}
	}
	return true
}

// isTestFile: a Rego test file, which `policy test` runs and compile leaves
// out of every decision.
func isTestFile(p string) bool { return strings.HasSuffix(p, "_test.rego") }

// rulePath is the document a rule defines: its package extended by its
// head's ref, which may reach below the package (lib.x in package airlock
// is data.airlock.lib.x).
func rulePath(m *ast.Module, r *ast.Rule) ast.Ref { return m.Package.Path.Extend(r.Head.Ref()) }

// within reports whether a rule path p may define a document at or below
// prefix: a variable in p (lib[k] := ...) stands for any key.
func within(p, prefix ast.Ref) bool {
	if len(p) < len(prefix) {
		return false
	}
	for i, t := range prefix {
		// p[0] is the root, data, a Var too; a variable after it is a key.
		if _, isVar := p[i].Value.(ast.Var); isVar && i > 0 {
			continue
		}
		if !p[i].Equal(t) {
			return false
		}
	}
	return true
}

// Hash is "sha256:<hex>" over the canonical encoding of the bundle: for each
// file in path order, the length-prefixed path then the length-prefixed
// content. Lengths make the encoding unambiguous: no two bundles share it.
func (b *Bundle) Hash() string {
	h := sha256.New()
	h.Write([]byte("airlock-bundle-v1\x00"))
	var n [8]byte
	for _, f := range b.Files {
		for _, part := range [][]byte{[]byte(f.Path), f.Raw} {
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
	for _, f := range b.Files {
		sum := sha256.Sum256(f.Raw)
		out[f.Path] = "sha256:" + hex.EncodeToString(sum[:])
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
	if err := durable.WriteFile(file, append(raw, '\n'), 0o644); err != nil {
		return fmt.Errorf("policy lock: %w", err)
	}
	return nil
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
