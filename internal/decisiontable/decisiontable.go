// Package decisiontable reads policies/testdata/decisions.yaml, the shared
// table of inputs and the decisions the embedded presets must give them.
// The engine's tests run it through Engine.Decide; the integration tests
// run it through `airlock policy eval` and a running proxy, and require the
// same answers from both.
package decisiontable

import (
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/policies"
	"gopkg.in/yaml.v3"
)

// Case is one row: an input written the way a client might send it (not
// canonically), and the decision wanted.
type Case struct {
	Note    string              `yaml:"note"`
	Preset  string              `yaml:"preset"`
	Exe     string              `yaml:"exe"`
	SHA256  string              `yaml:"sha256"`
	Phase   string              `yaml:"phase"`
	Host    string              `yaml:"host"`
	Port    int                 `yaml:"port"`
	Method  string              `yaml:"method"`
	Path    string              `yaml:"path"`
	Query   map[string][]string `yaml:"query"`
	Upgrade string              `yaml:"upgrade"`
	Want    struct {
		Reason  policies.Reason `yaml:"reason"`
		Rule    string          `yaml:"rule"`
		Inspect *bool           `yaml:"inspect"`
	} `yaml:"want"`
}

// Load reads the table strictly: a misspelt field is an error, not a case
// that silently asks less.
func Load(path string) ([]Case, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	dec := yaml.NewDecoder(fh)
	dec.KnownFields(true)
	var cases []Case
	if err := dec.Decode(&cases); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cases, nil
}

// Input is the case as the proxy asks it: port 443 and phase request unless
// the case says otherwise.
func (c Case) Input() *policies.Input {
	in := &policies.Input{
		Sandbox: policies.Sandbox{ID: "test", Kind: c.Preset, Preset: c.Preset},
		Process: policies.Process{PID: 1, Exe: c.Exe, SHA256: c.SHA256},
		Request: policies.Request{Phase: policies.PhaseRequest, Host: c.Host, Port: 443,
			Method: c.Method, Path: c.Path, Query: c.Query, Upgrade: c.Upgrade},
	}
	if c.Phase != "" {
		in.Request.Phase = policies.Phase(c.Phase)
	}
	if c.Port != 0 {
		in.Request.Port = c.Port
	}
	return in
}

// Matches reports whether d is the decision the case wants.
func (c Case) Matches(d policies.Decision) bool {
	return d.Reason == c.Want.Reason && (c.Want.Rule == "" || d.Rule == c.Want.Rule) &&
		(c.Want.Inspect == nil || d.Inspect == *c.Want.Inspect) && d.Allow == (c.Want.Reason == policies.ReasonAllowed)
}
