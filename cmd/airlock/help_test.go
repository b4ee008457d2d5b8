package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// walk calls f on cmd and every command below it.
func walk(cmd *cobra.Command, f func(*cobra.Command)) {
	f(cmd)
	for _, c := range cmd.Commands() {
		walk(c, f)
	}
}

// placeholder is what help shows after a flag's name: pflag takes the first
// `quoted` word of the usage, or else the value's type. A code span in
// backquotes would become the placeholder (`--policy opa build`), and a
// bare type (string, stringArray) says nothing of the value.
var placeholder = regexp.MustCompile(`^(duration|closed\|warn|sha256:HEX|[A-Z][A-Z0-9_]*([:=,.|\[\]]+[A-Z0-9_]*)*\]*)$`)

func TestEveryFlagHasAPlaceholderThatReadsAsAValue(t *testing.T) {
	n := 0
	walk(newRoot(), func(cmd *cobra.Command) {
		check := func(f *pflag.Flag) {
			if f.Name == "help" {
				return
			}
			n++
			name, usage := pflag.UnquoteUsage(f)
			switch {
			case f.Value.Type() == "bool":
				if name != "" {
					t.Errorf("%s --%s is a switch but shows placeholder %q", cmd.CommandPath(), f.Name, name)
				}
			case !placeholder.MatchString(name):
				t.Errorf("%s --%s shows placeholder %q; want a value's name (DIR, FILE, NAME, ...)", cmd.CommandPath(), f.Name, name)
			}
			if strings.Contains(usage, "`") {
				t.Errorf("%s --%s: usage %q keeps a backquote, which pflag would read as a placeholder", cmd.CommandPath(), f.Name, usage)
			}
		}
		cmd.LocalFlags().VisitAll(check)
	})
	if n < 100 {
		t.Fatalf("checked %d flags; the walk missed commands", n)
	}
}

// What a newcomer reads for the flags the issue named.
func TestHelpShowsPlaceholders(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"proxy", "--help"}, "--policy DIR "},
		{[]string{"launch", "--help"}, "--policy DIR "},
		{[]string{"demo", "--help"}, "--policy DIR "},
		{[]string{"policy", "eval", "--help"}, "--policy DIR "},
		{[]string{"policy", "explain", "--help"}, "--input FILE "},
		{[]string{"policy", "verify", "--help"}, "--policy-key-id ID "},
		{[]string{"policy", "test", "--help"}, "--policy-sha256 sha256:HEX "},
		{[]string{"launch", "--help"}, "--ro PATH "},
		{[]string{"launch", "--help"}, "--memory-max BYTES "},
		{[]string{"proxy", "--help"}, "--listen ADDR "},
		{[]string{"status", "--help"}, "--socket PATH "},
		{[]string{"events", "--help"}, "--since TIME "},
		{[]string{"ingress", "key", "--help"}, "--operator NAME "},
		{[]string{"up", "--help"}, "--state-dir DIR "},
		{[]string{"policy", "lock", "--help"}, "--out FILE "},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := airlock(t, "", tc.args...)
			if code != ExitOK || !strings.Contains(out, tc.want) {
				t.Errorf("airlock %v = %d; want %q in:\n%s%s", tc.args, code, tc.want, out, errs)
			}
		})
	}
}

// launch and proxy list their flags by what they set, every flag in a
// group, with examples whose flags exist.
func TestGroupedHelp(t *testing.T) {
	for _, tc := range []struct {
		cmd    string
		groups []string
	}{
		{"launch", []string{"Sandbox", "Network", "Proxy", "Policy"}},
		{"proxy", []string{"Proxy", "Sandbox", "Policy"}},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			code, out, errs := airlock(t, "", tc.cmd, "--help")
			if code != ExitOK {
				t.Fatalf("airlock %s --help = %d %s", tc.cmd, code, errs)
			}
			at := 0
			for _, h := range append([]string{"Usage:", "Examples:"}, tc.groups...) {
				if h != "Usage:" && h != "Examples:" {
					h += " flags:"
				}
				i := strings.Index(out[at:], "\n"+h+"\n")
				if i < 0 {
					t.Fatalf("airlock %s --help lacks %q after byte %d:\n%s", tc.cmd, h, at, out)
				}
				at += i + 1
			}
			cmd, _, _ := newRoot().Find([]string{tc.cmd})
			cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
				if g := flagGroup(f); f.Name != "help" && !slices.Contains(tc.groups, g) {
					t.Errorf("airlock %s --%s is in group %q, not one of %v", tc.cmd, f.Name, g, tc.groups)
				}
			})
			for _, line := range strings.Split(cmd.Example, "\n") {
				args := strings.Fields(line)
				if len(args) < 2 || args[0] != "airlock" {
					continue
				}
				c, _, _ := newRoot().Find([]string{tc.cmd})
				if err := c.ParseFlags(args[2:]); err != nil {
					t.Errorf("example %q: %v", line, err)
				}
			}
		})
	}
}
