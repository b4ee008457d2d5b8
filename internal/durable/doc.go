// Package durable writes files so that a crash (a kill, a power cut)
// leaves the old content or the new, never half, and what a call
// returned nil for is on disk: whole-file replacement (WriteFile), and
// appends under an exclusive flock shared by every writer of the file
// (OpenLocked, AppendLine, Append).
package durable
