// Package kind reads the orchestrator's kinds: one YAML manifest per kind
// of sub-agent, kinds/<name>.yaml, pinning the binary, its arguments, the
// preset that decides its egress, the default substrate, the timeout, the
// token estimate and the prompt template. Adding a kind is adding files,
// never a rebuild.
//
// Reading is strict, as the pod manifest's (internal/yamlobj): an unknown
// field, a missing required field, a value of the wrong type or an invalid
// value (a relative binary, a template that does not parse or names a
// field the task does not have) is an error naming the file, the line and
// the field. A kind that loads is then Checked against the verified bundle
// and the disk: its preset must be in the bundle and, on the local
// substrate, its binary present, executable and, when pinned, the pinned
// one (on git the runner's host checks the binary).
package kind

import "time"

// Kind is one kind of sub-agent, as its manifest declares it.
type Kind struct {
	Name string
	// Binary is the sub-agent's executable (binary.path, absolute).
	Binary string
	// SHA256 pins Binary's content (binary.sha256, lower-case hex); ""
	// when not pinned.
	SHA256 string
	// Args are the arguments, text/templates over ArgVars.
	Args []string
	// Preset decides the sub-agent's egress; it must be in the verified
	// bundle (CheckPreset).
	Preset string
	// Substrate is where the kind runs unless a spawn says otherwise:
	// "local" or "git".
	Substrate string
	Timeout   time.Duration
	// Tokens is the estimate reserved against the daily budget.
	Tokens int64
	// Env is added to the sub-agent's environment.
	Env map[string]string
	// Prompt is the prompt's text/template source, over Task.
	Prompt string
	// File is the manifest's path; Source the manifest as read (a spawn
	// snapshots it as kind.yaml).
	File   string
	Source []byte

	// lines are the fields' lines, for errors found after loading.
	lines map[string]int
}

// Task is the prompt template's data.
type Task struct{ ID, Kind, Text string }

// ArgVars are the argument templates' data: the task id, the sub-agent's
// directory, and the files holding its rendered prompt and its task.
type ArgVars struct{ ID, Dir, PromptFile, TaskFile string }

// The substrates a kind may name.
const (
	Local = "local"
	Git   = "git"
)
