package policies

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// queryDetail names the query parameter of rule that q fails, for a
// query_not_allowed denial's detail: which one to fix, and not only that
// one did not hold. By name only: a query's values may be secrets, and
// stay out of hints and the audit log.
func (p *compiledPreset) queryDetail(rule string, q map[string][]string) string {
	for i := range p.Rules {
		if p.Rules[i].Name == rule {
			if why := queryFailure(p.Rules[i].Query, q); why != "" {
				return why
			}
		}
	}
	// A preset that decides without the library, or names no rule.
	return "its query conditions are not met"
}

// queryFailure is the first of cond's params, by name, that q does not
// satisfy as the library's _query_ok reads it: present as spelt, and every
// value under every spelling a server may read as the param (paramKey)
// allowed. "" when all hold. TestQueryFailureMirrorsLibrary holds the two
// together.
func queryFailure(cond, q map[string][]string) string {
	for _, k := range slices.Sorted(maps.Keys(cond)) {
		if len(q[k]) == 0 {
			return fmt.Sprintf("query parameter %q is missing", k)
		}
		key := ParamKey(k)
		for _, name := range slices.Sorted(maps.Keys(q)) {
			if ParamKey(name) != key || !slices.ContainsFunc(q[name], func(v string) bool { return !slices.Contains(cond[k], v) }) {
				continue
			}
			if name == k {
				return fmt.Sprintf("query parameter %q has a value the rule does not allow", k)
			}
			return fmt.Sprintf("query parameter %q, sent as %q (a spelling servers read as it), has a value the rule does not allow", k, shortName(name))
		}
	}
	return ""
}

// shortName bounds a name the sandbox chose, for a detail.
func shortName(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return strings.ToValidUTF8(s[:limit], "") + "…"
}
