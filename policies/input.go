package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Phase says which question is asked: may this connection be opened
// (connect), or may this request be sent (request).
type Phase string

const (
	PhaseConnect Phase = "connect"
	PhaseRequest Phase = "request"
)

// Input is what a decision is asked about. The policy sees part of it as
// `input`: the fields the library reads (decidedFields), which value builds
// and the decision cache keys on; nothing else is computed for it. Sandbox
// and Process.PID name the connection on the audit line and Sandbox.Preset
// selects the preset; no rule reads them. Fields are added here, never
// repurposed, so presets keep working.
type Input struct {
	Sandbox Sandbox `json:"sandbox"`
	Process Process `json:"process"`
	Request Request `json:"request"`
}

// Sandbox names where the connection came from. Preset selects the policy
// package (data.airlock.presets.<preset>); Kind is the sub-agent kind.
type Sandbox struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"`
	Preset string `json:"preset"`
}

// Process is the program that owns the client socket, as the kernel names it:
// Exe is the /proc/<pid>/exe target and SHA256 the digest of that file.
type Process struct {
	PID    int    `json:"pid"`
	Exe    string `json:"exe"`
	SHA256 string `json:"sha256"`
}

// Request is what is being asked for. Method, Path and Query are empty in
// the connect phase; the proxy sees them in plain HTTP and in the TLS it
// terminates.
type Request struct {
	Phase  Phase               `json:"phase"`
	Host   string              `json:"host"`
	Port   int                 `json:"port"`
	Method string              `json:"method,omitempty"`
	Path   string              `json:"path,omitempty"`
	Query  map[string][]string `json:"query,omitempty"`
	// Upgrade is "websocket" for a WebSocket upgrade, the one protocol
	// switch the proxy relays: after it the connection carries frames both
	// ways that no rule sees, so a rule must allow it by name.
	Upgrade string `json:"upgrade,omitempty"`
	// SlashPath is set by Canonicalize when the path has an encoded slash
	// (%2F): Path with each %2F kept inside its segment, as servers that
	// route a%2Fb as one segment (GitLab project ids) read it. Deny rules
	// match it besides Path, so that neither reading escapes them. A
	// second Canonicalize, of the decoded Path, keeps it.
	SlashPath string `json:"slash_path,omitempty"`
}

// Canonicalize rewrites host, method and path into the single spelling rules
// are written against, and refuses (ErrInvalidRequest) what cannot be read
// one way: a path servers read differently (checkUnambiguous), a query
// value a server may cut or map. Decide calls it, so every caller of the
// engine (the proxy, `airlock policy eval` and explain) refuses the same
// inputs. Path is read as sent, escaped, and decoded once: canonicalising
// again is a no-op unless the decoded path holds a '%' or a ';' (from %25
// or %3B), which a second pass reads as an escape or a parameter.
func (in *Input) Canonicalize() error {
	r := &in.Request
	if r.Phase != PhaseConnect && r.Phase != PhaseRequest {
		return invalid("phase %q is neither connect nor request", r.Phase)
	}
	if r.Port < 1 || r.Port > 65535 {
		return invalid("port %d out of range", r.Port)
	}
	h, err := CanonicalHost(r.Host)
	if err != nil {
		return err
	}
	r.Host = h
	if r.Phase == PhaseConnect {
		return nil
	}
	if r.Method, err = CanonicalMethod(r.Method); err != nil {
		return err
	}
	if err := checkQuerySize(r.Query); err != nil {
		return err
	}
	if err := checkQuery(r.Query); err != nil {
		return err
	}
	if r.Upgrade = strings.ToLower(r.Upgrade); r.Upgrade != "" && r.Upgrade != "websocket" {
		return invalid("upgrade %q: only websocket is relayed", r.Upgrade)
	}
	raw := r.Path
	if err := checkPathSize(raw); err != nil {
		return err
	}
	if err := checkUnambiguous(raw); err != nil {
		return err
	}
	if r.Path, err = CanonicalPath(raw); err != nil {
		return err
	}
	if strings.Contains(strings.ToLower(raw), "%2f") {
		kept := strings.NewReplacer("%2F", "%252F", "%2f", "%252F").Replace(raw)
		if r.SlashPath, err = CanonicalPath(kept); err != nil {
			return err
		}
	}
	return nil
}

// value builds the policy's `input` directly: exactly decidedFields, the
// fields the library may read (TestValueIsWhatTheLibraryReads). Going
// through encoding/json and back would cost more than the policy
// evaluation itself.
func (in *Input) value() ast.Value {
	r := &in.Request
	query := ast.NewObject()
	for k, vs := range r.Query {
		query.Insert(ast.StringTerm(k), stringArray(vs))
	}
	return ast.NewObject(
		item("process", ast.ObjectTerm(
			item("exe", ast.StringTerm(in.Process.Exe)),
			item("sha256", ast.StringTerm(in.Process.SHA256)),
		)),
		item("request", ast.ObjectTerm(
			item("phase", ast.StringTerm(string(r.Phase))),
			item("host", ast.StringTerm(r.Host)),
			item("port", ast.IntNumberTerm(r.Port)),
			item("method", ast.StringTerm(r.Method)),
			item("path", ast.StringTerm(r.Path)),
			item("query", ast.NewTerm(query)),
			item("upgrade", ast.StringTerm(r.Upgrade)),
			item("slash_path", ast.StringTerm(r.SlashPath)),
		)),
	)
}

func item(k string, v *ast.Term) [2]*ast.Term { return ast.Item(ast.StringTerm(k), v) }

func stringArray(vs []string) *ast.Term {
	ts := make([]*ast.Term, len(vs))
	for i, v := range vs {
		ts[i] = ast.StringTerm(v)
	}
	return ast.ArrayTerm(ts...)
}

// DecodeInput reads one JSON input document strictly, as `airlock policy
// eval` and explain take it. encoding/json alone would match "Request" or
// "HOST" to a field, drop an unknown one and stop at the end of the first
// document: the decision would be about an input other than the one
// written. So a field not spelt exactly as Input's JSON names it, or
// anything after the document, is an error. An empty document is io.EOF.
func DecodeInput(r io.Reader) (*Input, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("data after the input document at offset %d: give one JSON document", dec.InputOffset())
	}
	if err := exactKeys(doc, reflect.TypeFor[Input](), ""); err != nil {
		return nil, err
	}
	if err := noDuplicateKeys(raw); err != nil {
		return nil, err
	}
	var in Input
	dec = json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, err
	}
	return &in, nil
}

// noDuplicateKeys refuses a JSON document with an object that names a key
// twice, at any depth: encoding/json takes the last value (two objects
// merged), so the decision would be on an input other than the one
// written ("method": "DELETE" after "method": "GET").
func noDuplicateKeys(raw []byte) error {
	type object struct {
		keys    map[string]bool
		wantKey bool
	}
	var open []*object // nil for an array
	dec := json.NewDecoder(bytes.NewReader(raw))
	valueDone := func() {
		if n := len(open); n > 0 && open[n-1] != nil {
			open[n-1].wantKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				open = append(open, &object{keys: map[string]bool{}, wantKey: true})
			case '[':
				open = append(open, nil)
			default: // '}' or ']': a value of the one around it ends
				open = open[:len(open)-1]
				valueDone()
			}
		case string:
			if n := len(open); n > 0 && open[n-1] != nil && open[n-1].wantKey {
				o := open[n-1]
				if o.keys[t] {
					return fmt.Errorf("the key %q is given twice in one object: give it once", t)
				}
				o.keys[t], o.wantKey = true, false
				continue
			}
			valueDone()
		default:
			valueDone()
		}
	}
}

// exactKeys refuses an object key of doc that is not one of t's JSON field
// names exactly, at any depth where t is a struct; where is the path to
// doc ("" at the top).
func exactKeys(doc any, t reflect.Type, where string) error {
	obj, ok := doc.(map[string]any)
	if !ok || t.Kind() != reflect.Struct {
		return nil // not an object, or a map: the decoder judges it
	}
	names := jsonFields(t)
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the same key named every time
	for _, k := range keys {
		if !names[k] {
			want := slices.Sorted(maps.Keys(names))
			if where != "" {
				where += ": "
			}
			return fmt.Errorf("%sunknown field %q (want one of %s, spelt exactly)", where, k, strings.Join(want, ", "))
		}
	}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if err := exactKeys(obj[name], f.Type, strings.TrimPrefix(where+"."+name, ".")); err != nil {
			return err
		}
	}
	return nil
}
