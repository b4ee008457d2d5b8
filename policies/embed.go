package policies

import "embed"

// libFS is the shared Rego library. A bundle that does not bring its own
// airlock.lib package gets this one, and it is hashed with the bundle.
//
//go:embed lib/*.rego
var libFS embed.FS
