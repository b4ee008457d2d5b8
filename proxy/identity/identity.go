// Package identity attributes a TCP connection to the process that opened
// it: sock_diag for the exact 4-tuple gives the socket's inode and uid, the
// owning pid is found among the sandbox's processes, and the process is
// named by its executable (/proc/<pid>/exe) and that file's sha256.
package identity

import (
	"errors"
	"fmt"
	"time"
)

// Process is the owner of a client socket. Lookups of connections from the
// same process return the same value: it is read-only.
type Process struct {
	PID    int
	UID    int
	Exe    string // the /proc/<pid>/exe target
	SHA256 string // of the file /proc/<pid>/exe opens, not of the path
	// Cgroup is the process's cgroup v2 path as /proc/<pid>/cgroup shows
	// it ("/airlock-pod/agent"; "" on a host without cgroup v2, or from a
	// resolver not asked for it: Resolver.WithCgroups), read
	// when the process is first described: only root can move a process
	// between cgroups, and a moved process keeps the path it was
	// described with until it execs or its pid is reused.
	Cgroup string
	// start is when the process started, as time since boot, truncated
	// to the clock tick /proc reports it in.
	start time.Duration
}

// Errors a lookup fails with. Both are denials: a connection whose owner is
// not known exactly is never attributed to anyone.
var (
	// ErrUnknown: no socket for the 4-tuple, no owner among the sandbox's
	// processes, or the owner changed (exited, pid reused) during lookup.
	ErrUnknown = errors.New("identity_unknown")
	// ErrAmbiguous: the socket is shared by processes that disagree on the
	// executable (fork then exec, or fd passing).
	ErrAmbiguous = errors.New("identity_ambiguous")
)

func unknown(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnknown, fmt.Sprintf(format, args...))
}
