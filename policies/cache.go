package policies

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// The decision cache. OPA's evaluator costs microseconds per function call,
// and the proxy asks the same questions over and over (one binary, one
// host), so decisions are memoised per generation. The cache is exact, not
// heuristic: the key holds every input field the library reads, which
// checkInputRefs verifies when a bundle is compiled, and presets cannot read
// input at all. A new generation starts with an empty cache.

// DefaultCacheSize bounds the decisions kept per generation.
const DefaultCacheSize = 8192

// decidedFields are the input fields lib.decide may read; the cache key and
// the policy's input document (Input.value) are exactly these.
var decidedFields = []string{
	"input.request.phase", "input.request.host", "input.request.port",
	"input.request.method", "input.request.path", "input.request.query",
	"input.request.upgrade", "input.request.slash_path", "input.process.exe", "input.process.sha256",
}

type cacheKey struct {
	preset, exe, sha256, host    string
	port                         int
	phase                        Phase
	method, path, query, upgrade string
	slashPath                    string
}

func keyOf(in *Input) cacheKey {
	r := &in.Request
	k := cacheKey{
		preset: in.Sandbox.Preset, exe: in.Process.Exe, sha256: in.Process.SHA256,
		host: r.Host, port: r.Port, phase: r.Phase, method: r.Method, path: r.Path, upgrade: r.Upgrade, slashPath: r.SlashPath,
	}
	if len(r.Query) > 0 {
		k.query = url.Values(r.Query).Encode() // sorted by key: canonical
	}
	return k
}

// checkInputRefs refuses a bundle whose library reads input fields the cache
// does not key on, or whose presets read input at all (their rules are
// evaluated once, at load). The gate policy is not a preset: it reads its
// own input and is never cached. Each rule is judged by the document it
// defines, not by its module's package: `lib.f(_) := input.process.pid`
// in package airlock is the library's, and once went unchecked.
func checkInputRefs(mods map[string]*ast.Module) error {
	for file, m := range mods {
		// An import of input (import input.process) is read by rules that
		// no longer spell input: it must suit every rule of its module.
		var imports []ast.Ref
		for _, imp := range m.Imports {
			if ref, ok := imp.Path.Value.(ast.Ref); ok && ref.HasPrefix(ast.InputRootRef) {
				imports = append(imports, ref)
			}
		}
		for _, r := range m.Rules {
			p := rulePath(m, r)
			lib := within(p, libRef)
			// The gate policy decides from its input, uncached (gate.go);
			// packages outside data.airlock are not presets.
			if !lib && (within(p, gateRef) || !within(p, airlockRef)) {
				continue
			}
			var bad error
			check := func(ref ast.Ref) {
				switch {
				case bad != nil || !ref.HasPrefix(ast.InputRootRef):
				case !lib:
					bad = fmt.Errorf("%s: %s reads %v; presets are constant rules and may not read input", file, p, ref)
				case !refWithin(ref, decidedFields):
					bad = fmt.Errorf("%s: the policy library's %s reads %v, which decisions are not keyed on (allowed: %s)", file, p, ref, strings.Join(decidedFields, ", "))
				}
			}
			for _, ref := range imports {
				check(ref)
			}
			ast.WalkRefs(r, func(ref ast.Ref) bool {
				check(ref)
				return bad != nil
			})
			if bad != nil {
				return bad
			}
		}
	}
	return nil
}

var (
	gateRef    = ast.MustParseRef(gatePackage)
	airlockRef = ast.MustParseRef("data.airlock")
)

func refWithin(ref ast.Ref, prefixes []string) bool {
	for _, p := range prefixes {
		if ref.HasPrefix(ast.MustParseRef(p)) {
			return true
		}
	}
	return false
}
