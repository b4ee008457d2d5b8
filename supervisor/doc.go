// Package supervisor boots the hardened pod (`airlock up`): verify the
// policy, start the proxy, launch the gateway and shim in sandboxes, report
// readiness, restart with backoff, shut down cleanly.
package supervisor
