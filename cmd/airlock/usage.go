package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// usageErrors makes every command line airlock cannot read exit with
// ExitUsage, as a flag error already does: an unknown command (cobra exits
// 1 at the top and prints help with 0 below it, `airlock policy nosuch`)
// and a wrong number of arguments.
func usageErrors(root *cobra.Command) {
	var fix func(*cobra.Command)
	fix = func(cmd *cobra.Command) {
		for _, c := range cmd.Commands() {
			fix(c)
		}
		switch {
		case cmd.HasSubCommands() && !cmd.Runnable():
			// A group: its arguments can only be a command's name.
			cmd.Args = unknownCommand
			cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		case cmd.Args != nil:
			check := cmd.Args
			cmd.Args = func(cmd *cobra.Command, args []string) error {
				if err := check(cmd, args); err != nil {
					return &exitError{ExitUsage, fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())}
				}
				return nil
			}
		}
	}
	fix(root)
	// cobra's own help command answers an unknown topic with the usage
	// and exit 0.
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [COMMAND]",
		Short: "Help about any command",
		RunE: func(cmd *cobra.Command, args []string) error {
			target, rest, err := cmd.Root().Find(args)
			if err != nil {
				return &exitError{ExitUsage, err}
			}
			if err := unknownCommand(target, rest); err != nil {
				return err
			}
			return target.Help()
		},
	})
}

// unknownCommand refuses the first argument of a group, with the commands
// it is closest to, or else every command there is.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	if len(names) == 0 {
		return &exitError{ExitUsage, fmt.Errorf("%q has no commands; %q is not one", cmd.CommandPath(), args[0])}
	}
	return &exitError{ExitUsage, fmt.Errorf("unknown command %q for %q; %s", args[0], cmd.CommandPath(), suggest(closeNames(args[0], names), "commands", names))}
}

// flagError is a usage error; an unknown long flag comes with the flags
// of cmd it is closest to.
func flagError(cmd *cobra.Command, err error) error {
	var ne *pflag.NotExistError
	if errors.As(err, &ne) && ne.GetSpecifiedName() != "" {
		var names []string
		cmd.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
		if close := closeNames(ne.GetSpecifiedName(), names); len(close) > 0 {
			err = fmt.Errorf("%w; did you mean --%s? (see %s --help)", err, strings.Join(close, " or --"), cmd.CommandPath())
		}
	}
	return &exitError{ExitUsage, err}
}

// unknownPreset refuses a preset the policy does not have.
func unknownPreset(name string, presets []string) error {
	return &exitError{ExitUsage, fmt.Errorf("unknown preset %q; %s", name, suggest(closeNames(name, presets), "presets", presets))}
}

// suggest says which of names the operator probably meant, and what there
// is to choose from.
func suggest(close []string, what string, names []string) string {
	all := fmt.Sprintf("the %s are: %s", what, strings.Join(names, ", "))
	if len(close) == 0 {
		return all
	}
	return fmt.Sprintf("did you mean %s? (%s)", strings.Join(close, " or "), all)
}

// closeNames are the names within two edits of typed, or that typed is a
// prefix of, as cobra suggests commands (cobra's SuggestionsFor suggests
// nothing until its distance is set).
func closeNames(typed string, names []string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, typed) || editDistance(strings.ToLower(typed), n) <= 2 {
			out = append(out, n)
		}
	}
	return out
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, sub)
		}
		prev = cur
	}
	return prev[len(b)]
}
