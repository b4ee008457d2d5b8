package gitsub

import (
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator/kind"
)

// Manifest is spawns/<id>/manifest.json: all the runner reads. Args are
// rendered already, with paths relative to the checkout's root (the runner
// runs there), so the runner interprets no template.
type Manifest struct {
	ID             string            `json:"id"`
	Kind           string            `json:"kind"`
	Binary         string            `json:"binary"`           // absolute, on the runner
	SHA256         string            `json:"sha256,omitempty"` // the binary's pin; the runner refuses another
	Args           []string          `json:"args"`
	Env            map[string]string `json:"env,omitempty"`
	Preset         string            `json:"preset"`
	TimeoutSeconds int64             `json:"timeout_seconds"`
	Tokens         int64             `json:"tokens"`        // the estimate reserved
	PolicySHA256   string            `json:"policy_sha256"` // the verified bundle's pin: airlock launch on the runner enforces it
	// ReservedDay is the UTC day the estimate is reserved on (Poll settles
	// there: the reservation may precede the ledger's queued line by a
	// midnight); empty for a manifest written before it was recorded.
	ReservedDay string `json:"reserved_day,omitempty"`
}

// Timeout is the kind's timeout.
func (m *Manifest) Timeout() time.Duration { return time.Duration(m.TimeoutSeconds) * time.Second }

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// check refuses a manifest the runner would refuse, before anything is
// pushed.
func (m *Manifest) check() error {
	if err := checkID(m.ID); err != nil {
		return err
	}
	switch {
	case m.Kind == "" || m.Preset == "":
		return fmt.Errorf("manifest of %s: kind %q, preset %q: want both", m.ID, m.Kind, m.Preset)
	case len(m.Binary) == 0 || m.Binary[0] != '/':
		return fmt.Errorf("manifest of %s: binary %q: want an absolute path", m.ID, m.Binary)
	case m.TimeoutSeconds <= 0:
		return fmt.Errorf("manifest of %s: timeout %ds: want a positive timeout", m.ID, m.TimeoutSeconds)
	case m.PolicySHA256 == "":
		return fmt.Errorf("manifest of %s: no policy pin: the runner would enforce an unverified bundle", m.ID)
	}
	for k := range m.Env {
		if !envName.MatchString(k) {
			return fmt.Errorf("manifest of %s: env %q is not a variable name", m.ID, k)
		}
	}
	return nil
}

// Files are what a spawn branch carries, by name in spawns/<id>/.
type Files struct {
	Manifest Manifest
	Prompt   []byte // prompt.txt, rendered
	Task     []byte // task, the input as given
	KindYAML []byte // kind.yaml, the kind's manifest as read
}

func (f *Files) encode() (map[string][]byte, error) {
	if err := f.Manifest.check(); err != nil {
		return nil, err
	}
	m, err := json.MarshalIndent(f.Manifest, "", "  ")
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"manifest.json": append(m, '\n'),
		"prompt.txt":    f.Prompt,
		"task":          f.Task,
		"kind.yaml":     f.KindYAML,
	}, nil
}

// NewFiles is what spawn/<id> carries for kind k: the rendered prompt and
// the task as given, the kind as read, and the manifest: the arguments
// rendered with paths relative to the checkout (where the runner runs
// them; .Dir is spawns/<id>/work, the one directory the runner lets the
// sub-agent write, as the local substrate's work/), pinned to the verified
// bundle's hash policyPin.
func NewFiles(k *kind.Kind, id string, prompt, task []byte, policyPin string) (*Files, error) {
	dir := Dir(id)
	args, err := k.RenderArgs(kind.ArgVars{ID: id, Dir: dir + "/work", PromptFile: dir + "/prompt.txt", TaskFile: dir + "/task"})
	if err != nil {
		return nil, fmt.Errorf("kind %s: args: %w", k.Name, err)
	}
	f := &Files{
		Manifest: Manifest{
			ID: id, Kind: k.Name, Binary: k.Binary, SHA256: k.SHA256, Args: args, Env: k.Env,
			Preset: k.Preset, TimeoutSeconds: int64((k.Timeout + time.Second - 1) / time.Second), Tokens: k.Tokens,
			PolicySHA256: policyPin,
		},
		Prompt: prompt, Task: task, KindYAML: k.Source,
	}
	return f, f.Manifest.check()
}
