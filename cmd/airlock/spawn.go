package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/c1"
	"github.com/airlock-sandbox/airlock/orchestrator"
	"github.com/airlock-sandbox/airlock/orchestrator/budget"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/local"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/spf13/cobra"
)

func newSpawnCmd() *cobra.Command {
	var pf policyFlags
	var xf proxyFlags
	var gf gitFlags
	var (
		kindName, taskFile, substrate, home string
		async, dryRun                       bool
		dailyTokens                         int64
	)
	var podSocket string
	cmd := &cobra.Command{
		Use:   "spawn --kind KIND --task-file FILE",
		Short: "Run a sub-agent of a kind on a task, in a sandbox decided by the kind's preset of the verified bundle, within the daily token budget",
		Example: `  # what a reviewer could reach, without running it
  airlock spawn --kind reviewer --task-file task.md --dry-run
  # run it here, at most 200000 tokens a day for every spawn together
  airlock spawn --kind reviewer --task-file task.md --substrate local --daily-tokens 200000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kindName == "" || (taskFile == "" && !dryRun) {
				return &exitError{ExitUsage, errors.New("--kind and --task-file are required")}
			}
			for name := range perSandbox {
				if f := cmd.Flags().Lookup(name); f.Changed {
					return &exitError{ExitUsage, fmt.Errorf("--%s is per sandbox: a spawn's audit lines go to subagents/ID/%s, and its proxy serves no metrics", name, local.AuditFile)}
				}
			}
			if dailyTokens < 0 {
				return &exitError{ExitUsage, fmt.Errorf("--daily-tokens %d: want 0 or more", dailyTokens)}
			}
			if podSocket != "" {
				// The pod's proxy serves the sandbox: its own flags here
				// would be ignored, unsaid.
				if err := checkPodFlags(cmd.Flags(), func(name string) bool { return !proxyFlagNames[name] }); err != nil {
					return &exitError{ExitUsage, err}
				}
			}
			if gf.remote != "" && !dryRun && !gf.dispatches() {
				return &exitError{ExitUsage, errors.New("--git-remote needs a dispatcher to start the runner: --dispatch-cmd or --github-repo")}
			}
			h, err := resolveHome(home)
			if err != nil {
				return err
			}
			var le *proxy.LimitError
			if err := proxy.CheckLimits(xf.limits, xf.dialTimeout); errors.As(err, &le) {
				return &exitError{ExitUsage, fmt.Errorf("--%s must be positive", le.Name)}
			}
			if podSocket == "" && !dryRun {
				// A local sandbox's proxy verifies upstreams with them.
				proxy.PrepareRoots()
			}
			// The bundle is verified here, with its pin or lock, before
			// anything is reserved or run (ErrIntegrity: exit 10).
			engine, err := pf.engine(cmd.Context())
			if err != nil {
				return err
			}
			s := &spawn.Spawner{
				Home: h, Engine: engine, Log: slog.Default(),
				Budget: budget.Budget{Dir: h.Budget(), Daily: dailyTokens, LimitFile: h.BudgetLimit()},
				Substrates: map[string]spawn.Substrate{
					// In this process, with the engine just verified:
					// the bundle is compiled once.
					"local": local.Substrate{Launcher: podOr(podSocket, engine, spawnLauncher{engine: engine, proxy: xf.options(slog.Default()), log: slog.Default()})},
				},
			}
			if gf.remote != "" {
				if s.Substrates["git"], err = gf.substrate(cmd); err != nil {
					return err
				}
			} else {
				s.Unavailable = map[string]string{"git": "needs --git-remote (or AIRLOCK_GIT_REMOTE) and a dispatcher (--dispatch-cmd or --github-repo)"}
			}
			// A stop signal ends the sub-agent (its sandbox with it) and
			// the task is recorded as failed: never a sandbox orphaned
			// with its ledger line left running.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			res, err := s.Spawn(ctx, spawn.Request{Kind: kindName, TaskFile: taskFile, Substrate: substrate, DryRun: dryRun, Async: async})
			if err == nil {
				err = report(cmd.OutOrStdout(), cmd.ErrOrStderr(), h, res)
			}
			if code := spawn.ExitCode(res, err); code != 0 {
				if err == nil {
					err = errSilent
				}
				return &exitError{code, err}
			}
			return err
		},
	}
	fl := cmd.Flags()
	inGroup(fl, "Spawn", func() {
		fl.StringVar(&kindName, "kind", "", "the sub-agent's kind: `NAME` of a manifest in the home's kinds/")
		fl.StringVar(&taskFile, "task-file", "", "the task, a text `FILE` rendered into the kind's prompt")
		fl.StringVar(&substrate, "substrate", "", "where it runs, `NAME`: local or git (default: the kind's)")
		fl.BoolVar(&async, "async", false, "hand the task over and print its id at once (substrates that can: git)")
		fl.BoolVar(&dryRun, "dry-run", false, "print what the sub-agent could reach (from its preset) and spawn nothing")
		homeFlag(cmd, &home)
		podSocketFlag(fl, &podSocket)
		fl.Int64Var(&dailyTokens, "daily-tokens", 0, "the day's (UTC) token budget for all spawns, `N`; with the home's budget.yaml, a lower limit only (0: the file's); without it, 0 refuses every spawn")
	})
	gf.register(cmd, true, true)
	xf.register(cmd)
	inGroup(fl, "Policy", func() { pf.register(cmd, true) })
	// Each sandbox's proxy writes its own audit log and serves no
	// metrics: those two proxy flags are not the operator's here. Its
	// engine is the one the spawn verified, never reloaded: nothing to
	// watch.
	fl.MarkHidden("audit-log")
	fl.MarkHidden("metrics")
	fl.MarkHidden("policy-watch")
	groupedHelp(cmd, "Spawn", "Git substrate", "Proxy", "Policy")
	cmd.AddCommand(newSpawnPollCmd(), newSpawnGCCmd())
	return cmd
}

// perSandbox are spawn's proxy flags the operator must not set: each
// sandbox writes its own audit log (subagents/ID/audit.jsonl) and its
// proxy serves no metrics (one address cannot serve several).
var perSandbox = map[string]bool{"audit-log": true, "metrics": true}

// report prints a dry run's plan, an async task's id, or the result.
func report(stdout, stderr io.Writer, h orchestrator.Home, res spawn.Result) error {
	if res.Plan != nil {
		fmt.Fprintf(stdout, "kind %s on the %s substrate: a dry run, nothing spawned\n", res.Kind, res.Substrate)
		return res.Plan.WriteText(stdout)
	}
	dir := h.Subagent(res.Task)
	if !ledger.Terminal(res.Status) {
		fmt.Fprintln(stdout, res.Task)
		return nil
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\n", c1.Escape(raw))
	if res.Status != ledger.Done {
		fmt.Fprintf(stderr, "airlock: task %s %s: %s (see %s)\n", res.Task, res.Status, spawn.Printable(res.Detail), dir)
	}
	return nil
}
