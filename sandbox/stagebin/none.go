//go:build !airlock_stage

package stagebin

// Binary is empty: the sandbox re-executes the airlock binary itself.
var Binary []byte
