package main

import (
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envKnobs maps every AIRLOCK_* environment variable to the flag it sets.
// One registry, so `airlock` can log the knobs in force and nothing reads
// the environment behind the operator's back. A flag given on the command
// line wins over its variable.
var envKnobs = map[string]string{
	"AIRLOCK_POLICY":             "policy",
	"AIRLOCK_POLICY_SHA256":      "policy-sha256",
	"AIRLOCK_POLICY_LOCK":        "policy-lock",
	"AIRLOCK_POLICY_PUBLIC_KEY":  "policy-public-key",
	"AIRLOCK_POLICY_KEY_ID":      "policy-key-id",
	"AIRLOCK_POLICY_SIGNING_ALG": "policy-signing-alg",
	"AIRLOCK_POLICY_QUARANTINE":  "policy-quarantine",
	"AIRLOCK_LOG_LEVEL":          "log-level",
	"AIRLOCK_ADMIN_SOCKET":       "socket",
	"AIRLOCK_HOME":               "home",
	"AIRLOCK_GIT_REMOTE":         "git-remote",
	"AIRLOCK_GIT_BASE":           "git-base",
	"AIRLOCK_DISPATCH_CMD":       "dispatch-cmd",
	"AIRLOCK_GITHUB_REPO":        "github-repo",
	"AIRLOCK_GITHUB_WORKFLOW":    "github-workflow",
	"AIRLOCK_GITHUB_API":         "github-api",
	"AIRLOCK_DAILY_TOKENS":       "daily-tokens",
	"AIRLOCK_POD_SOCKET":         "pod-socket",
}

// policyKnobs are the variables of the policy flags, sorted.
func policyKnobs() []string {
	var envs []string
	for env, name := range envKnobs {
		if policyFlagNames[name] {
			envs = append(envs, env)
		}
	}
	slices.Sort(envs)
	return envs
}

// knobOf is the variable that set fl (applyEnvKnobs), or "".
func knobOf(fl *pflag.Flag) string {
	if env := fl.Annotations[envAnnotation]; len(env) > 0 {
		return env[0]
	}
	return ""
}

// envAnnotation marks a flag applyEnvKnobs set, with its variable.
const envAnnotation = "airlock-env"

// applyEnvKnobs sets unset flags of cmd from their AIRLOCK_* variables and
// returns the variable that set each flag.
func applyEnvKnobs(cmd *cobra.Command) (map[string]string, error) {
	fromEnv := map[string]string{}
	for env, name := range envKnobs {
		val, ok := os.LookupEnv(env)
		if !ok {
			continue
		}
		f := cmd.Flags().Lookup(name)
		if f == nil || f.Changed {
			continue
		}
		if err := cmd.Flags().Set(name, val); err != nil {
			return nil, &exitError{ExitUsage, fmt.Errorf("%s=%q: %w", env, val, err)}
		}
		fromEnv[name] = env
		// For a refusal of the flag to name the variable the user
		// never typed on the command line (checkPodFlags).
		if f.Annotations == nil {
			f.Annotations = map[string][]string{}
		}
		f.Annotations[envAnnotation] = []string{env}
	}
	return fromEnv, nil
}

// logKnobs logs the knobs that took effect, once the logger is configured.
func logKnobs(cmd *cobra.Command, fromEnv map[string]string) {
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if env, ok := fromEnv[f.Name]; ok {
			slog.Info("environment knob in force", "env", env, "flag", "--"+f.Name, "value", f.Value.String())
		}
	})
}
