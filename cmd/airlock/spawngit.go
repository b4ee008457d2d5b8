package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator/gitsub"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
	"github.com/spf13/cobra"
)

// gitFlags configure the git substrate; `airlock spawn`, `spawn poll` and
// `spawn gc` share them.
type gitFlags struct {
	remote, base, dispatch, ghRepo, ghWorkflow, ghAPI string
	pollEvery, grace                                  time.Duration
}

// githubTokenEnv holds the GitHub token: read from the environment only,
// never a flag, so it is not in the process list.
const githubTokenEnv = "AIRLOCK_GITHUB_TOKEN"

// register adds the flags every git command needs (the remote, and the
// grace when it waits or polls), and with dispatch those that start a
// spawn.
func (f *gitFlags) register(cmd *cobra.Command, grace, dispatch bool) {
	fl := cmd.Flags()
	inGroup(fl, "Git substrate", func() {
		fl.StringVar(&f.remote, "git-remote", "", "the remote (`URL` or path) holding the spawn branches, spawn/<task id>")
		if grace {
			fl.DurationVar(&f.grace, "git-grace", gitsub.DefaultGrace, "how long past a kind's timeout a runner may take to commit its result before the task fails with exit code 124")
		}
		if !dispatch {
			return
		}
		fl.StringVar(&f.base, "git-base", "HEAD", "the remote's `REF` a spawn branch starts from (where the runner workflow lives)")
		fl.StringVar(&f.dispatch, "dispatch-cmd", "", "start a runner by running `CMD` (/bin/sh -c) with AIRLOCK_SPAWN_ID, AIRLOCK_SPAWN_BRANCH and AIRLOCK_SPAWN_REMOTE set")
		fl.StringVar(&f.ghRepo, "github-repo", "", "start a runner through GitHub Actions' workflow_dispatch on `REPO`, owner/name (the token in "+githubTokenEnv+")")
		fl.StringVar(&f.ghWorkflow, "github-workflow", "airlock-spawn.yml", "the workflow `FILE` (or id) --github-repo dispatches")
		fl.StringVar(&f.ghAPI, "github-api", gitsub.DefaultGitHubAPI, "GitHub's REST API base `URL`")
		fl.DurationVar(&f.pollEvery, "poll-every", gitsub.DefaultPollEvery, "how often a sync spawn looks for the runner's result on its branch")
	})
}

// substrate is the configured git substrate. Without a dispatcher it can
// poll and collect, and refuses to start a spawn.
// dispatches says whether a dispatcher, which starts the runner, is named.
func (f *gitFlags) dispatches() bool { return f.dispatch != "" || f.ghRepo != "" }

func (f *gitFlags) substrate(cmd *cobra.Command) (*gitsub.Substrate, error) {
	if f.remote == "" {
		return nil, &exitError{ExitUsage, errors.New("the git substrate needs --git-remote (or AIRLOCK_GIT_REMOTE)")}
	}
	if cmd.Flags().Lookup("git-grace") != nil && f.grace <= 0 {
		return nil, &exitError{ExitUsage, fmt.Errorf("--git-grace %v: want a positive duration", f.grace)}
	}
	s := &gitsub.Substrate{Remote: gitsub.Remote{URL: f.remote, Base: f.base}, PollEvery: f.pollEvery, Grace: f.grace}
	if err := s.Remote.Check(); err != nil {
		return nil, &exitError{ExitUsage, fmt.Errorf("--git-remote: %w", err)}
	}
	switch {
	case f.dispatch != "" && f.ghRepo != "":
		return nil, &exitError{ExitUsage, errors.New("--dispatch-cmd and --github-repo both given: say which dispatcher starts the runner")}
	case f.dispatch != "":
		s.Dispatcher = gitsub.Command{Line: f.dispatch, Stdout: cmd.ErrOrStderr(), Stderr: cmd.ErrOrStderr()}
	case f.ghRepo != "" && os.Getenv(githubTokenEnv) == "":
		return nil, &exitError{ExitUsage, fmt.Errorf("--github-repo %s: no token in %s", f.ghRepo, githubTokenEnv)}
	case f.ghRepo != "":
		s.Dispatcher = gitsub.GitHub{API: f.ghAPI, Repo: f.ghRepo, Workflow: f.ghWorkflow, Token: os.Getenv(githubTokenEnv)}
	}
	return s, nil
}

func newSpawnGCCmd() *cobra.Command {
	var gf gitFlags
	var homeDir string
	var keep gitsub.Retention
	cmd := &cobra.Command{
		Use:   "gc --git-remote URL [--home DIR]",
		Short: "Delete the spawn branches of finished tasks past their retention; report branches no ledger line knows",
		Long: `Delete spawn/<id> branches of tasks the ledger says ended longer ago than
their retention (done: --keep-done, failed or timed out: --keep-failed). The
branches of queued and running tasks are kept, and so are branches with no
ledger line, which are reported as drift for the operator to look at.`,
		Example: `  airlock spawn gc --git-remote git@github.com:acme/agent-state.git --keep-done 72h`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keep.Done <= 0 || keep.Failed <= 0 {
				return &exitError{ExitUsage, fmt.Errorf("--keep-done %v, --keep-failed %v: want positive durations", keep.Done, keep.Failed)}
			}
			s, err := gf.substrate(cmd)
			if err != nil {
				return err
			}
			home, err := resolveHome(homeDir)
			if err != nil {
				return err
			}
			entries, _, err := ledger.Read(home.Ledger())
			if err != nil {
				return err
			}
			rep, err := s.Remote.GC(cmd.Context(), ledger.Fold(entries), time.Now(), keep)
			out := cmd.OutOrStdout()
			for _, id := range rep.Deleted {
				fmt.Fprintf(out, "deleted\t%s\n", gitsub.Branch(id))
			}
			for _, id := range rep.Drift {
				// A branch name the remote holds, of anyone's pushing.
				fmt.Fprintf(out, "drift\t%s\tno ledger line: kept\n", spawn.Printable(gitsub.Branch(id)))
			}
			fmt.Fprintf(out, "%s\n", rep)
			return err
		},
	}
	homeFlag(cmd, &homeDir)
	gf.register(cmd, false, false)
	cmd.Flags().DurationVar(&keep.Done, "keep-done", gitsub.DefaultRetention.Done, "keep a done task's branch this `LONG` after it ended")
	cmd.Flags().DurationVar(&keep.Failed, "keep-failed", gitsub.DefaultRetention.Failed, "keep a failed or timed-out task's branch this `LONG` after it ended")
	groupedHelp(cmd, "Git substrate")
	return cmd
}
