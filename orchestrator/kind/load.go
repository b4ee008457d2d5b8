package kind

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/trusted"
	"github.com/airlock-sandbox/airlock/internal/yamlobj"
	"github.com/airlock-sandbox/airlock/sandbox"
	"gopkg.in/yaml.v3"
)

var (
	namePattern   = regexp.MustCompile(`^[a-z0-9-]+$`)
	presetPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	envPattern    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	hexPattern    = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Load reads dir/<name>.yaml. A name that is not [a-z0-9-]+ is refused
// before any file is opened, so a kind cannot name a path. The file must
// be trusted.Path's, as the budget's limit file is: a kind names the
// preset and the binaries its sub-agents run with, and one another user
// could have written (an agent, in a home it made or may write) would
// choose them for itself.
func Load(dir, name string) (*Kind, error) {
	if !namePattern.MatchString(name) {
		return nil, fmt.Errorf("kind %q: want lower-case letters, digits and - only", name)
	}
	path := filepath.Join(dir, name+".yaml")
	if err := trusted.Path(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("kind %s: refusing: %w", path, err)
	}
	return LoadFile(path)
}

// LoadFile reads, parses and validates the kind manifest at path; its
// name must be the file's base name.
func LoadFile(path string) (*Kind, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kind: %w", err)
	}
	d := yamlobj.NewDecoder(path)
	k := decode(d, data)
	if k == nil {
		return nil, d.Err()
	}
	k.File, k.Source, k.lines = path, data, d.Lines
	validate(k, d.Report, strings.TrimSuffix(filepath.Base(path), ".yaml"))
	if err := d.Err(); err != nil {
		return nil, err
	}
	return k, nil
}

// List returns the names of the kinds in dir (<name>.yaml files), sorted;
// a missing dir has none.
func List(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kinds: %w", err)
	}
	var names []string
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".yaml")
		if ok && !e.IsDir() && namePattern.MatchString(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// decode reads the document's fields; nil when it is not YAML.
func decode(d *yamlobj.Decoder, data []byte) *Kind {
	doc := d.Document(data)
	if doc == nil {
		return nil
	}
	k := &Kind{}
	root := d.Object(doc, "")
	root.Str("name", true, &k.Name)
	root.Object("binary", true, func(o *yamlobj.Obj) {
		o.Str("path", true, &k.Binary)
		o.Str("sha256", false, &k.SHA256)
	})
	root.Strs("args", false, &k.Args)
	root.Str("preset", true, &k.Preset)
	root.Str("substrate", true, &k.Substrate)
	root.Duration("timeout", &k.Timeout)
	root.Int64("tokens", &k.Tokens)
	root.Mapping("env", func(key string, n *yaml.Node, path string) {
		if v, ok := d.Str(n, path); ok {
			if k.Env == nil {
				k.Env = map[string]string{}
			}
			k.Env[key] = v
		}
	})
	root.Str("prompt", true, &k.Prompt)
	root.End()
	return k
}

// validate checks the decoded values, each problem at its field.
func validate(k *Kind, r *yamlobj.Report, base string) {
	switch {
	case k.Name == "":
	case !namePattern.MatchString(k.Name):
		r.At("name", "%q: want lower-case letters, digits and - only", k.Name)
	case k.Name != base:
		r.At("name", "%q must be the file's base name %q", k.Name, base)
	}
	if k.Binary != "" && !filepath.IsAbs(k.Binary) {
		r.At("binary.path", "%q is not absolute: a kind pins its binary, never a PATH lookup", k.Binary)
	}
	if k.SHA256 != "" {
		k.SHA256 = strings.ToLower(strings.TrimPrefix(k.SHA256, "sha256:"))
		if !hexPattern.MatchString(k.SHA256) {
			r.At("binary.sha256", "want 64 hex digits (sha256sum's output)")
		}
	}
	if k.Preset != "" && !presetPattern.MatchString(k.Preset) {
		r.At("preset", "%q is not a preset name", k.Preset)
	}
	if k.Substrate != "" && k.Substrate != Local && k.Substrate != Git {
		r.At("substrate", "%q: want %s or %s", k.Substrate, Local, Git)
	}
	if !r.Given("timeout") {
		r.At("timeout", "missing: the field is required (e.g. \"20m\")")
	} else if k.Timeout <= 0 {
		r.At("timeout", "%s: want a positive duration", k.Timeout)
	}
	if !r.Given("tokens") {
		r.At("tokens", "missing: the field is required (the estimate reserved against the daily budget)")
	} else if k.Tokens <= 0 {
		r.At("tokens", "%d: want a positive estimate", k.Tokens)
	}
	for name := range k.Env {
		path := yamlobj.Field("env", name)
		switch {
		case !envPattern.MatchString(name):
			r.At(path, "%q is not an environment variable name", name)
		case sandbox.IsReservedEnv(name):
			r.At(path, "%s is the sandbox's (its proxy and CA): a kind cannot set it", name)
		}
	}
	// Templates are parsed and tried on empty data now, so a typo or a
	// field the data does not have is the manifest's error, not a spawn's.
	if k.Prompt != "" && !r.Failed("prompt") {
		if _, err := render("prompt", k.Prompt, Task{}); err != nil {
			r.At("prompt", "%v", err)
		}
	}
	for i, a := range k.Args {
		if _, err := render("args", a, ArgVars{}); err != nil {
			r.At(yamlobj.Index("args", i), "%v", err)
		}
	}
}
