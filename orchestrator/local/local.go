// Package local is the local substrate: a sub-agent runs on this host as
// a child `airlock launch`, in a fresh sandbox whose proxy decides with
// the kind's preset of the verified bundle, under the kind's timeout.
package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
)

// Files the substrate writes in the sub-agent's directory.
const (
	StdoutFile = "stdout.log"
	StderrFile = "stderr.log"
	AuditFile  = "audit.jsonl"
	// statusFile is the launcher's --json-status: whether the sandbox
	// started at all, which the exit code alone cannot tell (a command
	// may exit 125 too).
	statusFile = "launch-status.json"
)

// DefaultGrace is how long a timed-out launcher has, after SIGTERM, to
// kill its sandbox itself before its whole process group is killed.
const DefaultGrace = 5 * time.Second

// Substrate runs jobs through `airlock launch`.
type Substrate struct {
	// LaunchArgs are flags passed to every launch before the ones the
	// job sets: the bundle (--policy, --policy-lock, ...) and the proxy's
	// settings (--upstream-ca, --resolve, ...). The job's own flags come
	// after them and win: the preset, the bundle's pin, the audit log.
	LaunchArgs []string
	// Grace is DefaultGrace when zero.
	Grace time.Duration
	// UID and GID the sub-agent runs as (DefaultUID when zero): its work
	// directory is made theirs.
	UID, GID int
}

// DefaultUID is the sandbox's uid and gid unless set, as airlock launch's.
const DefaultUID = 998

// stopTimeout is the launcher's --stop-timeout: after the SIGTERM of a
// timeout the sub-agent has this long before the launcher kills the
// sandbox, well within the grace before the group is killed.
const stopTimeout = "2s"

// Async: the local substrate runs a sub-agent in the foreground only.
func (s Substrate) Async() bool { return false }

// Run launches the job's binary in its sandbox, waits for it under the
// kind's timeout, and judges its last stdout line.
func (s Substrate) Run(ctx context.Context, j spawn.Job) (spawn.Result, error) {
	uid, gid := s.ids()
	if err := reachable(j.Work); err != nil {
		return spawn.Result{}, err
	}
	if err := os.Chown(j.Work, uid, gid); err != nil {
		return spawn.Result{}, fmt.Errorf("give the sub-agent its work directory: %w", err)
	}
	// The sub-agent's output is the operator's to read (0600): what it
	// prints may be what it was not meant to send anywhere. It writes
	// through the descriptors it inherits, never by path.
	stdout, err := os.OpenFile(filepath.Join(j.Dir, StdoutFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return spawn.Result{}, err
	}
	defer stdout.Close()
	stderr, err := os.OpenFile(filepath.Join(j.Dir, StderrFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return spawn.Result{}, err
	}
	defer stderr.Close()

	cmd := exec.Command(j.Airlock, s.args(j)...)
	cmd.Dir = j.Work
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// The launcher's environment is the orchestrator's: the proxy in it
	// reads the secrets a preset injects from there; the sandbox scrubs
	// what the command sees.
	cmd.Env = os.Environ()
	// Its own process group: a timeout kills the launcher and whatever
	// it started outside the sandbox, and the launcher's
	// --die-with-parent takes the sandbox with it.
	// Pdeathsig: should the orchestrator die without stopping it (a
	// SIGKILL), the launcher is told to stop, and its sandbox with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	res := spawn.Result{Started: time.Now().UTC()}
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("start %s launch: %w", j.Airlock, err)
	}
	timedOut := s.wait(ctx, cmd, j.Kind.Timeout)
	res.Ended = time.Now().UTC()
	res.Exit = cmd.ProcessState.ExitCode()
	if timedOut {
		res.Status, res.Exit = ledger.Timeout, spawn.ExitTimeout
		res.Detail = fmt.Sprintf("killed after the kind's timeout of %s (with its whole process tree)", j.Kind.Timeout)
		return res, nil
	}
	if err := ctx.Err(); err != nil {
		res.Status, res.Detail = ledger.Failed, fmt.Sprintf("stopped before it ended (%v): the sub-agent and its sandbox were killed", context.Cause(ctx))
		return res, nil
	}
	if step, ok := setupFailed(j.Dir); ok {
		said, _ := lastLine(stderr.Name())
		return res, fmt.Errorf("the sandbox could not be set up (%s): the launcher said %q (%s)", step, spawn.Clip(said), stderr.Name())
	}
	last, err := lastLine(stdout.Name())
	if err != nil {
		return res, err
	}
	res.Judge(last)
	return res, nil
}

func (s Substrate) ids() (int, int) {
	if s.UID == 0 && s.GID == 0 {
		return DefaultUID, DefaultUID
	}
	return s.UID, s.GID
}

// args: the operator's launch flags, then the job's, then the command.
func (s Substrate) args(j spawn.Job) []string {
	uid, gid := s.ids()
	args := append([]string{"launch"}, s.LaunchArgs...)
	args = append(args,
		"--preset", j.Kind.Preset,
		"--policy-sha256", j.Policy,
		"--sandbox-id", "spawn-"+j.ID,
		"--audit-log", filepath.Join(j.Dir, AuditFile),
		"--json-status", filepath.Join(j.Dir, statusFile),
		"--rw", j.Work,
		"--ro", j.Dir,
		"--exec", j.Kind.Binary,
		"--cwd", j.Work,
		"--die-with-parent",
		"--stop-timeout", stopTimeout,
		"--user", fmt.Sprintf("%d:%d", uid, gid),
	)
	for _, k := range sortedKeys(j.Kind.Env) {
		args = append(args, "--env", k+"="+j.Kind.Env[k])
	}
	args = append(args, "--", j.Kind.Binary)
	return append(args, j.Args...)
}

// wait waits for the launcher; at the timeout (or ctx's end) it asks the
// launcher to stop (SIGTERM: it stops its sandbox), then after the grace
// kills the whole group. It reports whether the timeout fired.
func (s Substrate) wait(ctx context.Context, cmd *exec.Cmd, timeout time.Duration) bool {
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	timedOut := false
	select {
	case <-done:
		return false
	case <-expired:
		timedOut = true
	case <-ctx.Done():
	}
	pgid := cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	grace := s.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	select {
	case <-done:
	case <-time.After(grace):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
	return timedOut
}

// setupFailed reads the launcher's status: started false names the step.
func setupFailed(dir string) (string, bool) {
	raw, err := os.ReadFile(filepath.Join(dir, statusFile))
	if err != nil {
		return "no launch status: " + err.Error(), true
	}
	var st struct {
		Started bool   `json:"started"`
		Step    string `json:"step"`
		Error   string `json:"error"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Sprintf("launch status %q unreadable: %v", raw, err), true
	}
	if st.Started {
		return "", false
	}
	return fmt.Sprintf("step %q: %s", st.Step, st.Error), true
}

// lastLine is the last non-empty line of the file, read from its end: a
// sub-agent may print a great deal before its result.
func lastLine(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	const maxLine = 1 << 20 // a result line longer than this is not one
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, err
	}
	off := max(size-maxLine, 0)
	buf := make([]byte, size-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	buf = bytes.TrimRight(buf, "\r\n \t")
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
		buf = buf[i+1:]
	}
	return buf, nil
}
