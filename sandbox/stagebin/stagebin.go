// Package stagebin carries the sandbox's own processes (its init, the
// command stage and the cgroup reaper) as a small binary of their own,
// embedded in airlock when it is built with the airlock_stage tag (`make
// build` does): each of those processes then starts in a few milliseconds
// instead of paying the whole airlock binary's start (its page faults and
// package inits: the policy engine, the proxy, metrics), three times per
// sandbox. Without the tag Binary is empty and the sandbox re-executes
// airlock itself: slower, the same steps.
package stagebin
