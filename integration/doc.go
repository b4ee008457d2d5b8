// Package integration holds end-to-end tests with real processes, real
// namespaces and real clients (curl, git, python3, node).
package integration
