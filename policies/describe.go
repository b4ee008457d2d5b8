package policies

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// Description is what a preset lets a sandbox reach, read from the
// preset's validated rules with the library's defaults filled in (ports
// 443, any method, any path): what `airlock spawn --dry-run` shows before
// a sub-agent runs. It is derived from the same rules Decide evaluates,
// never from a separate summary that could drift from them.
type Description struct {
	Preset string `json:"preset"`
	// Policy is the hash of the bundle the preset was read from.
	Policy string      `json:"policy"`
	Allows []RuleReach `json:"allows"`
	Denies []RuleReach `json:"denies"`
}

// RuleReach is one rule as a reader needs it. In an allow rule an empty
// Methods means any method; in a deny rule empty Binaries, Hosts, Ports,
// Methods or Paths mean any (the library's reading of an absent field).
type RuleReach struct {
	Rule     string              `json:"rule"`
	Comment  string              `json:"comment,omitempty"`
	Binaries []BinaryReach       `json:"binaries,omitempty"`
	Hosts    []string            `json:"hosts,omitempty"`
	Ports    []int               `json:"ports,omitempty"`
	Methods  []string            `json:"methods,omitempty"`
	Paths    []string            `json:"paths,omitempty"`
	Query    map[string][]string `json:"query,omitempty"`
	// Inspected: TLS is terminated and every request decided; else the
	// connection is an opaque tunnel. InspectedBy says why: "rule" (it
	// asks to, or has conditions only visible inside TLS) or the name of
	// a deny rule on an overlapping host that needs to see requests.
	Inspected   bool        `json:"inspected"`
	InspectedBy string      `json:"inspected_by,omitempty"`
	Inject      []Injection `json:"inject,omitempty"`
	WebSocket   bool        `json:"websocket,omitempty"`
}

// BinaryReach is an executable a rule names: a path or glob, and the
// digests it is pinned to (none: whatever file is at the path).
type BinaryReach struct {
	Path   string   `json:"path"`
	SHA256 []string `json:"sha256,omitempty"`
}

// Injection is a header the proxy adds and where it reads the secret.
// The secret's value is never part of a description.
type Injection struct {
	Header string `json:"header"`
	Env    string `json:"env,omitempty"`
	File   string `json:"file,omitempty"`
	Format string `json:"format,omitempty"`
}

// Describe reports what preset lets a sandbox reach in the generation now
// serving. An unknown preset is an error naming the presets there are.
func (e *Engine) Describe(preset string) (Description, error) {
	g := e.gen.Load()
	p, ok := g.presets[preset]
	if !ok {
		return Description{}, fmt.Errorf("%w %q in policy %s; it has %v", ErrNoPreset, preset, g.hash, g.presetNames())
	}
	d := Description{Preset: preset, Policy: g.hash, Allows: []RuleReach{}, Denies: []RuleReach{}}
	for _, r := range p.Rules {
		rr := describeRule(r, false)
		if r.selfInspect() {
			rr.Inspected, rr.InspectedBy = true, "rule"
		} else if deny, ok := inspectingDeny(rr, p.Denies); ok {
			rr.Inspected, rr.InspectedBy = true, deny
		}
		d.Allows = append(d.Allows, rr)
	}
	for _, r := range p.Denies {
		rr := describeRule(r, true)
		rr.Inspected = r.requestLevel()
		if rr.Inspected {
			rr.InspectedBy = "rule"
		}
		d.Denies = append(d.Denies, rr)
	}
	return d, nil
}

// selfInspect mirrors lib._self_inspect.
func (r *Rule) selfInspect() bool {
	return (r.Inspect != nil && *r.Inspect) || r.requestLevel()
}

// inspectingDeny mirrors lib._inspect's second branch statically: a deny
// rule with request-level conditions on a host and port the allow rule
// also names makes the proxy terminate TLS to see the requests. Binaries
// are not compared (a glob against a glob cannot be decided here), so the
// description may say inspected where a given binary's tunnel is not:
// it errs toward showing more scrutiny, never less reach.
func inspectingDeny(allow RuleReach, denies []Rule) (string, bool) {
	for _, d := range denies {
		if !d.requestLevel() {
			continue
		}
		if len(d.Ports) > 0 && !slices.ContainsFunc(d.Ports, func(p int) bool { return slices.Contains(allow.Ports, p) }) {
			continue
		}
		if len(d.Hosts) == 0 || slices.ContainsFunc(d.Hosts, func(dh string) bool {
			return slices.ContainsFunc(allow.Hosts, func(ah string) bool { return hostsOverlap(dh, ah) })
		}) {
			return d.Name, true
		}
	}
	return "", false
}

// hostsOverlap reports whether some host matches both patterns.
func hostsOverlap(a, b string) bool {
	if a == "*" || b == "*" || a == b {
		return true
	}
	as, aw := strings.CutPrefix(a, "*")
	bs, bw := strings.CutPrefix(b, "*")
	switch {
	case aw && bw:
		return strings.HasSuffix(as, bs) || strings.HasSuffix(bs, as)
	case aw:
		return hostMatch(a, b)
	case bw:
		return hostMatch(b, a)
	}
	return false
}

func describeRule(r Rule, isDeny bool) RuleReach {
	rr := RuleReach{
		Rule: r.Name, Comment: r.Comment, Hosts: r.Hosts, Ports: r.Ports,
		Methods: expandMethods(r.Methods), Paths: r.Paths, Query: r.Query, WebSocket: r.WebSocket,
	}
	if !isDeny {
		// The library's defaults for an allow rule (lib._prep).
		if len(rr.Ports) == 0 {
			rr.Ports = []int{443}
		}
		if len(rr.Paths) == 0 {
			rr.Paths = []string{"/**"}
		}
	}
	for _, b := range r.Binaries {
		rr.Binaries = append(rr.Binaries, BinaryReach{Path: b.Path, SHA256: digests(b.SHA256)})
	}
	for name, ref := range r.Inject {
		rr.Inject = append(rr.Inject, Injection{Header: name, Env: ref.Env, File: ref.File, Format: ref.Format})
	}
	sort.Slice(rr.Inject, func(i, j int) bool { return rr.Inject[i].Header < rr.Inject[j].Header })
	return rr
}

// expandMethods turns a validated methods field into its list: nil for
// "full" or absent (any method), a set name into the library's set.
func expandMethods(raw json.RawMessage) []string {
	var set string
	if len(raw) == 0 || (json.Unmarshal(raw, &set) == nil && set == "full") {
		return nil
	}
	switch set {
	case "read-only":
		return []string{"GET", "HEAD", "OPTIONS"}
	case "read-write":
		return []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"}
	}
	var list []string
	json.Unmarshal(raw, &list)
	return list
}

// digests reads a validated sha256 field: one digest or a list.
func digests(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}
	}
	var list []string
	json.Unmarshal(raw, &list)
	return list
}

// WriteText renders the description for a reader: one block per rule,
// allow rules first, then the deny rules that win over them.
func (d Description) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "preset %s (policy %s)\n", d.Preset, d.Policy)
	if len(d.Allows) == 0 {
		b.WriteString("allows: nothing (every connection is denied)\n")
	} else {
		b.WriteString("allows:\n")
	}
	for _, r := range d.Allows {
		writeRule(&b, r, false)
	}
	if len(d.Denies) > 0 {
		b.WriteString("denies (over every allow rule):\n")
	}
	for _, r := range d.Denies {
		writeRule(&b, r, true)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeRule(b *strings.Builder, r RuleReach, isDeny bool) {
	anyOr := func(list []string) string {
		if len(list) == 0 {
			return "any"
		}
		return strings.Join(list, " ")
	}
	fmt.Fprintf(b, "  %s\n", r.Rule)
	if r.Comment != "" {
		fmt.Fprintf(b, "    # %s\n", r.Comment)
	}
	var bins []string
	for _, bin := range r.Binaries {
		s := bin.Path
		if len(bin.SHA256) > 0 {
			s += " (sha256 " + strings.Join(bin.SHA256, " or ") + ")"
		} else {
			s += " (unpinned)"
		}
		bins = append(bins, s)
	}
	fmt.Fprintf(b, "    binaries: %s\n", anyOr(bins))
	fmt.Fprintf(b, "    hosts:    %s\n", anyOr(r.Hosts))
	var ports []string
	for _, p := range r.Ports {
		ports = append(ports, fmt.Sprint(p))
	}
	fmt.Fprintf(b, "    ports:    %s\n", anyOr(ports))
	fmt.Fprintf(b, "    methods:  %s\n", anyOr(r.Methods))
	fmt.Fprintf(b, "    paths:    %s\n", anyOr(r.Paths))
	if len(r.Query) > 0 {
		keys := make([]string, 0, len(r.Query))
		for k := range r.Query {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var qs []string
		for _, k := range keys {
			qs = append(qs, k+"="+strings.Join(r.Query[k], "|"))
		}
		fmt.Fprintf(b, "    query:    %s\n", strings.Join(qs, " "))
	}
	if isDeny {
		return
	}
	switch {
	case r.InspectedBy == "rule":
		b.WriteString("    tls:      inspected (every request decided)\n")
	case r.Inspected:
		fmt.Fprintf(b, "    tls:      inspected (deny rule %s needs to see requests)\n", r.InspectedBy)
	default:
		b.WriteString("    tls:      tunnelled (opaque: requests inside are not seen)\n")
	}
	for _, in := range r.Inject {
		src := "env " + in.Env
		if in.File != "" {
			src = "file " + in.File
		}
		if in.Format != "" {
			src += fmt.Sprintf(" as %q", in.Format)
		}
		fmt.Fprintf(b, "    injects:  header %s from the proxy's %s\n", in.Header, src)
	}
	if r.WebSocket {
		b.WriteString("    websocket: allowed (frames are not inspected)\n")
	}
}
