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
		home, day string
		today     bool
	)
	cmd := &cobra.Command{
		Use:   "collect [--day YYYY-MM-DD | --today]",
		Short: "Merge the results of the sub-agents that ended on a day (default today) into the home's memory/<date>.md (once each)",
		Long: `Merge the results of the sub-agents the ledger says ended on a UTC day
(--day, default today) into memory/<date>.md, each once: collecting again adds
only what is new.

A task that ends between a day's last collect and midnight is collected only by
a collect of that day: a daily timer should run both
  airlock collect --day "$(date -u -d yesterday +%F)"
  airlock collect`,
		Example: "  airlock collect --home /var/lib/airlock/agent\n  airlock collect --day 2026-11-22 --home /var/lib/airlock/agent",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case day != "" && today:
				return &exitError{ExitUsage, errors.New("--day or --today, not both")}
			case day == "":
				day = orchestrator.Today(time.Now())
			}
			if _, err := time.Parse(time.DateOnly, day); err != nil {
				return &exitError{ExitUsage, fmt.Errorf("--day %q: want a UTC date, YYYY-MM-DD", day)}
			}
			h, err := resolveHome(home)
			if err != nil {
				return err
			}
			n, err := spawn.Collect(h, day)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d result(s) added to %s\n", n, h.Memory(day))
			return nil
		},
	}
	cmd.Flags().StringVar(&day, "day", "", "the UTC `DAY` (YYYY-MM-DD) whose ended tasks to collect (default today)")
	cmd.Flags().BoolVar(&today, "today", false, "the tasks that ended today (UTC): the default")
	homeFlag(cmd, &home)
	return cmd
}
