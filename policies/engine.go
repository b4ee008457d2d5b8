package policies

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// Decider answers one question per connection and per request. The zero
// Decision denies, and so does every error path.
type Decider interface {
	Decide(ctx context.Context, in *Input) Decision
}

// Options configure an Engine. Only Source is required.
type Options struct {
	Source Source
	// PinnedSHA256 ("sha256:<hex>") refuses any bundle with another hash.
	PinnedSHA256 string
	// LockFile is enforced when set; when empty, <Source.Path>/airlock.lock
	// is enforced if it exists. A pin and a lock must agree.
	LockFile string
	// Verify, when set, requires a valid OPA bundle signature.
	Verify *Verification
	// Quarantine makes a rejected reload deny everything (reason
	// policy_quarantined) until a good bundle arrives, instead of keeping
	// the last good generation.
	Quarantine bool
	Logger     *slog.Logger
	// OnReload, if set, is called after every reload attempt.
	OnReload func(hash string, err error)
	// Check, if set, vets each generation's validated presets before it
	// serves (the proxy checks that it holds every secret its preset
	// injects). Its error rejects the generation like any load error: New
	// fails, and a reload keeps the last good generation (or quarantines).
	Check func(presets []Preset) error
	// CacheSize bounds the decision cache of each generation; 0 means
	// DefaultCacheSize and a negative size disables caching.
	CacheSize int
}

// Engine evaluates presets compiled from one bundle generation at a time.
// Generations are swapped atomically; a Decide sees one whole generation.
type Engine struct {
	opts   Options
	log    *slog.Logger
	gen    atomic.Pointer[generation]
	reload sync.Mutex // serialises reloads and served
	// served are the presets something serves (RequirePreset); a reload
	// whose bundle lacks one is rejected.
	served map[string]bool
	// locked: a lock file was enforced on a load, so every later load
	// needs one (the default one beside the bundle is optional only until
	// then: whoever may edit the bundle may delete it, too).
	locked atomic.Bool
}

// generation is one compiled bundle. Quarantine, when non-nil, overrides it.
type generation struct {
	hash       string
	origin     string
	bundle     *Bundle
	presets    map[string]*compiledPreset
	quarantine error
	locked     bool                           // verified against a lock file
	cache      *lru.Cache[cacheKey, Decision] // nil: caching disabled
	gate       *rego.PreparedEvalQuery        // nil: the bundle has no gate policy
}

type compiledPreset struct {
	Preset
	decision rego.PreparedEvalQuery
	explain  rego.PreparedEvalQuery
}

// New loads, verifies and compiles the bundle. Any failure, including an
// integrity mismatch (errors.Is(err, ErrIntegrity)), refuses to build the
// engine: there is no fallback policy.
func New(ctx context.Context, opts Options) (*Engine, error) {
	if opts.PinnedSHA256 != "" {
		pin, err := ParsePin(opts.PinnedSHA256)
		if err != nil {
			return nil, err
		}
		opts.PinnedSHA256 = pin
	}
	e := &Engine{opts: opts, log: opts.Logger, served: map[string]bool{}}
	if e.log == nil {
		e.log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	g, err := e.load(ctx)
	if err != nil {
		return nil, err
	}
	e.use(g)
	e.log.Info("policy generation active", "policy", g.hash, "origin", g.origin, "presets", g.presetNames())
	return e, nil
}

// Hash is the bundle hash of the generation now serving.
func (e *Engine) Hash() string { return e.gen.Load().hash }

// Bundle is the bundle of the generation now serving.
func (e *Engine) Bundle() *Bundle { return e.gen.Load().bundle }

// Presets lists the preset names of the generation now serving.
func (e *Engine) Presets() []string { return e.gen.Load().presetNames() }

// Preset returns a preset's validated rules.
func (e *Engine) Preset(name string) (Preset, bool) {
	p, ok := e.gen.Load().presets[name]
	if !ok {
		return Preset{}, false
	}
	return p.Preset, true
}

// ErrNoPreset: a preset something must serve is not in the bundle.
var ErrNoPreset = errors.New("no preset")

// RequirePreset checks that the generation now serving has preset and
// registers it as served: from then on a reload whose bundle lacks it is
// rejected like any broken bundle, since every decision for its sandboxes
// would otherwise be a policy_error.
func (e *Engine) RequirePreset(name string) error {
	e.reload.Lock()
	defer e.reload.Unlock()
	g := e.gen.Load()
	if _, ok := g.presets[name]; !ok {
		return fmt.Errorf("%w %q in policy %s; it has %v", ErrNoPreset, name, g.hash, g.presetNames())
	}
	e.served[name] = true
	return nil
}

// lacksServed names the served presets g does not have.
func (e *Engine) lacksServed(g *generation) error {
	var missing []string
	for name := range e.served {
		if _, ok := g.presets[name]; !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	sort.Strings(missing)
	return fmt.Errorf("policy %s (%s) lacks served preset(s) %v", g.hash, g.origin, missing)
}

func (g *generation) presetNames() []string {
	names := make([]string, 0, len(g.presets))
	for n := range g.presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Decide evaluates in against its sandbox's preset. It canonicalises in
// first (in place). It never returns an allow on error.
func (e *Engine) Decide(ctx context.Context, in *Input) Decision {
	g := e.gen.Load()
	preset := in.Sandbox.Preset
	if g.quarantine != nil {
		return deny(ReasonPolicyQuarantined, preset, g.hash, g.quarantine)
	}
	if err := in.Canonicalize(); err != nil {
		return deny(ReasonInvalidRequest, preset, g.hash, err)
	}
	p, ok := g.presets[preset]
	if !ok {
		return deny(ReasonPolicyError, preset, g.hash, fmt.Errorf("no preset %q in policy %s", preset, g.hash))
	}
	if g.cache == nil {
		return g.evaluate(ctx, p, in)
	}
	key := keyOf(in)
	if d, ok := g.cache.Get(key); ok {
		return d
	}
	d := g.evaluate(ctx, p, in)
	if d.Reason != ReasonPolicyError { // errors may be transient (cancelled ctx)
		g.cache.Add(key, d)
	}
	return d
}

func (g *generation) evaluate(ctx context.Context, p *compiledPreset, in *Input) Decision {
	preset := in.Sandbox.Preset
	if err := ctx.Err(); err != nil {
		return deny(ReasonPolicyError, preset, g.hash, err)
	}
	rs, err := p.decision.Eval(ctx, rego.EvalParsedInput(in.value()))
	if err != nil {
		return deny(ReasonPolicyError, preset, g.hash, err)
	}
	d, err := parseDecision(rs)
	if err != nil {
		return deny(ReasonPolicyError, preset, g.hash, fmt.Errorf("preset %q: %w", preset, err))
	}
	d.Preset, d.Policy = preset, g.hash
	if in.Request.Phase != PhaseConnect {
		d.Inspect = false // inspection is decided per connection, not per request
	}
	if d.Reason == ReasonQueryNotAllowed {
		d.Detail = p.queryDetail(d.Rule, in.Request.Query)
	}
	return d
}

// parseDecision reads the decision object strictly: a missing or mistyped
// field is a policy error, never a default.
func parseDecision(rs rego.ResultSet) (Decision, error) {
	var d Decision
	if len(rs) != 1 {
		return d, errors.New("decision is undefined")
	}
	obj, ok := rs[0].Bindings["x"].(map[string]any)
	if !ok {
		return d, fmt.Errorf("decision is %T, not an object", rs[0].Bindings["x"])
	}
	allow, ok1 := obj["allow"].(bool)
	inspect, ok2 := obj["inspect"].(bool)
	reason, ok3 := obj["reason"].(string)
	rule, ok4 := obj["rule"].(string)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return d, fmt.Errorf("decision %v lacks allow, inspect, reason or rule", obj)
	}
	if !policyReasons[Reason(reason)] || allow != (Reason(reason) == ReasonAllowed) {
		return d, fmt.Errorf("decision has allow=%v with reason %q", allow, reason)
	}
	d = Decision{Allow: allow, Inspect: allow && inspect, Reason: Reason(reason), Rule: rule}
	if inj, ok := obj["inject"].(map[string]any); ok && len(inj) > 0 && allow {
		d.Inject = make(map[string]SecretRef, len(inj))
		for name, v := range inj {
			ref, _ := v.(map[string]any)
			env, _ := ref["env"].(string)
			file, _ := ref["file"].(string)
			format, _ := ref["format"].(string)
			if (env == "") == (file == "") {
				return Decision{}, fmt.Errorf("inject %q needs exactly one of env or file", name)
			}
			d.Inject[name] = SecretRef{Env: env, File: file, Format: format}
		}
	}
	return d, nil
}

// load builds a generation from the configured source: read, verify the
// signature, check the pin, compile, validate every preset, prepare queries.
func (e *Engine) load(ctx context.Context) (*generation, error) {
	b, err := ReadBundle(e.opts.Source)
	if err != nil {
		return nil, err
	}
	lock, err := e.readLock()
	if err != nil {
		return nil, err
	}
	if e.opts.PinnedSHA256 != "" && lock != nil && !strings.EqualFold(lock.Bundle, e.opts.PinnedSHA256) {
		return nil, fmt.Errorf("%w: --policy-sha256 %s and lock file %s disagree", ErrIntegrity, e.opts.PinnedSHA256, lock.Bundle)
	}
	// Integrity first: a bundle that is not the pinned one is refused
	// before any of it is parsed.
	if err := b.Verify(e.opts.PinnedSHA256, lock); err != nil {
		return nil, err
	}
	if err := b.Parse(e.opts.Verify); err != nil {
		return nil, err
	}
	g, err := compile(ctx, b)
	if err != nil {
		return nil, err
	}
	if e.opts.Check != nil {
		ps := make([]Preset, 0, len(g.presets))
		for _, name := range g.presetNames() {
			ps = append(ps, g.presets[name].Preset)
		}
		if err := e.opts.Check(ps); err != nil {
			return nil, fmt.Errorf("policy bundle %s: %w", b.Origin, err)
		}
	}
	if size := e.opts.CacheSize; size >= 0 {
		if size == 0 {
			size = DefaultCacheSize
		}
		g.cache, _ = lru.New[cacheKey, Decision](size)
	}
	g.locked = lock != nil
	return g, nil
}

// use puts g in force. A lock it was verified against is required from
// now on (one a rejected load read is not: the next may go without it).
func (e *Engine) use(g *generation) {
	e.gen.Store(g)
	if g.locked {
		e.locked.Store(true)
	}
}

func (e *Engine) lockPath() (string, bool) {
	if e.opts.LockFile != "" {
		return e.opts.LockFile, true
	}
	if e.opts.Source.Path == "" {
		return "", false
	}
	dir := e.opts.Source.Path
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		dir = filepath.Dir(dir)
	}
	return filepath.Join(dir, LockFileName), false
}

func (e *Engine) readLock() (*Lock, error) {
	file, explicit := e.lockPath()
	if file == "" {
		return nil, nil
	}
	if _, err := os.Stat(file); !explicit && !e.locked.Load() && errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	l, err := ReadLock(file)
	if errors.Is(err, os.ErrNotExist) && e.locked.Load() {
		return nil, fmt.Errorf("%w: lock file %s, enforced when this policy was loaded, is gone", ErrIntegrity, file)
	}
	if err != nil {
		return nil, err
	}
	return &l, nil
}

// Check compiles and validates b as New would, without pins or locks.
func Check(ctx context.Context, b *Bundle) error {
	_, err := compile(ctx, b)
	return err
}

// deterministic are OPA's capabilities without its nondeterministic
// built-ins (http.send, net.lookup_ip_addr, time.now_ns, rand.intn,
// opa.runtime, ...): a decision is the bundle's answer to its input, which
// the decision cache keys on whole, and a bundle could otherwise reach the
// network from the proxy, outside every sandbox, beside its secrets.
// Built at the first compile, not at every airlock start (a launch with no
// proxy compiles nothing).
var deterministic = sync.OnceValue(func() *ast.Capabilities {
	c := ast.CapabilitiesForThisVersion()
	c.Builtins = slices.DeleteFunc(c.Builtins, (*ast.Builtin).IsNondeterministic)
	return c
})

// compile compiles a bundle's policy modules (tests excluded: they never
// decide anything) and prepares one query per preset.
func compile(ctx context.Context, b *Bundle) (*generation, error) {
	mods := map[string]*ast.Module{}
	for _, m := range b.Modules {
		if !isTestFile(m.Path) {
			mods[m.Path] = m.Parsed
		}
	}
	if err := checkInputRefs(mods); err != nil {
		return nil, fmt.Errorf("policy bundle %s: %w", b.Origin, err)
	}
	c := ast.NewCompiler().WithStrict(false).WithCapabilities(deterministic())
	if c.Compile(mods); c.Failed() {
		return nil, fmt.Errorf("compile policy bundle %s: %w", b.Origin, c.Errors)
	}
	g := &generation{hash: b.Hash(), origin: b.Origin, bundle: b, presets: map[string]*compiledPreset{}}
	var errs []error
	for _, name := range presetPackages(c) {
		p, err := preparePreset(ctx, c, mods, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("preset %q: %w", name, err))
			continue
		}
		g.presets[name] = p
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("policy bundle %s: %w", b.Origin, err)
	}
	if len(g.presets) == 0 {
		return nil, fmt.Errorf("policy bundle %s defines no preset (package airlock.presets.<name> with a decision rule)", b.Origin)
	}
	var err error
	if g.gate, err = prepareGate(ctx, c, mods); err != nil {
		return nil, fmt.Errorf("policy bundle %s: %w", b.Origin, err)
	}
	return g, nil
}

// presetPackages finds the packages data.airlock.presets.<name>.
func presetPackages(c *ast.Compiler) []string {
	seen := map[string]bool{}
	var names []string
	for _, m := range c.Modules {
		p := m.Package.Path
		if len(p) != 4 || !p[:3].Equal(ast.MustParseRef("data.airlock.presets")) {
			continue
		}
		name, ok := p[3].Value.(ast.String)
		if ok && !seen[string(name)] {
			seen[string(name)] = true
			names = append(names, string(name))
		}
	}
	sort.Strings(names)
	return names
}

func preparePreset(ctx context.Context, c *ast.Compiler, parsed map[string]*ast.Module, name string) (*compiledPreset, error) {
	pkg := "data.airlock.presets." + name
	if err := checkDecisionForm(parsed, name); err != nil {
		return nil, err
	}
	// Rules must be constant data: evaluated here once, without input.
	// Go's values of them cannot tell a set from a list, which the
	// library reads differently (a set of rules has no positions, a set
	// of methods is no method list): sets are found in Rego.
	rs, err := rego.New(rego.Compiler(c), rego.Query(fmt.Sprintf(
		"r := %s.rules; d := %s.denies; lists := [is_array(r), is_array(d)]; sets := [p | walk([r, d], [p, v]); is_set(v)]; ix := data.airlock.lib.index(r, d)", pkg, pkg))).Eval(ctx)
	if err != nil {
		return nil, err
	}
	if len(rs) != 1 {
		return nil, errors.New("must define rules and denies as constant lists (rules := [...], denies := [...])")
	}
	b := rs[0].Bindings
	if err := checkShape(b["lists"], b["sets"]); err != nil {
		return nil, err
	}
	p := &compiledPreset{Preset: Preset{Name: name}}
	if p.Rules, err = decodeRules(b["r"]); err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	if p.Denies, err = decodeRules(b["d"]); err != nil {
		return nil, fmt.Errorf("denies: %w", err)
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	// The index is lib.decide's constant half, computed once here; each
	// decision then evaluates lib.decide_indexed on it, the same function
	// `decision := lib.decide(rules, denies)` runs under opa test.
	if err := checkIndexed(b["ix"], len(p.Rules), len(p.Denies)); err != nil {
		return nil, err
	}
	ix, err := ast.InterfaceToValue(b["ix"])
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	decide := ast.Body{ast.Equality.Expr(ast.VarTerm("x"),
		ast.CallTerm(ast.RefTerm(ast.MustParseRef("data.airlock.lib.decide_indexed")...), ast.NewTerm(ix)))}
	if p.decision, err = prepare(ctx, c, rego.ParsedQuery(decide)); err != nil {
		return nil, err
	}
	if p.explain, err = prepare(ctx, c, rego.Query(fmt.Sprintf("x := data.airlock.lib.explain(%s.rules, %s.denies)", pkg, pkg))); err != nil {
		return nil, err
	}
	return p, nil
}

// checkDecisionForm requires the one declarative form of a preset's
// decision. Custom decision logic would bypass the shared, tested library
// and the engine's index; conditions belong in rules and denies.
func checkDecisionForm(parsed map[string]*ast.Module, name string) error {
	const want = "decision := lib.decide(rules, denies)"
	var found int
	for _, m := range parsed {
		if m.Package.Path.String() != "data.airlock.presets."+name {
			continue
		}
		for _, r := range m.Rules {
			if r.Head.Name.String() != "decision" && r.Head.Ref().String() != "decision" {
				continue
			}
			found++
			call, ok := r.Head.Value.Value.(ast.Call)
			if !ok || r.Else != nil || len(r.Body) != 1 || !r.Body[0].Equal(ast.NewExpr(ast.BooleanTerm(true))) ||
				len(call) != 3 || !isLibDecide(call[0], m) ||
				!call[1].Equal(ast.VarTerm("rules")) || !call[2].Equal(ast.VarTerm("denies")) {
				return fmt.Errorf("%s:%d: decision must be exactly %q (import data.airlock.lib); put conditions in rules and denies", m.Package.Location.File, r.Location.Row, want)
			}
		}
	}
	if found != 1 {
		return fmt.Errorf("must define decision exactly once as %q", want)
	}
	return nil
}

func isLibDecide(t *ast.Term, m *ast.Module) bool {
	ref, ok := t.Value.(ast.Ref)
	if !ok {
		return false
	}
	if ref.Equal(ast.MustParseRef("data.airlock.lib.decide")) {
		return true
	}
	if len(ref) != 2 || !ref[1].Equal(ast.StringTerm("decide")) {
		return false
	}
	for _, imp := range m.Imports {
		if imp.Path.Equal(ast.RefTerm(ast.MustParseRef("data.airlock.lib")...)) &&
			(imp.Alias == "" && ref[0].Equal(ast.VarTerm("lib")) || ref[0].Equal(ast.VarTerm(string(imp.Alias)))) {
			return true
		}
	}
	return false
}

func prepare(ctx context.Context, c *ast.Compiler, query func(*rego.Rego)) (rego.PreparedEvalQuery, error) {
	// Strict builtin errors: a builtin that fails is an evaluation error
	// (policy_error), not a silently undefined expression.
	return rego.New(rego.Compiler(c), query, rego.StrictBuiltinErrors(true)).PrepareForEval(ctx)
}
