// Package sandbox is the capsh-style launcher: capability drop, uid switch,
// no_new_privs, Landlock, seccomp, rlimits, a scrubbed environment and a
// network namespace whose only way out is the proxy.
package sandbox
