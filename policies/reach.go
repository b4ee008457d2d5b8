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
	g := e.gen.Load()
	p, ok := g.presets[preset]
	if g.quarantine != nil || !ok {
		return false
	}
	host, err := CanonicalHost(host)
	if err != nil {
		return false
	}
	for _, r := range p.Rules {
		for _, pat := range r.Hosts {
			if hostMatch(pat, host) {
				return true
			}
		}
	}
	return false
}

// hostMatch is lib.host_match.
func hostMatch(pattern, host string) bool {
	if pattern == "*" || pattern == host {
		return true
	}
	suffix, wild := strings.CutPrefix(pattern, "*")
	return wild && strings.HasPrefix(suffix, ".") && strings.HasSuffix(host, suffix)
}
