package supervisor

import (
	"fmt"
	"os"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/trusted"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
)

// readSecrets reads a service's secrets from the supervisor's environment
// or files at boot, as NAME=VALUE entries for its environment. A secret
// that cannot be read fails the boot: a service started without its
// credential would fail later and further from the cause. Values are never
// logged; errors name the secret and its source only.
func readSecrets(secrets map[string]manifest.Secret) ([]string, error) {
	var out []string
	for name, s := range secrets {
		var val string
		switch {
		case s.Env != "":
			v, ok := os.LookupEnv(s.Env)
			if !ok || v == "" {
				return nil, fmt.Errorf("secret %s: the supervisor's environment has no %s", name, s.Env)
			}
			val = v
		default:
			// Read as root into a sandboxed service's environment: a
			// file, or a directory above it, another user may write
			// could be made a link to one only root may read.
			if err := trusted.Path(s.File); err != nil {
				return nil, fmt.Errorf("secret %s: %w", name, err)
			}
			raw, err := os.ReadFile(s.File)
			if err != nil {
				return nil, fmt.Errorf("secret %s: %w", name, err)
			}
			val = strings.TrimRight(string(raw), "\r\n")
			if val == "" {
				return nil, fmt.Errorf("secret %s: %s is empty", name, s.File)
			}
		}
		out = append(out, name+"="+val)
	}
	return out, nil
}
