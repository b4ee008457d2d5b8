package local

import (
	"context"
	"time"
)

// Launcher starts a job's sandbox. Two: in this process, through the
// supervisor's composition with the engine the spawn already verified
// (cmd/airlock provides it: orchestrator must not import supervisor); and
// in a running pod, through its admin socket (PodLauncher, pod.go).
type Launcher interface {
	Launch(ctx context.Context, s Spec) (Sandbox, error)
}

// Spec is one sub-agent's sandbox.
type Spec struct {
	ID      string   // "spawn-<task>": its cgroup, decisions and audit lines
	Preset  string   // decided by this preset of the verified bundle
	Kind    string   // the sub-agent's kind: what its audit lines call it
	Command []string // absolute binary, then its rendered args
	// SHA256 pins Command[0] (the kind's binary.sha256; "" unpinned):
	// the sandbox checks it on the very file it execs, so a binary
	// swapped after the kind's Check is refused, never run.
	SHA256   string
	Env      []string // KEY=VALUE: the kind's env (the sandbox sets its own proxy/CA variables)
	Dir      string   // its working directory: the job's work dir
	RW       []string // writable paths (the work dir)
	RO       []string // readable paths (prompt.txt, task, ...)
	UID, GID int
	// Files the launcher opens (as root) and the sandbox's output and
	// audit lines go to: absolute paths in the job's directory, 0600,
	// created anew.
	Stdout, Stderr, Audit string
}

// Sandbox is a launched sub-agent.
type Sandbox interface {
	// Wait returns the command's exit code (128+n for a signal), or an
	// error when the sandbox could not run it (setup failed: say why).
	Wait() (int, error)
	// Stop ends it: SIGTERM to the command, then after grace every
	// process of the sandbox killed (its cgroup); Wait then returns.
	// Safe to call more than once and after exit.
	Stop(grace time.Duration)
}
