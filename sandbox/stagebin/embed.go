//go:build airlock_stage

package stagebin

import _ "embed"

// Binary is sandbox/stagecmd, built without this tag (so it re-executes
// itself) by `make build` before airlock.
//
//go:embed airlock-stage
var Binary []byte
