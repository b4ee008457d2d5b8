package policies

import "strings"

// MayReach reports whether any allow rule of preset, in the generation now
// serving, names a host pattern matching host: if none does, no
// connection to host can ever be allowed, whatever the binary, port or
// request. The sandbox's DNS answerer says NXDOMAIN for such names (an
// answer is not an allow: every connection is still decided). The
// matching is the library's host_match (policies/lib/airlock.rego): exact,
// "*.suffix" for strict subdomains, "*" for any host. host is
// canonicalised first; one that cannot be, an unknown preset and a
// quarantined engine all give false, as Decide denies them all.
func (e *Engine) MayReach(preset, host string) bool {
	host, err := CanonicalHost(host)
	if err != nil {
		return false
	}
	return e.Reachable(preset)(host)
}

// Reachable is MayReach for a host already canonical (the DNS answerer's)
// and a set of presets (a pod's services share one answerer): true when an
// allow rule of any of them could reach it. Each call reads the generation
// now serving once, whatever the number of presets.
func (e *Engine) Reachable(presets ...string) func(canonicalHost string) bool {
	return func(host string) bool {
		g := e.gen.Load()
		if g.quarantine != nil {
			return false
		}
		for _, name := range presets {
			p, ok := g.presets[name]
			if !ok {
				continue
			}
			for _, r := range p.Rules {
				for _, pat := range r.Hosts {
					if hostMatch(pat, host) {
						return true
					}
				}
			}
		}
		return false
	}
}

// hostMatch is lib.host_match.
func hostMatch(pattern, host string) bool {
	if pattern == "*" || pattern == host {
		return true
	}
	suffix, wild := strings.CutPrefix(pattern, "*")
	return wild && strings.HasPrefix(suffix, ".") && strings.HasSuffix(host, suffix)
}
