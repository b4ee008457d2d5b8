package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/supervisor"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// policyFlags are the engine options every command that loads a policy
// shares; they mirror `airlock up` and `airlock proxy`.
type policyFlags struct {
	bundle, lock, publicKey, keyID, alg string
	sha256                              pinFlag
	quarantine                          bool
	fs                                  *pflag.FlagSet // where they were registered
}

// pinFlag is --policy-sha256, checked as it is parsed: a malformed pin is
// a usage error naming the flag (or its AIRLOCK_ variable), before any
// bundle is read, rather than an integrity failure against every bundle.
type pinFlag string

func (p *pinFlag) String() string { return string(*p) }
func (p *pinFlag) Type() string   { return "sha256:HEX" }
func (p *pinFlag) Set(s string) error {
	pin, err := policies.ParsePin(s)
	if err != nil {
		return err
	}
	*p = pinFlag(pin)
	return nil
}

func (f *policyFlags) register(cmd *cobra.Command, withBundle bool) {
	fl := cmd.Flags()
	f.fs = fl
	inGroup(fl, "Policy", func() {
		if withBundle {
			fl.StringVar(&f.bundle, "policy", "", "policy bundle: a `DIR` or a .tar.gz built by opa build (default: the embedded presets)")
		}
		fl.Var(&f.sha256, "policy-sha256", "refuse to start unless the bundle hash is this one (as printed by airlock policy hash)")
		fl.StringVar(&f.lock, "policy-lock", "", "lock `FILE` to enforce (default: airlock.lock beside the bundle, when it exists)")
		fl.StringVar(&f.publicKey, "policy-public-key", "", "PEM public key `FILE`: require a valid OPA bundle signature (.signatures.json)")
		fl.StringVar(&f.keyID, "policy-key-id", "default", "key `ID` of --policy-public-key, as given to opa build with --signing-key")
		fl.StringVar(&f.alg, "policy-signing-alg", "RS256", "signature algorithm (`ALG`) of --policy-public-key")
		fl.BoolVar(&f.quarantine, "policy-quarantine", false, "on a rejected reload deny everything until fixed, instead of keeping the last good policy")
	})
}

func (f *policyFlags) source() policies.Source { return supervisor.PolicySource(f.bundle) }

// fromEnv says which variable set fl, if one did.
func fromEnv(fl *pflag.Flag) string {
	if env := knobOf(fl); env != "" {
		return " (from " + env + ")"
	}
	return ""
}

// check refuses what would loosen a check unsaid: an empty key, lock or
// bundle given (an unset variable in a unit's Environment= gives one,
// and it read as "none": no signature required, the optional lock), the
// key's id or algorithm without the key, an HMAC algorithm.
func (f *policyFlags) check() error {
	var errs []error
	set := func(name string) *pflag.Flag {
		if f.fs == nil {
			return nil
		}
		if fl := f.fs.Lookup(name); fl != nil && fl.Changed {
			return fl
		}
		return nil
	}
	for _, name := range []string{"policy", "policy-lock", "policy-public-key"} {
		if fl := set(name); fl != nil && fl.Value.String() == "" {
			errs = append(errs, fmt.Errorf("--%s%s is empty: give a path, or leave it out", name, fromEnv(fl)))
		}
	}
	if f.publicKey == "" {
		for _, name := range []string{"policy-key-id", "policy-signing-alg"} {
			if fl := set(name); fl != nil {
				errs = append(errs, fmt.Errorf("--%s%s only means something with --policy-public-key", name, fromEnv(fl)))
			}
		}
	}
	if err := policies.CheckSigningAlg(f.alg); err != nil {
		errs = append(errs, fmt.Errorf("--policy-signing-alg: %w", err))
	}
	return errors.Join(errs...)
}

func (f *policyFlags) options() (policies.Options, error) {
	if err := f.check(); err != nil {
		return policies.Options{}, &exitError{ExitUsage, err}
	}
	o, err := supervisor.PolicyFrom(manifest.Policy{
		Bundle: f.bundle, SHA256: string(f.sha256), Lock: f.lock, Quarantine: f.quarantine,
		PublicKey: f.publicKey, KeyID: f.keyID, SigningAlg: f.alg,
	}, slog.Default())
	if err != nil {
		return o, fmt.Errorf("--policy-public-key: %w", err)
	}
	return o, nil
}

func (f *policyFlags) engine(ctx context.Context) (*policies.Engine, error) {
	o, err := f.options()
	if err != nil {
		return nil, err
	}
	return policies.New(ctx, o)
}

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Test, evaluate, explain, hash, lock and format policy bundles",
	}
	cmd.AddCommand(newPolicyTestCmd(), newPolicyEvalCmd(false), newPolicyEvalCmd(true),
		newPolicyHashCmd(), newPolicyLockCmd(), newPolicyVerifyCmd(), newPolicyFmtCmd())
	return cmd
}

// bundleArg reads the optional DIR argument into the flags.
func bundleArg(f *policyFlags, args []string) {
	if len(args) == 1 {
		f.bundle = args[0]
	}
}

// loadedBundleArg is bundleArg for the commands that load a policy as
// launch and spawn would (test, verify): without a DIR, the bundle
// AIRLOCK_POLICY names, so that what they say is of the bundle those
// load. Empty, it is refused as they refuse it.
func loadedBundleArg(f *policyFlags, args []string) error {
	if len(args) == 1 {
		f.bundle = args[0]
		return nil
	}
	env, ok := os.LookupEnv("AIRLOCK_POLICY")
	if ok && env == "" {
		return &exitError{ExitUsage, errors.New("AIRLOCK_POLICY is empty: give a bundle, or unset it")}
	}
	f.bundle = env
	return nil
}

func newPolicyTestCmd() *cobra.Command {
	var f policyFlags
	var verbose bool
	cmd := &cobra.Command{
		Use:   "test [DIR]",
		Short: "Compile and validate every preset, then run the bundle's Rego tests (as `opa test`)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := loadedBundleArg(&f, args); err != nil {
				return err
			}
			ctx := cmd.Context()
			// The engine's own load is part of the test: a preset whose
			// Rego tests pass but that the engine refuses is a failure.
			e, err := f.engine(ctx)
			if err != nil {
				return err
			}
			// The engine decides without the test files; the runner
			// compiles them with the policy, so one that changes the
			// policy would be tested, not the policy that decides.
			if err := e.Bundle().CheckTests(); err != nil {
				return fmt.Errorf("policy %s: the tests were not run: %w", e.Hash(), err)
			}
			mods := map[string]*ast.Module{}
			for _, m := range e.Bundle().Modules {
				mods[m.Path] = m.Parsed
			}
			ch, err := tester.NewRunner().
				SetDefaultRegoVersion(ast.RegoV1).
				SetStore(inmem.New()).
				SetModules(mods).
				RaiseBuiltinErrors(true).
				RunTests(ctx, nil)
			if err != nil {
				return err
			}
			var results []*tester.Result
			failed := 0
			for r := range ch {
				if !r.Pass() {
					failed++
				}
				results = append(results, r)
			}
			sort.Slice(results, func(i, j int) bool {
				return results[i].Package+results[i].Name < results[j].Package+results[j].Name
			})
			rch := make(chan *tester.Result, len(results))
			for _, r := range results {
				rch <- r
			}
			close(rch)
			if err := (tester.PrettyReporter{Output: cmd.OutOrStdout(), Verbose: verbose, FailureLine: true}).Report(rch); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "policy %s: %d presets, %d tests\n", e.Hash(), len(e.Presets()), len(results))
			if failed > 0 || len(results) == 0 {
				return &exitError{ExitError, errSilent}
			}
			return nil
		},
	}
	f.register(cmd, false)
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "list every test")
	return cmd
}

// exampleInput is an input document the README shows and a test runs.
const exampleInput = "examples/policy/reviewer-wget.json"

// readInput reads a policy input document strictly (policies.DecodeInput):
// a misspelt field or a second document cannot silently change the input.
func readInput(cmd *cobra.Command, file string) (*policies.Input, error) {
	var r io.Reader
	if file == "-" {
		r = cmd.InOrStdin()
		// Typed input would be a JSON document by hand: say what
		// is wanted rather than wait silently for it.
		if isTerminal(r) {
			return nil, fmt.Errorf("no input: give --input FILE or pipe a JSON input document on stdin (example: %s)", exampleInput)
		}
	} else {
		fh, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer fh.Close()
		r = fh
	}
	in, err := policies.DecodeInput(r)
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("input %s is empty: give --input FILE or pipe a JSON input document on stdin (example: %s)", file, exampleInput)
	}
	if err != nil {
		return nil, fmt.Errorf("input %s: %w", file, err)
	}
	return in, nil
}

func newPolicyEvalCmd(explain bool) *cobra.Command {
	var f policyFlags
	var preset, input string
	var asJSON bool
	use, short := "eval", "Decide one input and print the decision as JSON"
	if explain {
		use, short = "explain", "Decide one input and say which condition of which rule failed"
	}
	cmd := &cobra.Command{
		Use:   use + " [--preset NAME] [--input FILE|-]",
		Short: short,
		Long: short + `.

The input is the JSON document the proxy gives the policy for one connection
or request (go doc ./policies Input), read from --input FILE or from stdin;
its sandbox.preset names the preset unless --preset does.`,
		Example: fmt.Sprintf(`  airlock policy %[1]s --input %[2]s
  airlock policy %[1]s --preset strict < %[2]s`, use, exampleInput),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in, err := readInput(cmd, input)
			if err != nil {
				return &exitError{ExitUsage, err}
			}
			if preset != "" {
				in.Sandbox.Preset = preset
			}
			if in.Sandbox.Preset == "" {
				return &exitError{ExitUsage, errors.New("no preset: give --preset or input.sandbox.preset")}
			}
			e, err := f.engine(cmd.Context())
			if err != nil {
				return err
			}
			// The proxy refuses to serve a preset the policy lacks; so do
			// eval and explain, rather than decide with nothing.
			if _, ok := e.Preset(in.Sandbox.Preset); !ok {
				return unknownPreset(in.Sandbox.Preset, e.Presets())
			}
			out := cmd.OutOrStdout()
			if !explain {
				d := e.Decide(cmd.Context(), in)
				return writeJSON(out, struct {
					policies.Decision
					Hint string `json:"hint"`
				}{d, d.Hint(in)})
			}
			x, err := e.Explain(cmd.Context(), in)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(out, x)
			}
			printExplanation(out, x)
			return nil
		},
	}
	f.register(cmd, true)
	cmd.Flags().StringVar(&preset, "preset", "", "preset `NAME` to decide with (default: input.sandbox.preset)")
	cmd.Flags().StringVar(&input, "input", "-", "input document `FILE` (JSON), - for stdin")
	if explain {
		cmd.Flags().BoolVar(&asJSON, "json", false, "print the explanation as JSON")
	}
	return cmd
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newPolicyHashCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "hash [DIR]",
		Short: "Print the bundle hash (sha256 over the canonical encoding of sorted paths and contents)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var f policyFlags
			bundleArg(&f, args)
			b, err := policies.LoadBundle(f.source(), nil)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), b.Hash())
			return nil
		},
	}
}

func newPolicyLockCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "lock [DIR]",
		Short: "Compile the bundle and write its hashes to a lock file that loading then enforces",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var f policyFlags
			bundleArg(&f, args)
			if out == "" {
				if f.bundle == "" {
					return &exitError{ExitUsage, errors.New("the embedded bundle has no directory: give --out FILE")}
				}
				out = filepath.Join(f.bundle, policies.LockFileName)
				if st, err := os.Stat(f.bundle); err == nil && !st.IsDir() {
					out = filepath.Join(filepath.Dir(f.bundle), policies.LockFileName)
				}
			}
			b, err := policies.LoadBundle(f.source(), nil)
			if err != nil {
				return err
			}
			// Only a bundle the engine accepts is worth pinning.
			if err := policies.Check(cmd.Context(), b); err != nil {
				return err
			}
			if err := policies.WriteLock(out, policies.NewLock(b)); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", b.Hash(), out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "lock `FILE` to write (default: DIR/airlock.lock)")
	return cmd
}

func newPolicyVerifyCmd() *cobra.Command {
	var f policyFlags
	cmd := &cobra.Command{
		Use:   "verify [DIR]",
		Short: "Load the bundle as `airlock up` would (pin, lock, signature, compile) and report",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := loadedBundleArg(&f, args); err != nil {
				return err
			}
			e, err := f.engine(cmd.Context())
			if err != nil {
				return err
			}
			// Such a test file never decides, so the bundle loads; it is
			// `policy test` that refuses to run its tests.
			if err := e.Bundle().CheckTests(); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: airlock policy test will not run this bundle's tests: %v\n", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ok %s presets=%s\n", e.Hash(), strings.Join(e.Presets(), ","))
			return nil
		},
	}
	f.register(cmd, false)
	return cmd
}

func newPolicyFmtCmd() *cobra.Command {
	var write, list, fail bool
	cmd := &cobra.Command{
		Use:   "fmt [PATH...]",
		Short: "Format Rego files (like `opa fmt`): print, -w write, -l list, --fail exit 1 if any change",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = []string{"."}
			}
			changed := 0
			for _, root := range args {
				err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
					if err != nil || d.IsDir() || !strings.HasSuffix(p, ".rego") {
						return err
					}
					src, err := os.ReadFile(p)
					if err != nil {
						return err
					}
					out, err := format.SourceWithOpts(p, src, format.Opts{RegoVersion: ast.RegoV1})
					if err != nil {
						return fmt.Errorf("fmt %s: %w", p, err)
					}
					if bytes.Equal(src, out) {
						return nil
					}
					changed++
					switch {
					case list:
						fmt.Fprintln(cmd.OutOrStdout(), p)
					case !write:
						cmd.OutOrStdout().Write(out)
					}
					if write {
						return os.WriteFile(p, out, 0o644)
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			if fail && changed > 0 {
				return &exitError{ExitError, errSilent}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&write, "write", "w", false, "write the result back to the file")
	cmd.Flags().BoolVarP(&list, "list", "l", false, "list files whose formatting differs")
	cmd.Flags().BoolVar(&fail, "fail", false, "exit 1 if any file would change")
	return cmd
}
