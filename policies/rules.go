package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// Rule is one allow or deny rule of a preset, as validated at compile time.
// Presets are Rego, but their rules must be plain data so that a typo
// ("method" for "methods") is a load error instead of a silently wider rule.
type Rule struct {
	Name     string               `json:"name"`
	Comment  string               `json:"comment,omitempty"`
	Binaries []Binary             `json:"binaries,omitempty"`
	Hosts    []string             `json:"hosts,omitempty"`
	Ports    []int                `json:"ports,omitempty"`
	Methods  json.RawMessage      `json:"methods,omitempty"`
	Paths    []string             `json:"paths,omitempty"`
	Query    map[string][]string  `json:"query,omitempty"`
	Inspect  *bool                `json:"inspect,omitempty"`
	Inject   map[string]SecretRef `json:"inject,omitempty"`
	// WebSocket allows WebSocket upgrades: frames go both ways after them,
	// unseen by any rule, so no rule allows one without saying so.
	WebSocket bool `json:"websocket,omitempty"`
}

// Binary names an executable by path (exact or glob) and optionally pins its
// content: SHA256 is a hex digest or a list of them.
type Binary struct {
	Path   string          `json:"path"`
	SHA256 json.RawMessage `json:"sha256,omitempty"`
}

// Preset is a validated preset: its name and rules.
type Preset struct {
	Name   string
	Rules  []Rule
	Denies []Rule
}

// decodeRules decodes a preset's rules strictly. Its field names must be
// exactly those the library reads: encoding/json matches "Hosts" (or
// "hoſts") to Hosts, which the library would not see, and a rule checked
// narrow here would be enforced wide.
func decodeRules(v any) ([]Rule, error) {
	if err := exactFields(v); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var rules []Rule
	if err := dec.Decode(&rules); err != nil {
		return nil, err
	}
	return rules, nil
}

var (
	ruleFields   = jsonFields(reflect.TypeFor[Rule]())
	binaryFields = jsonFields(reflect.TypeFor[Binary]())
	secretFields = jsonFields(reflect.TypeFor[SecretRef]())
)

// jsonFields are the JSON names of a struct's fields.
func jsonFields(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		names[name] = true
	}
	return names
}

// empty says whether v, a decoded JSON value, is null, [] or {}: decoded
// into a Rule, each is the absent field (any), and the library reads
// each as a present one.
func empty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}

// jsonText is v as JSON, for an error.
func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// exactFields checks every object of the rules (the rules, their binaries,
// their inject entries) for a field name not spelled exactly as the
// library reads it.
func exactFields(v any) error {
	rules, ok := v.([]any)
	if !ok {
		return nil // not a list: the decoder says so
	}
	check := func(obj any, names map[string]bool, where string) error {
		m, ok := obj.(map[string]any)
		if !ok {
			return nil // not an object: the decoder says so
		}
		for k, v := range m {
			if !names[k] {
				return fmt.Errorf("%s: unknown field %q (field names are lower case, as the library reads them)", where, k)
			}
			if empty(v) {
				return fmt.Errorf("%s: field %q is %s: leave it out to mean any (the library reads an empty or null field as one that matches nothing, so a deny rule would deny nothing)", where, k, jsonText(v))
			}
		}
		return nil
	}
	for i, r := range rules {
		where := fmt.Sprintf("rule %d", i)
		if m, ok := r.(map[string]any); ok {
			if name, ok := m["name"].(string); ok {
				where = fmt.Sprintf("rule %q", name)
			}
		}
		if err := check(r, ruleFields, where); err != nil {
			return err
		}
		m, _ := r.(map[string]any)
		bins, _ := m["binaries"].([]any)
		for j, b := range bins {
			if err := check(b, binaryFields, fmt.Sprintf("%s: binaries[%d]", where, j)); err != nil {
				return err
			}
		}
		inject, _ := m["inject"].(map[string]any)
		for h, ref := range inject {
			if err := check(ref, secretFields, fmt.Sprintf("%s: inject %s", where, h)); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkShape refuses rules or denies that are not lists, and a set
// anywhere in them (sets are where walk found them: [0 or 1, path...]).
func checkShape(lists, sets any) error {
	if l, ok := lists.([]any); !ok || len(l) != 2 || l[0] != true || l[1] != true {
		return errors.New("rules and denies must be lists (rules := [...], denies := [...]), not sets: a set has no order for the first matching rule")
	}
	found, _ := sets.([]any)
	if len(found) == 0 {
		return nil
	}
	at, _ := found[0].([]any)
	where := "rules"
	if len(at) > 0 && fmt.Sprint(at[0]) == "1" {
		where = "denies"
	}
	for _, step := range at[min(1, len(at)):] {
		if key, ok := step.(string); ok {
			where += fmt.Sprintf("[%q]", key)
		} else {
			where += fmt.Sprintf("[%v]", step)
		}
	}
	return fmt.Errorf("%s is a set ({...}); write a list ([...]): the library reads lists", where)
}

// checkIndexed refuses an index the library built from fewer rules than
// were given: a rule its preparation could not read is left out of the
// list, and the rules after it would answer for the hosts the index gives
// their positions.
// A library of the bundle's own that indexes otherwise is its author's.
func checkIndexed(ix any, rules, denies int) error {
	m, _ := ix.(map[string]any)
	r, okR := m["rules"].([]any)
	d, okD := m["denies"].([]any)
	if okR && okD && (len(r) != rules || len(d) != denies) {
		return fmt.Errorf("the library read %d of %d rules and %d of %d denies: a rule has a value of a type it does not read", len(r), rules, len(d), denies)
	}
	return nil
}

var (
	hexDigest    = regexp.MustCompile(`^[0-9a-f]{64}$`)
	methodSets   = map[string]bool{"read-only": true, "read-write": true, "full": true}
	globSpecials = "?[]{}"
)

// validate runs every check on the preset and reports all problems at once.
func (p *Preset) validate() error {
	var errs []error
	seen := map[string]bool{}
	for i := range p.Rules {
		errs = append(errs, p.Rules[i].validate(false, seen)...)
	}
	for i := range p.Denies {
		errs = append(errs, p.Denies[i].validate(true, seen)...)
	}
	return errors.Join(errs...)
}

func (r *Rule) validate(isDeny bool, seen map[string]bool) []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("rule %q: %s", r.Name, fmt.Sprintf(format, args...)))
	}
	if r.Name == "" {
		fail("has no name")
	} else if seen[r.Name] {
		fail("name is used twice")
	}
	seen[r.Name] = true
	if !isDeny {
		if len(r.Binaries) == 0 {
			fail(`lists no binaries (use [{"path": "/**"}] for any executable)`)
		}
		if len(r.Hosts) == 0 {
			fail(`lists no hosts (use ["*"] for any host)`)
		}
	}
	for _, b := range r.Binaries {
		if err := checkPathGlob(b.Path); err != nil {
			fail("binary %v", err)
		}
		if err := checkDigests(b.SHA256); err != nil {
			fail("binary %q: %v", b.Path, err)
		}
	}
	for _, h := range r.Hosts {
		if err := checkHostPattern(h, isDeny); err != nil {
			fail("%v", err)
		}
	}
	for _, port := range r.Ports {
		if port < 1 || port > 65535 {
			fail("port %d out of range", port)
		}
	}
	if err := checkMethods(r.Methods); err != nil {
		fail("%v", err)
	}
	for _, p := range r.Paths {
		if err := checkPathGlob(p); err != nil {
			fail("%v", err)
		}
	}
	for k, vs := range r.Query {
		if k == "" || len(vs) == 0 {
			fail("query %q needs a name and at least one allowed value", k)
		}
	}
	for name, ref := range r.Inject {
		if isDeny {
			fail("deny rules cannot inject headers")
		}
		if name == "" || strings.ContainsAny(name, " \t\r\n:") {
			fail("inject header %q is not a header name", name)
		}
		if (ref.Env == "") == (ref.File == "") {
			fail("inject %q needs exactly one of env or file", name)
		}
		if ref.Format != "" && strings.Count(ref.Format, "%s") != 1 {
			fail(`inject %q format must contain %%s once, e.g. "Bearer %%s"`, name)
		}
	}
	if r.WebSocket && isDeny {
		fail("deny rules cannot allow WebSockets (a deny rule with methods [\"GET\"] and the path denies them)")
	}
	if r.WebSocket && len(r.Inject) > 0 {
		// The proxy masks injected secrets an upstream echoes back in
		// responses; frames pass untouched, so it could not there.
		fail("cannot both inject headers and allow WebSockets: an upstream echoing the credential in a frame would hand it to the agent")
	}
	if r.Inspect != nil && !*r.Inspect && r.requestLevel() {
		fail("sets inspect: false but restricts methods, paths, query or injects headers, which only inspection can enforce")
	}
	return errs
}

// requestLevel mirrors lib._request_level: conditions only visible inside TLS.
func (r *Rule) requestLevel() bool {
	m := strings.TrimSpace(string(r.Methods))
	return (m != "" && m != `"full"`) ||
		(len(r.Paths) > 0 && !(len(r.Paths) == 1 && r.Paths[0] == "/**")) ||
		len(r.Query) > 0 || len(r.Inject) > 0
}

func checkMethods(raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	var set string
	if json.Unmarshal(raw, &set) == nil {
		if !methodSets[set] {
			return fmt.Errorf("methods %q is not one of read-only, read-write, full", set)
		}
		return nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil || len(list) == 0 {
		return fmt.Errorf("methods must be a set name or a non-empty list, got %s", raw)
	}
	for _, m := range list {
		if c, err := CanonicalMethod(m); err != nil || c != m {
			return fmt.Errorf("method %q must be an upper-case token (%q)", m, strings.ToUpper(m))
		}
		if m == http.MethodConnect {
			return errors.New("method CONNECT is decided by hosts and ports, not methods")
		}
	}
	return nil
}

func checkDigests(raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	var list []string
	var one string
	if json.Unmarshal(raw, &one) == nil {
		list = []string{one}
	} else if err := json.Unmarshal(raw, &list); err != nil || len(list) == 0 {
		return fmt.Errorf("sha256 must be a digest or a non-empty list of digests, got %s", raw)
	}
	for _, d := range list {
		if !hexDigest.MatchString(d) {
			return fmt.Errorf("sha256 %q is not 64 lower-case hex digits", d)
		}
	}
	return nil
}

// checkHostPattern accepts "*", "*.<domain>" with at least two labels after
// the wildcard, or a canonical host; it suggests the canonical spelling.
func checkHostPattern(h string, isDeny bool) error {
	if h == "*" {
		return nil
	}
	rest, wild := strings.CutPrefix(h, "*.")
	if strings.Contains(rest, "*") {
		return fmt.Errorf("host %q: a wildcard may only be the whole first label (*.example.com)", h)
	}
	c, err := CanonicalHost(rest)
	if err != nil {
		return fmt.Errorf("host %q: %v", h, err)
	}
	// A deny rule may name any wildcard: it only narrows.
	if wild && !isDeny && !strings.Contains(c, ".") {
		return fmt.Errorf("host %q: a wildcard over a top-level domain is not allowed", h)
	}
	// co.uk, github.io, workers.dev: others may register a name under a
	// public suffix (the list's private part names where they may on a
	// provider's domain), so an allow rule's wildcard over one allows
	// strangers' sites. List the hosts instead.
	// (Its own wildcard rule too: under *.kawasaki.jp every name is one.)
	if ps, _ := publicsuffix.PublicSuffix(c); wild && !isDeny && (ps == c || underSuffixWildcard(c)) {
		return fmt.Errorf("host %q: a wildcard over a public suffix (%s, where others may register names) is not allowed in an allow rule; list the hosts", h, c)
	}
	if c != rest {
		if wild {
			c = "*." + c
		}
		return fmt.Errorf("host %q is not canonical; write %q", h, c)
	}
	return nil
}

// underSuffixWildcard says whether every name just below c is a public
// suffix (the list has a wildcard rule *.c).
func underSuffixWildcard(c string) bool {
	const probe = "airlock-probe."
	ps, _ := publicsuffix.PublicSuffix(probe + c)
	return ps == probe+c
}

// checkPathGlob accepts absolute paths where "*" is a segment wildcard and
// "**" (a whole segment, at most once) is recursive.
func checkPathGlob(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("path %q must start with /", p)
	}
	if strings.ContainsAny(p, globSpecials) {
		return fmt.Errorf("path %q: only * and ** are wildcards; %s are not allowed", p, globSpecials)
	}
	doubles := 0
	for _, seg := range strings.Split(p, "/") {
		if strings.Contains(seg, "**") {
			if seg != "**" {
				return fmt.Errorf("path %q: ** must be a whole segment", p)
			}
			doubles++
		}
		if seg == "." || seg == ".." {
			return fmt.Errorf("path %q: dot-segments never match a canonical path", p)
		}
	}
	if doubles > 1 {
		return fmt.Errorf("path %q: at most one ** per pattern", p)
	}
	return nil
}
