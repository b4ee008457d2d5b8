// Command airlock is the sandbox supervisor and L7 egress proxy for AI
// agents. Each job is a subcommand; see `airlock help`.
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/airlock-sandbox/airlock/internal/gcfloor"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/supervisor"
	"github.com/spf13/cobra"
)

// Exit codes. ExitIntegrity is distinct so that a supervisor or CI can tell
// "the policy is not the one that was pinned or signed" from any other error.
const (
	ExitOK        = 0
	ExitError     = 1
	ExitUsage     = 2
	ExitIntegrity = 10
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	// The sandbox's stage 2 is this binary re-executed: it must run its
	// ordered steps before anything else touches the process.
	if len(os.Args) > 1 && os.Args[1] == sandbox.Stage2Arg {
		sandbox.RunStage2()
	}
	// A proxy allocates at every request with a live heap of a few MiB:
	// collecting at Go's default of twice that was ~13% of its CPU per
	// plain request and ~15% per inspected connection. The floor applies
	// only while a process allocates that fast, which the other commands
	// hardly do.
	gcfloor.Keep(heapFloor)
	code := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	if err := supervisor.DetachAfterExit(); err != nil {
		fmt.Fprintf(os.Stderr, "airlock: %v (the connect hook detaches as airlock exits, which then takes longer)\n", err)
	}
	os.Exit(code)
}

// heapFloor is the least heap goal an airlock process collects at while
// it allocates fast: a few collections a second under load instead of a
// few dozen, for at most this much more memory (an operator's GOGC stands
// instead).
const heapFloor = 32 << 20

// run executes one command line and returns its exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	if ee := (*exitError)(nil); !errors.As(err, &ee) || ee.err != errSilent {
		fmt.Fprintf(stderr, "airlock: %v\n", err)
	}
	return exitCode(err)
}

// exitCode is the exit status err (not nil) calls for.
func exitCode(err error) int {
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, policies.ErrIntegrity):
		return ExitIntegrity
	}
	return ExitError
}

// errSilent ends a command whose output already said what went wrong.
var errSilent = errors.New("failed")

func newRoot() *cobra.Command {
	var logLevel string
	root := &cobra.Command{
		Use:           "airlock",
		Short:         "Sandbox supervisor and L7 egress proxy for AI agents",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			fromEnv, err := applyEnvKnobs(cmd)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("log-level") {
				logLevel = defaultLogLevel(cmd)
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return &exitError{ExitUsage, fmt.Errorf("--log-level: %w", err)}
			}
			slog.SetDefault(newLogger(cmd.ErrOrStderr(), lvl))
			logKnobs(cmd, fromEnv)
			return nil
		},
	}
	root.PersistentFlags().StringVar(&logLevel, "log-level", "", "log `LEVEL`: debug, info, warn, error (default: info for proxy and up, warn for the other commands); on stderr, as text on a terminal and JSON lines otherwise")
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(newPolicyCmd(), newDemoCmd(), newProxyCmd(), newLaunchCmd(), newUpCmd(), newStatusCmd(), newRestartCmd(), newEventsCmd(), newIngressCmd(), newRedirectCmd(), newWatchdogCmd(), newLedgerCmd(), newSpawnCmd(), newCollectCmd(), newGateCmd())
	usageErrors(root)
	return root
}
