package adminclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// SandboxesPath is where a one-off sandbox is launched in the pod (POST,
// upgraded to the stream its exit comes on) and stopped
// (DELETE SandboxesPath/ID?grace=2s).
const SandboxesPath = "/v1/sandboxes"

// SandboxUpgrade is the Upgrade token of a launch: the connection then
// carries the stop request one way and the exit the other.
const SandboxUpgrade = "airlock-sandbox"

// SandboxSpec is a one-off sandbox the pod launches: in its network, under
// its cgroup, its connections decided by the pod's proxy with Preset.
type SandboxSpec struct {
	// ID names it in the pod's decisions, audit lines and cgroups:
	// letters, digits, '.', '_', '-'; one running at a time per ID.
	ID     string `json:"id"`
	Preset string `json:"preset"`
	// Kind is what its audit lines and decisions call it (a sub-agent's
	// kind); the preset when empty.
	Kind string `json:"kind,omitempty"`
	// Policy, when set, is the hash of the bundle the launcher verified:
	// a pod serving another refuses (412), for the sandbox would be
	// decided by a bundle the launcher did not check.
	Policy string `json:"policy,omitempty"`
	// Command is an absolute binary, then its arguments.
	Command []string `json:"command"`
	// SHA256, when set, pins Command[0]: the sandbox checks it on the
	// very file it execs (sandbox.Config.CommandSHA256).
	SHA256 string `json:"sha256,omitempty"`
	// Env is KEY=VALUE; the pod adds its proxy and CA variables.
	Env []string `json:"env,omitempty"`
	Dir string   `json:"dir"`
	// RW and RO are the paths it may write and read, besides the
	// sandbox's defaults.
	RW  []string `json:"rw,omitempty"`
	RO  []string `json:"ro,omitempty"`
	UID int      `json:"uid"`
	GID int      `json:"gid"`
	// MemoryMax and PidsMax, when set, are lower limits for its cgroup
	// leaf than the pod's for one-offs (its manifest's sandboxes:), which
	// it gets otherwise; higher ones are refused (400).
	MemoryMax int64 `json:"memory_max,omitempty"`
	PidsMax   int64 `json:"pids_max,omitempty"`
	// Stdout, Stderr and Audit are absolute paths the pod creates (0600,
	// O_EXCL, as root, through no link another user could point
	// elsewhere): the command's output, and a copy of its audit lines.
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	Audit  string `json:"audit"`
	// Stdio says the launcher hands the command its own standard streams
	// (LaunchStdio): Stdout and Stderr are then empty, and Audit may be
	// (the pod's audit log has the lines anyway).
	Stdio bool `json:"stdio,omitempty"`
}

// SandboxExit is the one line the pod writes on the stream when the
// sandbox has ended: its exit code (128+N for signal N), or why it could
// not be waited for.
type SandboxExit struct {
	Exit  int    `json:"exit"`
	Error string `json:"error,omitempty"`
}

// Sandbox is a one-off sandbox running in a pod. Its connection to the pod
// is its life line: when it closes (this process died) the pod stops it.
type Sandbox struct {
	conn     net.Conn
	r        *bufio.Reader
	stopOnce sync.Once
	waitOnce sync.Once
	exit     SandboxExit
	err      error
}

// Launch starts spec's sandbox in the pod on socket. A refusal (a preset
// the pod lacks, a relative command, an ID already running, a pod that is
// stopping) or a failed setup is a *StatusError naming the field or step;
// a pod that does not answer is ErrNoPod. ctx bounds the launch, not the
// sandbox's life.
func Launch(ctx context.Context, socket string, spec SandboxSpec) (*Sandbox, error) {
	body, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(http.MethodPost, "http://pod"+SandboxesPath, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	conn, r, err := upgradeTo(ctx, socket, req, SandboxUpgrade, "launch sandbox "+spec.ID+" in the pod")
	if err != nil {
		return nil, err
	}
	return &Sandbox{conn: conn, r: r}, nil
}

// LaunchStdio is Launch for a command that reads and writes the
// launcher's own stdin, stdout and stderr, as `airlock launch` gives them
// to its sandboxes (a terminal, a pipe): once the pod has switched
// protocols it receives the three descriptors over the socket
// (SCM_RIGHTS, with one byte), then launches. A launch that fails past
// that point is Wait's error, with exit 125.
func LaunchStdio(ctx context.Context, socket string, spec SandboxSpec, stdin, stdout, stderr *os.File) (*Sandbox, error) {
	spec.Stdio = true
	s, err := Launch(ctx, socket, spec)
	if err != nil {
		return nil, err
	}
	uc, ok := s.conn.(*net.UnixConn)
	if !ok {
		s.conn.Close()
		return nil, fmt.Errorf("launch sandbox %s in the pod: %T is not a unix socket, descriptors cannot pass", spec.ID, s.conn)
	}
	rights := unix.UnixRights(int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd()))
	if _, _, err := uc.WriteMsgUnix([]byte{0}, rights, nil); err != nil {
		s.conn.Close()
		return nil, fmt.Errorf("launch sandbox %s in the pod: pass the standard streams: %w", spec.ID, err)
	}
	return s, nil
}

// Wait returns the command's exit code once the sandbox has ended (every
// process of it gone), or an error when the pod could not say.
func (s *Sandbox) Wait() (int, error) {
	s.waitOnce.Do(func() {
		defer s.conn.Close()
		line, err := s.r.ReadBytes('\n')
		if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
			s.err = fmt.Errorf("the pod ended the sandbox's stream without its exit: %w", err)
			return
		}
		if err := json.Unmarshal(line, &s.exit); err != nil {
			s.err = fmt.Errorf("the pod's exit line %q: %w", line, err)
			return
		}
		if s.exit.Error != "" {
			s.err = errors.New(s.exit.Error)
		}
	})
	return s.exit.Exit, s.err
}

// Stop asks the pod to stop the sandbox: SIGTERM to its command, and
// after grace every process of it killed. Wait then returns. Safe to call
// more than once and after the end.
func (s *Sandbox) Stop(grace time.Duration) {
	s.stopOnce.Do(func() {
		// One line on the stream: the grace, as Go writes a duration.
		fmt.Fprintf(s.conn, "%s\n", grace)
	})
}

// StopPath is the API path that stops sandbox id after grace.
func StopPath(id string, grace time.Duration) string {
	return SandboxesPath + "/" + url.PathEscape(id) + "?" + url.Values{"grace": {grace.String()}}.Encode()
}
