package main

import (
	"github.com/airlock-sandbox/airlock/orchestrator/local"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/spf13/pflag"
)

// podSocketFlag registers spawn's --pod-socket (AIRLOCK_POD_SOCKET).
func podSocketFlag(fl *pflag.FlagSet, socket *string) {
	fl.StringVar(socket, "pod-socket", "", "run a local sub-agent inside the running pod (airlock up) on this admin socket `PATH`, decided by the pod's proxy with the kind's preset; the pod must serve the bundle this spawn verified (no fallback)")
}

// podOr is the local substrate's launcher: the pod's on socket when one is
// given (its sandboxes are decided by the pod's bundle, which must be the
// one engine holds), else here.
func podOr(socket string, engine *policies.Engine, here local.Launcher) local.Launcher {
	if socket == "" {
		return here
	}
	return local.PodLauncher{Socket: socket, Policy: engine.Hash()}
}
