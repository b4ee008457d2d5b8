// Package yamlobj decodes YAML manifests strictly, from yaml.v3 nodes:
// fields are taken by name and any field nobody took is an error, every
// error names the file, the line and the field path
// (`pod.yaml:14: services[1].health.interval: "1x" is not a duration`),
// and one pass reports every problem. The pod manifest
// (supervisor/manifest) and the orchestrator's kinds read through it.
package yamlobj

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Decoder reads a manifest's YAML nodes into Go values. Walking the nodes
// (rather than yaml's struct decoding) gives every error the line of the
// value it is about, and lets one pass report every problem.
type Decoder struct{ *Report }

// NewDecoder is a decoder whose errors name file.
func NewDecoder(file string) *Decoder { return &Decoder{NewReport(file)} }

// Document parses data, which must be exactly one YAML document, and
// returns its root node (aliases followed), its line recorded for the
// path "". nil when it cannot be parsed (reported).
func (d *Decoder) Document(data []byte) *yaml.Node {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.Errorf(0, "", "the manifest is empty")
		} else {
			d.Syntax(err)
		}
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			d.Syntax(err)
		} else {
			d.Errorf(extra.Line, "", "a second YAML document: a manifest is one document")
		}
		return nil
	}
	d.Lines[""] = doc.Content[0].Line
	return Deref(doc.Content[0])
}

// yamlLine finds the line in a yaml.v3 syntax error ("yaml: line 3: ...").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// Syntax reports a yaml.v3 parse error at its line.
func (d *Decoder) Syntax(err error) {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		d.Errorf(line, "", "%s", m[2])
		return
	}
	d.Errorf(0, "", "%v", err)
}

// Obj is one YAML mapping being read: its fields are taken by name, and
// End reports those nobody took, so a misspelt field is an error rather
// than a silently ignored setting.
type Obj struct {
	d     *Decoder
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

// Decoder is the decoder reading o.
func (o *Obj) Decoder() *Decoder { return o.d }

// Object reads n as a mapping. A node that is not one is reported and
// read as an empty mapping, so its required fields are not reported too.
func (d *Decoder) Object(n *yaml.Node, path string) *Obj {
	o := &Obj{d: d, path: path, line: n.Line, key: map[string]*yaml.Node{}, vals: map[string]*yaml.Node{}}
	if n.Kind != yaml.MappingNode {
		d.Errorf(n.Line, path, "want a mapping, got %s", Describe(n))
		o.broken = true
		return o
	}
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], Deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			d.Errorf(k.Line, path, "field names must be plain strings (no merge keys or complex keys)")
			continue
		}
		if l, dup := first[k.Value]; dup {
			d.Errorf(k.Line, Field(path, k.Value), "duplicate field (first at line %d)", l)
			continue
		}
		first[k.Value] = k.Line
		o.keys = append(o.keys, k)
		o.key[k.Value] = k
		o.vals[k.Value] = v
	}
	return o
}

// Get takes a field: its value node (nil when absent or null) and path.
// A required field that is absent or null is reported.
func (o *Obj) Get(name string, required bool) (*yaml.Node, string) {
	o.known = append(o.known, name)
	path := Field(o.path, name)
	v := o.vals[name]
	if v == nil || IsNull(v) {
		if required && !o.broken {
			line := o.line
			if v != nil {
				line = v.Line
			}
			o.d.Errorf(line, path, "missing: the field is required")
		}
		return nil, path
	}
	// A field's line is its key's: for a block mapping or list, the
	// value starts on the next line.
	o.d.Lines[path] = o.key[name].Line
	return v, path
}

// End reports the fields no one asked for.
func (o *Obj) End() {
	for _, k := range o.keys {
		if !slices.Contains(o.known, k.Value) {
			o.d.Errorf(k.Line, Field(o.path, k.Value), "unknown field (want one of: %s)", strings.Join(o.known, ", "))
		}
	}
}

// Typed fields. Each leaves *dst unchanged (its default) when the field is
// absent, and reports a value of the wrong type.

// Str reads a string field. An empty string is refused: written out it
// would either mean the default, which leaving the field out says, or
// nothing at all.
func (o *Obj) Str(name string, required bool, dst *string) {
	if n, path := o.Get(name, required); n != nil {
		if s, ok := o.d.Str(n, path); ok {
			if s == "" {
				o.d.Errorf(n.Line, path, "must not be empty (leave the field out for its default)")
				return
			}
			*dst = s
		}
	}
}

// Strs reads a list of strings.
func (o *Obj) Strs(name string, required bool, dst *[]string) {
	if n, path := o.Get(name, required); n != nil {
		*dst = o.d.Strs(n, path)
		if required && len(*dst) == 0 && !o.d.bad[path] {
			o.d.Errorf(n.Line, path, "must not be empty")
		}
	}
}

// Int reads an integer.
func (o *Obj) Int(name string, required bool, dst *int) {
	if n, path := o.Get(name, required); n != nil {
		if v, ok := o.d.Integer(n, path); ok {
			*dst = int(v)
		}
	}
}

// Int64 reads an integer.
func (o *Obj) Int64(name string, dst *int64) {
	if n, path := o.Get(name, false); n != nil {
		if v, ok := o.d.Integer(n, path); ok {
			*dst = v
		}
	}
}

// Float reads a number.
func (o *Obj) Float(name string, dst *float64) {
	if n, path := o.Get(name, false); n != nil {
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!float" && n.Tag != "!!int") {
			o.d.Errorf(n.Line, path, "want a number, got %s", Describe(n))
			return
		}
		v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil {
			o.d.Errorf(n.Line, path, "%q is not a number", n.Value)
			return
		}
		*dst = v
	}
}

// Bool reads true or false.
func (o *Obj) Bool(name string, dst *bool) {
	if n, path := o.Get(name, false); n != nil {
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			o.d.Errorf(n.Line, path, "want true or false, got %s", Describe(n))
			return
		}
		*dst = n.Value == "true"
	}
}

// Duration reads a duration written with a unit ("2s").
func (o *Obj) Duration(name string, dst *time.Duration) {
	if n, path := o.Get(name, false); n != nil {
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			o.d.Errorf(n.Line, path, "%s is not a duration: write it with a unit, as \"200ms\" or \"2s\"", Describe(n))
			return
		}
		v, err := time.ParseDuration(n.Value)
		if err != nil {
			o.d.Errorf(n.Line, path, "%q is not a duration (want e.g. \"200ms\", \"2s\", \"1m\")", n.Value)
			return
		}
		*dst = v
	}
}

// Size reads a byte count: a number, or a string with a K, M or G suffix
// (powers of 1024), as cgroup's memory.max takes them.
func (o *Obj) Size(name string, dst *int64) {
	n, path := o.Get(name, false)
	if n == nil {
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		if v, ok := o.d.Integer(n, path); ok {
			*dst = v
		}
		return
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		o.d.Errorf(n.Line, path, "want a size (bytes, or a number with K, M or G), got %s", Describe(n))
		return
	}
	v, ok := ParseSize(n.Value)
	if !ok {
		o.d.Errorf(n.Line, path, "%q is not a size (want bytes, or a number with K, M or G: \"512M\")", n.Value)
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

// Object reads a nested mapping field with read, when present.
func (o *Obj) Object(name string, required bool, read func(*Obj)) {
	if n, path := o.Get(name, required); n != nil {
		c := o.d.Object(n, path)
		read(c)
		c.End()
	}
}

// List reads a sequence field, calling read for each element.
func (o *Obj) List(name string, required bool, read func(n *yaml.Node, path string)) {
	n, path := o.Get(name, required)
	if n == nil {
		return
	}
	if n.Kind != yaml.SequenceNode {
		o.d.Errorf(n.Line, path, "want a list, got %s", Describe(n))
		return
	}
	if required && len(n.Content) == 0 {
		o.d.Errorf(n.Line, path, "must not be empty")
	}
	for i, e := range n.Content {
		e = Deref(e)
		p := Index(path, i)
		o.d.Lines[p] = e.Line
		read(e, p)
	}
}

// Mapping reads a mapping field whose keys are names the manifest chooses
// (environment variables), calling read for each entry.
func (o *Obj) Mapping(name string, read func(key string, n *yaml.Node, path string)) {
	n, path := o.Get(name, false)
	if n == nil {
		return
	}
	c := o.d.Object(n, path)
	for _, k := range c.keys {
		p := Field(path, k.Value)
		v := c.vals[k.Value]
		o.d.Lines[p] = k.Line
		read(k.Value, v, p)
	}
}

// Str reads a string. Numbers are taken as written (`command: [sleep,
// 10]`); a boolean, a list or a mapping where a string belongs is a
// mistake.
func (d *Decoder) Str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!int" && n.Tag != "!!float") {
		d.Errorf(n.Line, path, "want a string, got %s", Describe(n))
		return "", false
	}
	return n.Value, true
}

// Strs reads a list of strings.
func (d *Decoder) Strs(n *yaml.Node, path string) []string {
	if n.Kind != yaml.SequenceNode {
		d.Errorf(n.Line, path, "want a list of strings, got %s", Describe(n))
		return nil
	}
	out := []string{}
	for i, e := range n.Content {
		e = Deref(e)
		p := Index(path, i)
		d.Lines[p] = e.Line
		if s, ok := d.Str(e, p); ok {
			out = append(out, s)
		}
	}
	return out
}

// Integer reads an integer.
func (d *Decoder) Integer(n *yaml.Node, path string) (int64, bool) {
	var v int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		d.Errorf(n.Line, path, "want an integer, got %s", Describe(n))
		return 0, false
	}
	return v, true
}

// Ints reads a list of integers.
func (d *Decoder) Ints(n *yaml.Node, path string) []int {
	if n.Kind != yaml.SequenceNode {
		d.Errorf(n.Line, path, "want a list of integers, got %s", Describe(n))
		return nil
	}
	var out []int
	for i, e := range n.Content {
		e = Deref(e)
		p := Index(path, i)
		d.Lines[p] = e.Line
		if v, ok := d.Integer(e, p); ok {
			out = append(out, int(v))
		} else {
			out = append(out, 0) // keeps the indexes of later elements
		}
	}
	return out
}

// Deref follows an alias (*name) to the node its anchor marks.
func Deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// IsNull says whether n is YAML's null.
func IsNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// Describe names what a node holds, for "want X, got Y".
func Describe(n *yaml.Node) string {
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
