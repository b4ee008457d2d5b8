package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
	"github.com/spf13/cobra"
)

func newCollectCmd() *cobra.Command {
	var (
		home  string
		today bool
	)
	cmd := &cobra.Command{
		Use:     "collect --today",
		Short:   "Merge the results of the sub-agents that ended today into the home's memory/<date>.md (once each)",
		Example: "  airlock collect --today --home /var/lib/airlock/agent",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !today {
				return &exitError{ExitUsage, errors.New("say which day: --today")}
			}
			h, err := resolveHome(home)
			if err != nil {
				return &exitError{ExitUsage, err}
			}
			day := orchestrator.Today(time.Now())
			n, err := spawn.Collect(h, day)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d result(s) added to %s\n", n, h.Memory(day))
			return nil
		},
	}
	cmd.Flags().BoolVar(&today, "today", false, "the tasks that ended today (UTC)")
	homeFlag(cmd, &home)
	return cmd
}
