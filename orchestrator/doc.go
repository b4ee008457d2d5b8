// Package orchestrator spawns sub-agents as a policy-aware client: kind
// manifests, daily token budget, append-only task ledger, substrates and the
// action gate.
package orchestrator
