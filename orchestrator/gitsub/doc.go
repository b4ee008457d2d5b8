// Package gitsub is the orchestrator's git-branch substrate: a spawn becomes
// a branch spawn/<id> on a configured remote holding spawns/<id>/ (the
// rendered prompt, the task, the kind's snapshot and manifest.json, what the
// runner needs), and a dispatcher (a command, or GitHub's workflow_dispatch)
// starts a runner somewhere that runs the sub-agent and commits result.json
// back to the same branch. The branch is the job record: no queue service,
// and the result survives the loss of the local spawn directory.
//
// The runner (orchestrator/runner/airlock-spawn-runner.sh) runs the
// sub-agent under `airlock launch --preset` when airlock is on the runner, so
// the kind's egress policy holds off this host too; the manifest carries the
// policy bundle's pin so that runner refuses any other bundle.
//
// Sync spawns poll the branch until the result appears or the kind's
// timeout plus a grace passes; async spawns are reconciled later by Poll,
// and GC deletes the branches of finished tasks once their retention ends.
package gitsub
