// Package presets holds the Rego presets, one per sub-agent kind plus the
// strict, standard and permissive modes and the demo pod's shim (demo), and
// the action gate's policy (gate), embedded as airlock's default policy
// bundle. The .rego files are the product: security reviewers read,
// test (`airlock policy test`, `opa test`) and pin them.
package presets

import "embed"

// FS is the default bundle: every preset, its tests and the shared blocks.
//
//go:embed *.rego
var FS embed.FS
