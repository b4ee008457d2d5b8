package supervisor

import (
	"context"
	"log/slog"
	"os"

	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/presets"
	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
)

// PolicyOptions are the policy a proxy serves: the engine's options, the
// presets it must keep serving, and whether to follow edits of its bundle
// directory.
type PolicyOptions struct {
	policies.Options
	// Presets are served: each must be in the bundle at boot
	// (policies.ErrNoPreset otherwise), and a reload that drops one is
	// rejected with the last good generation serving.
	Presets []string
	// Watch reloads a bundle directory when it changes.
	Watch bool
	// WatchEnded, when set, is told why the watch ended while the policy
	// still serves (its watcher closed): edits no longer reload.
	WatchEnded func(error)
}

// PolicySource is a bundle directory or archive, or the embedded presets
// when bundle is empty.
func PolicySource(bundle string) policies.Source {
	if bundle == "" {
		return policies.Source{FS: presets.FS}
	}
	return policies.Source{Path: bundle}
}

// PolicyFrom are the engine options for a policy as an operator gives it,
// in a pod manifest or as `--policy*` flags: the bundle, its pin, lock and
// signing key. Reading the key is its only error, left for the caller to
// name as its field or flag.
func PolicyFrom(pol manifest.Policy, log *slog.Logger) (policies.Options, error) {
	o := policies.Options{Source: PolicySource(pol.Bundle), PinnedSHA256: pol.SHA256, LockFile: pol.Lock, Quarantine: pol.Quarantine, Logger: log}
	if pol.PublicKey != "" {
		key, err := os.ReadFile(pol.PublicKey)
		if err != nil {
			return o, err
		}
		o.Verify = &policies.Verification{PublicKey: string(key), KeyID: pol.KeyID, Algorithm: pol.SigningAlg}
	}
	return o, nil
}

// OpenEngine loads, verifies and compiles the policy. A secret a served
// preset injects that this process's environment or files lack is
// reported when each generation loads, naming the rule, header and source,
// rather than found by the first request (which is still refused,
// secret_unavailable). It does not stop the proxy: a preset names every
// provider a kind may use, and an operator holding one key must still be
// able to run it.
func OpenEngine(ctx context.Context, o PolicyOptions, log *slog.Logger) (*policies.Engine, error) {
	served := map[string]bool{}
	for _, p := range o.Presets {
		served[p] = true
	}
	check := o.Check
	o.Check = func(ps []policies.Preset) error {
		for _, p := range ps {
			if served[p.Name] {
				if err := proxy.CheckSecrets(proxy.EnvSecrets{}, p); err != nil {
					log.Warn("requests that need these secrets will be refused (secret_unavailable)", "preset", p.Name, "err", err)
				}
			}
		}
		if check != nil {
			return check(ps)
		}
		return nil
	}
	if o.Logger == nil {
		o.Logger = log
	}
	engine, err := policies.New(ctx, o.Options)
	if err != nil {
		return nil, err
	}
	for _, p := range o.Presets {
		if err := engine.RequirePreset(p); err != nil {
			return nil, err
		}
	}
	if o.Watch && o.Source.Path != "" {
		// Asked for and not possible (inotify's limits), the watch
		// refuses the start: an operator's edit that tightens the
		// policy would otherwise never take effect, unsaid.
		ended, err := engine.Watch(ctx)
		if err != nil {
			return nil, err
		}
		go func() {
			if err := <-ended; err != nil {
				log.Error("policy watch stopped: edits of the bundle no longer reload", "err", err)
				if o.WatchEnded != nil {
					o.WatchEnded(err)
				}
			}
		}()
	}
	return engine, nil
}
