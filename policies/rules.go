package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
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

// decodeRules decodes a preset's rules strictly.
func decodeRules(v any) ([]Rule, error) {
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
		if err := checkHostPattern(h); err != nil {
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
func checkHostPattern(h string) error {
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
	if wild && !strings.Contains(c, ".") {
		return fmt.Errorf("host %q: a wildcard over a top-level domain is not allowed", h)
	}
	if c != rest {
		if wild {
			c = "*." + c
		}
		return fmt.Errorf("host %q is not canonical; write %q", h, c)
	}
	return nil
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
