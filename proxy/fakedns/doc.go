// Package fakedns answers a sandbox's DNS queries itself, with synthetic
// addresses, so that no lookup ever leaves the sandbox (issue 13).
//
// Every name a rule could reach gets an address from a reserved pool (the
// "fake-IP" scheme of Clash and sing-box): the pool remembers name ↔
// address, and when the sandbox connects to that address the transparent
// listener maps it back to the name, which the policy then decides on and
// the proxy resolves itself. Names no rule could reach get NXDOMAIN, and
// queries other than A and AAAA are refused: nothing is ever forwarded, so
// a TXT record cannot carry data out and the sandbox cannot learn what the
// host's resolver knows.
package fakedns
