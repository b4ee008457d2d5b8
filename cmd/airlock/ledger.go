package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/internal/c1"
	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/spf13/cobra"
)

func newLedgerCmd() *cobra.Command {
	var dir, status string
	var today, asJSON bool
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Show the orchestrator's tasks: the ledger (queue/tasks.jsonl) folded to one row per task",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if status != "" && !slices.Contains(ledger.Statuses(), ledger.Status(status)) {
				return &exitError{ExitUsage, fmt.Errorf("--status %q: want one of %v", status, ledger.Statuses())}
			}
			h, err := resolveHome(dir)
			if err != nil {
				return err
			}
			entries, torn, err := ledger.Read(h.Ledger())
			if err != nil {
				return err
			}
			if torn > 0 {
				slog.Warn("ledger lines skipped: they do not parse (a crash's torn line?)", "ledger", h.Ledger(), "skipped", torn)
			}
			var tasks []ledger.Task
			day := orchestrator.Today(time.Now())
			for _, t := range ledger.Fold(entries) {
				if (status == "" || t.Status == ledger.Status(status)) && (!today || touched(t, day)) {
					tasks = append(tasks, t)
				}
			}
			if asJSON {
				for _, t := range tasks {
					raw, err := json.Marshal(t)
					if err != nil {
						return err
					}
					if _, err := fmt.Fprintf(cmd.OutOrStdout(), "%s\n", c1.Escape(raw)); err != nil {
						return err
					}
				}
				return nil
			}
			return ledgerTable(cmd.OutOrStdout(), tasks)
		},
	}
	homeFlag(cmd, &dir)
	cmd.Flags().StringVar(&status, "status", "", "only tasks whose last status is `STATUS`: queued, running, done, failed, timeout or refused")
	cmd.Flags().BoolVar(&today, "today", false, "only tasks with a transition today (UTC)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per task instead of the table")
	return cmd
}

// touched says whether t has a transition on day (UTC).
func touched(t ledger.Task, day string) bool {
	for _, ts := range []time.Time{t.Queued, t.Started, t.Ended} {
		if !ts.IsZero() && orchestrator.Today(ts) == day {
			return true
		}
	}
	return false
}

func ledgerTable(w io.Writer, tasks []ledger.Task) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tKIND\tSUBSTRATE\tSTATUS\tEXIT\tTOKENS\tQUEUED\tSTARTED\tENDED\tDETAIL")
	for _, t := range tasks {
		exit, tokens := "-", "-"
		if t.Exit != nil {
			exit = strconv.Itoa(*t.Exit)
		}
		if t.Usage != nil {
			tokens = strconv.FormatInt(t.Usage.Tokens, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Kind, t.Substrate, t.Status, exit, tokens,
			stamp(t.Queued), stamp(t.Started), stamp(t.Ended), oneLine(t.Detail))
	}
	return tw.Flush()
}

// stamp is a time in UTC to the second, "-" when not reached.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}
