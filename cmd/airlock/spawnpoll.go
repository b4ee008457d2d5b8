package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/budget"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/local"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
	"github.com/spf13/cobra"
)

func newSpawnPollCmd() *cobra.Command {
	var gf gitFlags
	var homeDir string
	cmd := &cobra.Command{
		Use:   "poll [--git-remote URL] [--home DIR]",
		Short: "Reconcile running tasks: end local ones whose airlock spawn died, copy the git substrate's results back; end them in the ledger, settle the budget",
		Long: `For every task the ledger has running on the local substrate whose
airlock spawn process is gone (killed: its sandbox went with it): the task
fails with exit code 1 and the detail "spawner gone", unless that process wrote
its result.json before dying (then that result), and its reservation is
settled at the usage reported, else at the kind's estimate it holds. The
process is the one its running line names by pid, start time and boot, so a
reused pid is never taken for it. A task still queued, on either substrate,
whose spawn process is gone (it died before starting the task) fails the
same way, "spawner gone before the task ran", and what it reserved, if
anything, is released: nothing ran.

With --git-remote, also every task the ledger has running on the git
substrate: when its branch carries the runner's result.json, copy the result
and logs into subagents/<id>/, append the task's terminal line (done, failed
or timeout) and settle its reservation at the usage reported (else at the
kind's estimate). A task whose runner committed nothing within its kind's
timeout plus --git-grace fails with exit code 124.

What it settled is then collected into today's memory file, as airlock
collect --today does. Run it from a timer.`,
		Example: `  airlock spawn poll
  airlock spawn poll --git-remote git@github.com:acme/agent-state.git`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			home, err := resolveHome(homeDir)
			if err != nil {
				return err
			}
			b := budget.Budget{Dir: home.Budget(), LimitFile: home.BudgetLimit()}
			done, err := local.Reconcile(home, b, time.Now)
			if gf.remote != "" {
				s, serr := gf.substrate(cmd)
				if serr != nil {
					return serr
				}
				settled, perr := s.Poll(cmd.Context(), home, b)
				done, err = append(done, settled...), errors.Join(err, perr)
			}
			return errors.Join(err, reportReconciled(cmd, home, done))
		},
	}
	homeFlag(cmd, &homeDir)
	gf.register(cmd, true, false)
	groupedHelp(cmd, "Git substrate")
	return cmd
}

// reportReconciled prints each settled task, tells the inbox of those that
// did not succeed, and collects what was settled into today's memory file.
func reportReconciled(cmd *cobra.Command, home orchestrator.Home, done []spawn.Reconciled) error {
	var err error
	out := cmd.OutOrStdout()
	for _, r := range done {
		fmt.Fprintf(out, "%s\t%s\texit %d\t%s\n", r.ID, r.Status, r.Exit, spawn.Printable(r.Detail))
		if r.Status != ledger.Done {
			err = errors.Join(err, home.Notify("spawn_failed",
				fmt.Sprintf("task %s %s with exit code %d: %s", r.ID, r.Status, r.Exit, r.Detail)))
		}
	}
	if len(done) == 0 {
		return err
	}
	// What was settled flows into today's memory, as `airlock collect
	// --today` would add it.
	day := orchestrator.Today(time.Now())
	n, cerr := spawn.Collect(home, day)
	if cerr == nil {
		fmt.Fprintf(out, "%d result(s) added to %s\n", n, home.Memory(day))
	}
	return errors.Join(err, cerr)
}
