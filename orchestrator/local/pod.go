package local

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/adminclient"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
	"github.com/airlock-sandbox/airlock/policies"
)

// PodLauncher launches a job's sandbox in a running pod (`airlock up`),
// through its admin socket: in the pod's network and under its cgroup,
// decided by the pod's proxy with the spec's preset of the pod's bundle.
// The pod opens the spec's files. A pod that does not answer, or refuses,
// is an error: there is no fallback to a sandbox here.
type PodLauncher struct {
	Socket string
	// Policy is the hash of the bundle the spawn verified: a pod serving
	// another refuses, and the spawn fails with policies.ErrIntegrity.
	Policy string
}

// Launch starts s in the pod. Its connection to the pod is the sandbox's
// life line: should this process die, the pod stops the sandbox. The pod's
// refusal of the spec (a preset not in its bundle, a relative command, an
// ID running already) is a *spawn.UsageError; of its policy,
// policies.ErrIntegrity.
func (l PodLauncher) Launch(ctx context.Context, s Spec) (Sandbox, error) {
	sb, err := adminclient.Launch(ctx, l.Socket, adminclient.SandboxSpec{
		ID: s.ID, Preset: s.Preset, Kind: s.Kind, Policy: l.Policy, Command: s.Command, SHA256: s.SHA256, Env: s.Env, Dir: s.Dir, RW: s.RW, RO: s.RO,
		UID: s.UID, GID: s.GID, Stdout: s.Stdout, Stderr: s.Stderr, Audit: s.Audit,
	})
	var se *adminclient.StatusError
	switch {
	case err == nil:
		return sb, nil
	case errors.As(err, &se) && se.Status == http.StatusPreconditionFailed:
		return nil, fmt.Errorf("pod %s: %w: %w", l.Socket, policies.ErrIntegrity, err)
	case errors.As(err, &se) && se.Status >= 400 && se.Status < 500:
		return nil, &spawn.UsageError{Err: fmt.Errorf("pod %s: %w", l.Socket, err)}
	}
	return nil, fmt.Errorf("pod %s: %w", l.Socket, err)
}
