package yamlobj_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/yamlobj"
	"gopkg.in/yaml.v3"
)

type thing struct {
	Name  string
	Wait  time.Duration
	Size  int64
	Tags  []string
	Inner struct{ On bool }
	Env   map[string]string
}

// read decodes src as a thing the way a manifest reader does, then
// checks a value After decoding with At.
func read(src string) (*thing, error) {
	d := yamlobj.NewDecoder("t.yaml")
	doc := d.Document([]byte(src))
	if doc == nil {
		return nil, d.Err()
	}
	var t thing
	o := d.Object(doc, "")
	o.Str("name", true, &t.Name)
	o.Duration("wait", &t.Wait)
	o.Size("size", &t.Size)
	o.Strs("tags", false, &t.Tags)
	o.Object("inner", false, func(o *yamlobj.Obj) { o.Bool("on", &t.Inner.On) })
	o.Mapping("env", func(k string, n *yaml.Node, path string) {
		if v, ok := o.Decoder().Str(n, path); ok {
			if t.Env == nil {
				t.Env = map[string]string{}
			}
			t.Env[k] = v
		}
	})
	o.End()
	if t.Name == "bad" {
		d.At("name", "%q is reserved", t.Name)
	}
	if t.Wait != 0 {
		d.At("wait", "checked after decoding")
	}
	return &t, d.Err()
}

func TestDecode(t *testing.T) {
	// At after decoding reports at the field's line.
	got, err := read("name: x\nwait: 2s\nsize: 1K\ntags: [a, 1]\ninner: {on: true}\nenv: {A: b}\n")
	if !strings.Contains(err.Error(), "t.yaml:2: wait: checked after decoding") {
		t.Errorf("At on a read field: %v", err)
	}
	if got.Name != "x" || got.Wait != 2*time.Second || got.Size != 1024 || strings.Join(got.Tags, ",") != "a,1" || !got.Inner.On || got.Env["A"] != "b" {
		t.Errorf("read = %+v", got)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want []string // every error, in the order of the file
	}{
		{"", []string{"t.yaml: the manifest is empty"}},
		{"name: x\n---\nname: y\n", []string{"t.yaml:2: a second YAML document: a manifest is one document"}},
		{"name: [x\n", []string{"t.yaml:"}},
		{"- a\n", []string{"t.yaml:1: want a mapping, got a list"}},
		{"wait: 2\n", []string{
			"t.yaml:1: name: missing: the field is required",
			`t.yaml:1: wait: a number (2) is not a duration: write it with a unit, as "200ms" or "2s"`,
		}},
		{"name: bad\n", []string{`t.yaml:1: name: "bad" is reserved`}},
		// The duplicate makes name unreadable: At does not report it again.
		{"name: bad\nname: x\ncolour: red\ninner: {on: yes please}\nsize: 1Q\nwait: 1s\n", []string{
			"t.yaml:2: name: duplicate field (first at line 1)",
			"t.yaml:3: colour: unknown field (want one of: name, wait, size, tags, inner, env)",
			`t.yaml:4: inner.on: want true or false, got "yes please"`,
			`t.yaml:5: size: "1Q" is not a size`,
			"t.yaml:6: wait: checked after decoding",
		}},
		{"name: x\ntags: [a, {b: c}]\nenv: {A: [1]}\n", []string{
			"t.yaml:2: tags[1]: want a string, got a mapping",
			"t.yaml:3: env.A: want a string, got a list",
		}},
	} {
		_, err := read(tc.src)
		if err == nil {
			t.Errorf("read(%q) = nil, want errors", tc.src)
			continue
		}
		var fe *yamlobj.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("read(%q) = %v, want FieldErrors", tc.src, err)
		}
		got := strings.Split(err.Error(), "\n")
		if len(got) != len(tc.want) {
			t.Errorf("read(%q):\n%v\nwant %d errors", tc.src, err, len(tc.want))
		}
		for i, w := range tc.want {
			if i >= len(got) || !strings.HasPrefix(got[i], w) {
				t.Errorf("read(%q):\n%v\nwant line %d to start %q", tc.src, err, i, w)
				break
			}
		}
	}
}

func TestParseSize(t *testing.T) {
	for s, want := range map[string]int64{"512": 512, "2K": 2 << 10, "3m": 3 << 20, "1G": 1 << 30} {
		if got, ok := yamlobj.ParseSize(s); !ok || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "K", "-1", "1T", "99999999999G"} {
		if got, ok := yamlobj.ParseSize(s); ok {
			t.Errorf("ParseSize(%q) = %d, want refused", s, got)
		}
	}
}
