package manifest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// decoder reads a manifest's YAML nodes into Go values. Walking the nodes
// (rather than yaml's struct decoding) gives every error the line of the
// value it is about, and lets one pass report every problem.
type decoder struct{ *report }

func newDecoder(file string) *decoder { return &decoder{newReport(file)} }

// obj is one YAML mapping being read: its fields are taken by name, and
// end reports those nobody took, so a misspelt field is an error rather
// than a silently ignored setting.
type obj struct {
	d     *decoder
	path  string
	line  int
	keys  []*yaml.Node
	key   map[string]*yaml.Node
	vals  map[string]*yaml.Node
	known []string
	// broken: the node was not a mapping (already reported), so its
	// fields are neither required nor unknown.
	broken bool
}

// object reads n as a mapping. A node that is not one is reported and
// read as an empty mapping, so its required fields are not reported too.
func (d *decoder) object(n *yaml.Node, path string) *obj {
	o := &obj{d: d, path: path, line: n.Line, key: map[string]*yaml.Node{}, vals: map[string]*yaml.Node{}}
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, path, "want a mapping, got %s", describe(n))
		o.broken = true
		return o
	}
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			d.errorf(k.Line, path, "field names must be plain strings (no merge keys or complex keys)")
			continue
		}
		if l, dup := first[k.Value]; dup {
			d.errorf(k.Line, field(path, k.Value), "duplicate field (first at line %d)", l)
			continue
		}
		first[k.Value] = k.Line
		o.keys = append(o.keys, k)
		o.key[k.Value] = k
		o.vals[k.Value] = v
	}
	return o
}

// get takes a field: its value node (nil when absent or null) and path.
// A required field that is absent or null is reported.
func (o *obj) get(name string, required bool) (*yaml.Node, string) {
	o.known = append(o.known, name)
	path := field(o.path, name)
	v := o.vals[name]
	if v == nil || isNull(v) {
		if required && !o.broken {
			line := o.line
			if v != nil {
				line = v.Line
			}
			o.d.errorf(line, path, "missing: the field is required")
		}
		return nil, path
	}
	// A field's line is its key's: for a block mapping or list, the
	// value starts on the next line.
	o.d.lines[path] = o.key[name].Line
	return v, path
}

// end reports the fields no one asked for.
func (o *obj) end() {
	for _, k := range o.keys {
		if !slices.Contains(o.known, k.Value) {
			o.d.errorf(k.Line, field(o.path, k.Value), "unknown field (want one of: %s)", strings.Join(o.known, ", "))
		}
	}
}

// Typed fields. Each leaves *dst unchanged (its default) when the field is
// absent, and reports a value of the wrong type.

// str reads a string field. An empty string is refused: written out it
// would either mean the default, which leaving the field out says, or
// nothing at all.
func (o *obj) str(name string, required bool, dst *string) {
	if n, path := o.get(name, required); n != nil {
		if s, ok := o.d.str(n, path); ok {
			if s == "" {
				o.d.errorf(n.Line, path, "must not be empty (leave the field out for its default)")
				return
			}
			*dst = s
		}
	}
}

func (o *obj) strs(name string, required bool, dst *[]string) {
	if n, path := o.get(name, required); n != nil {
		*dst = o.d.strs(n, path)
		if required && len(*dst) == 0 && !o.d.bad[path] {
			o.d.errorf(n.Line, path, "must not be empty")
		}
	}
}

func (o *obj) int(name string, required bool, dst *int) {
	if n, path := o.get(name, required); n != nil {
		if v, ok := o.d.integer(n, path); ok {
			*dst = int(v)
		}
	}
}

func (o *obj) int64(name string, dst *int64) {
	if n, path := o.get(name, false); n != nil {
		if v, ok := o.d.integer(n, path); ok {
			*dst = v
		}
	}
}

func (o *obj) float(name string, dst *float64) {
	if n, path := o.get(name, false); n != nil {
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!float" && n.Tag != "!!int") {
			o.d.errorf(n.Line, path, "want a number, got %s", describe(n))
			return
		}
		v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil {
			o.d.errorf(n.Line, path, "%q is not a number", n.Value)
			return
		}
		*dst = v
	}
}

func (o *obj) bool(name string, dst *bool) {
	if n, path := o.get(name, false); n != nil {
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			o.d.errorf(n.Line, path, "want true or false, got %s", describe(n))
			return
		}
		*dst = n.Value == "true"
	}
}

func (o *obj) duration(name string, dst *time.Duration) {
	if n, path := o.get(name, false); n != nil {
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			o.d.errorf(n.Line, path, "%s is not a duration: write it with a unit, as \"200ms\" or \"2s\"", describe(n))
			return
		}
		v, err := time.ParseDuration(n.Value)
		if err != nil {
			o.d.errorf(n.Line, path, "%q is not a duration (want e.g. \"200ms\", \"2s\", \"1m\")", n.Value)
			return
		}
		*dst = v
	}
}

// size reads a byte count: a number, or a string with a K, M or G suffix
// (powers of 1024), as cgroup's memory.max takes them.
func (o *obj) size(name string, dst *int64) {
	n, path := o.get(name, false)
	if n == nil {
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		if v, ok := o.d.integer(n, path); ok {
			*dst = v
		}
		return
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		o.d.errorf(n.Line, path, "want a size (bytes, or a number with K, M or G), got %s", describe(n))
		return
	}
	v, ok := ParseSize(n.Value)
	if !ok {
		o.d.errorf(n.Line, path, "%q is not a size (want bytes, or a number with K, M or G: \"512M\")", n.Value)
		return
	}
	*dst = v
}

// ParseSize reads a byte count: a number, or one with a K, M or G suffix
// (powers of 1024).
func ParseSize(s string) (int64, bool) {
	mult := int64(1)
	if i := len(s) - 1; i > 0 {
		switch s[i] {
		case 'K', 'k':
			mult = 1 << 10
		case 'M', 'm':
			mult = 1 << 20
		case 'G', 'g':
			mult = 1 << 30
		}
		if mult > 1 {
			s = s[:i]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v > (1<<63-1)/mult || v < 0 {
		return 0, false
	}
	return v * mult, true
}

// object reads a nested mapping field with read, when present.
func (o *obj) object(name string, required bool, read func(*obj)) {
	if n, path := o.get(name, required); n != nil {
		c := o.d.object(n, path)
		read(c)
		c.end()
	}
}

// list reads a sequence field, calling read for each element.
func (o *obj) list(name string, required bool, read func(n *yaml.Node, path string)) {
	n, path := o.get(name, required)
	if n == nil {
		return
	}
	if n.Kind != yaml.SequenceNode {
		o.d.errorf(n.Line, path, "want a list, got %s", describe(n))
		return
	}
	if required && len(n.Content) == 0 {
		o.d.errorf(n.Line, path, "must not be empty")
	}
	for i, e := range n.Content {
		e = deref(e)
		p := index(path, i)
		o.d.lines[p] = e.Line
		read(e, p)
	}
}

// mapping reads a mapping field whose keys are names the manifest chooses
// (environment variables), calling read for each entry.
func (o *obj) mapping(name string, read func(key string, n *yaml.Node, path string)) {
	n, path := o.get(name, false)
	if n == nil {
		return
	}
	c := o.d.object(n, path)
	for _, k := range c.keys {
		p := field(path, k.Value)
		v := c.vals[k.Value]
		o.d.lines[p] = k.Line
		read(k.Value, v, p)
	}
}

// str reads a string. Numbers are taken as written (`command: [sleep,
// 10]`); a boolean, a list or a mapping where a string belongs is a
// mistake.
func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!int" && n.Tag != "!!float") {
		d.errorf(n.Line, path, "want a string, got %s", describe(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) strs(n *yaml.Node, path string) []string {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n.Line, path, "want a list of strings, got %s", describe(n))
		return nil
	}
	out := []string{}
	for i, e := range n.Content {
		e = deref(e)
		p := index(path, i)
		d.lines[p] = e.Line
		if s, ok := d.str(e, p); ok {
			out = append(out, s)
		}
	}
	return out
}

func (d *decoder) integer(n *yaml.Node, path string) (int64, bool) {
	var v int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		d.errorf(n.Line, path, "want an integer, got %s", describe(n))
		return 0, false
	}
	return v, true
}

func (d *decoder) ints(n *yaml.Node, path string) []int {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n.Line, path, "want a list of integers, got %s", describe(n))
		return nil
	}
	var out []int
	for i, e := range n.Content {
		e = deref(e)
		p := index(path, i)
		d.lines[p] = e.Line
		if v, ok := d.integer(e, p); ok {
			out = append(out, int(v))
		} else {
			out = append(out, 0) // keeps the indexes of later elements
		}
	}
	return out
}

// deref follows an alias (*name) to the node its anchor marks.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// describe names what a node holds, for "want X, got Y".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "null"
		case "!!bool":
			return "a boolean (" + n.Value + ")"
		case "!!int", "!!float":
			return "a number (" + n.Value + ")"
		case "!!str":
			return strconv.Quote(n.Value)
		}
		return fmt.Sprintf("%s %q", n.Tag, n.Value)
	}
	return "an unreadable node"
}
