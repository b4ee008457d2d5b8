package main

import (
	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/spf13/cobra"
)

// homeFlag registers --home, the orchestrator's directory, on the
// orchestrator's commands (spawn, collect, gate, ledger).
func homeFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "home", "", "the orchestrator's `DIR` (default: /var/lib/airlock/agent as root, else ~/.local/share/airlock/agent)")
}

// openHome is --home when given (or AIRLOCK_HOME), else the default.
func openHome(dir string) (orchestrator.Home, error) {
	if dir != "" {
		return orchestrator.Home{Dir: dir}, nil
	}
	return orchestrator.DefaultHome()
}
