// Package proxy is airlock's L7 egress proxy: per-connection binary
// identity, CONNECT allowlists, MITM inspection for inspect hosts, SSRF guard.
// Every decision comes from policies.Decider.
package proxy
