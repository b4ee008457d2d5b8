package main

import (
	"strings"
	"testing"
)

// Every command line airlock cannot read exits 2 and says why, with what
// was probably meant.
func TestUsageErrorsExit2(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		want  []string
	}{
		{"unknown command", "", []string{"nosuch"}, []string{`unknown command "nosuch" for "airlock"`, "the commands are: ", "launch"}},
		{"misspelt command", "", []string{"stauts"}, []string{"did you mean status?"}},
		{"unknown policy command", "", []string{"policy", "nosuch"}, []string{`unknown command "nosuch" for "airlock policy"`, "eval, explain"}},
		{"misspelt policy command", "", []string{"policy", "evl"}, []string{"did you mean eval?"}},
		{"misspelt ingress command", "", []string{"ingress", "kye"}, []string{"did you mean key?"}},
		{"help on an unknown topic", "", []string{"help", "policy", "explian"}, []string{"did you mean explain?"}},
		{"argument to a command that takes none", "", []string{"status", "extra"}, []string{`"extra"`, "airlock status --help"}},
		{"too many arguments", "", []string{"policy", "hash", "a", "b"}, []string{"at most 1 arg", "airlock policy hash --help"}},
		{"unknown flag", "", []string{"policy", "hash", "--nosuch"}, []string{"--nosuch"}},
		{"misspelt flag", "", []string{"launch", "--memroy-max", "1", "--", "/bin/true"}, []string{"--memroy-max", "did you mean --memory-max?"}},
		{"eval: misspelt preset", "{}", []string{"policy", "eval", "--preset", "reveiwer"}, []string{`unknown preset "reveiwer"`, "did you mean reviewer?", "the presets are: ", "strict"}},
		{"explain: misspelt preset", "{}", []string{"policy", "explain", "--preset", "reviwer"}, []string{`unknown preset "reviwer"`, "did you mean reviewer?"}},
		{"transparent listener on a wildcard", "", []string{"proxy", "--preset", "strict", "--transparent", ":15001"}, []string{"--transparent/--dns :15001", "one per family"}},
		{"DNS answerer on a name", "", []string{"proxy", "--preset", "strict", "--dns", "localhost:15053"}, []string{"localhost:15053", "want an IP address"}},
		{"redirect without its ports", "", []string{"redirect", "--exempt-uid", "1337"}, []string{"--transparent-port and --dns-port are required"}},
		{"explain: the input's unknown preset", `{"sandbox": {"preset": "nope"}}`, []string{"policy", "explain"}, []string{`unknown preset "nope"`, "the presets are: ", "reviewer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := airlock(t, tc.stdin, tc.args...)
			if code != ExitUsage {
				t.Errorf("airlock %v = %d; want %d\n%s%s", tc.args, code, ExitUsage, out, errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(errs, w) {
					t.Errorf("airlock %v: stderr %q lacks %q", tc.args, errs, w)
				}
			}
		})
	}
}

// A group without a command shows its help, as before.
func TestGroupWithoutCommandShowsHelp(t *testing.T) {
	for _, args := range [][]string{nil, {"policy"}, {"ingress"}, {"help", "policy"}} {
		code, out, errs := airlock(t, "", args...)
		if code != ExitOK || !strings.Contains(out, "Available Commands:") {
			t.Errorf("airlock %v = %d\n%s%s", args, code, out, errs)
		}
	}
}
