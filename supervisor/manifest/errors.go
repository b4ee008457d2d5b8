package manifest

import "github.com/airlock-sandbox/airlock/internal/yamlobj"

// FieldError is one problem in a manifest: where it is and what is wrong.
type FieldError = yamlobj.FieldError
