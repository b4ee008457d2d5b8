package main

import (
	"fmt"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/spf13/cobra"
)

// homeFlag is --home, the orchestrator's directory, on the orchestrator's
// commands (spawn, poll, gc, collect, gate, ledger); AIRLOCK_HOME is its
// knob.
func homeFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "home", "", "the orchestrator's `DIR` (default: $AIRLOCK_HOME, else /var/lib/airlock/agent as root, ~/.local/share/airlock/agent otherwise)")
}

// resolveHome is --home made absolute (a sub-agent runs in another
// directory and must find the same home), else the default home. Not
// finding one is a usage error, whichever command asks.
func resolveHome(dir string) (orchestrator.Home, error) {
	if dir == "" {
		h, err := orchestrator.DefaultHome()
		if err != nil {
			return h, &exitError{ExitUsage, err}
		}
		return h, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return orchestrator.Home{}, &exitError{ExitUsage, fmt.Errorf("--home %q: %w", dir, err)}
	}
	return orchestrator.Home{Dir: abs}, nil
}
