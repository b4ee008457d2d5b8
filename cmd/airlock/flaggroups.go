package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagGroupAnnotation names the help section a flag is listed under: a
// command with fifty flags reads by what they set, not alphabetically.
const flagGroupAnnotation = "airlock.flag-group"

// inGroup puts the flags that register adds to fs in group, but for those
// an inner inGroup already placed.
func inGroup(fs *pflag.FlagSet, group string, register func()) {
	before := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) { before[f.Name] = true })
	register()
	fs.VisitAll(func(f *pflag.Flag) {
		if !before[f.Name] && flagGroup(f) == "" {
			fs.SetAnnotation(f.Name, flagGroupAnnotation, []string{group})
		}
	})
}

// flagGroup is the section a flag is listed under, "" for none.
func flagGroup(f *pflag.Flag) string {
	if g := f.Annotations[flagGroupAnnotation]; len(g) == 1 {
		return g[0]
	}
	return ""
}

// groupedHelp lists cmd's flags under one heading per group, in the order
// given, then whatever is in no group (--help), then the global flags.
func groupedHelp(cmd *cobra.Command, groups ...string) {
	cmd.SetUsageFunc(func(c *cobra.Command) error {
		w := c.OutOrStderr()
		fmt.Fprintf(w, "Usage:\n  %s\n", c.UseLine())
		if c.HasExample() {
			fmt.Fprintf(w, "\nExamples:\n%s\n", c.Example)
		}
		order := append(groups[:len(groups):len(groups)], "")
		sets := map[string]*pflag.FlagSet{}
		for _, g := range order {
			sets[g] = pflag.NewFlagSet(g, pflag.ContinueOnError)
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			set, ok := sets[flagGroup(f)]
			if !ok {
				set = sets[""]
			}
			set.AddFlag(f)
		})
		for _, g := range order {
			title := g + " flags"
			if g == "" {
				title = "Other flags"
			}
			if sets[g].HasFlags() {
				fmt.Fprintf(w, "\n%s:\n%s", title, sets[g].FlagUsages())
			}
		}
		if c.HasAvailableInheritedFlags() {
			fmt.Fprintf(w, "\nGlobal flags:\n%s", c.InheritedFlags().FlagUsages())
		}
		return nil
	})
}
