// Package local is the local substrate: a sub-agent runs on this host in
// a fresh sandbox, started by a Launcher, whose proxy decides with the
// kind's preset of the verified bundle, under the kind's timeout.
package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
)

// Files the substrate writes in the sub-agent's directory.
const (
	StdoutFile = "stdout.log"
	StderrFile = "stderr.log"
	AuditFile  = "audit.jsonl"
)

// DefaultGrace is how long a sub-agent has, after the SIGTERM of a
// timeout or a stop, before every process of its sandbox is killed.
const DefaultGrace = 2 * time.Second

// Substrate runs jobs through a Launcher.
type Substrate struct {
	// Launcher starts each job's sandbox (required).
	Launcher Launcher
	// Grace is DefaultGrace when zero.
	Grace time.Duration
	// UID and GID the sub-agent runs as (DefaultUID when zero): its work
	// directory is made theirs.
	UID, GID int
}

// DefaultUID is the sandbox's uid and gid unless set, as airlock launch's.
const DefaultUID = 998

// Async: the local substrate runs a sub-agent in the foreground only.
func (s Substrate) Async() bool { return false }

// Run launches the job's binary in its sandbox, waits for it under the
// kind's timeout, and judges its last stdout line.
func (s Substrate) Run(ctx context.Context, j spawn.Job) (spawn.Result, error) {
	uid, gid := s.ids()
	if err := reachable(j.Dir); err != nil {
		return spawn.Result{}, err
	}
	// The spawn directory and its task files are root's, readable by the
	// sandbox's group and no one else; work/ is the sub-agent's.
	for _, name := range []string{"", "prompt.txt", "task", "kind.yaml"} {
		if err := os.Chown(filepath.Join(j.Dir, name), -1, gid); err != nil {
			return spawn.Result{}, fmt.Errorf("give the sub-agent's group its task: %w", err)
		}
	}
	if err := os.Chown(j.Work, uid, gid); err != nil {
		return spawn.Result{}, fmt.Errorf("give the sub-agent its work directory: %w", err)
	}
	spec := s.spec(j)
	res := spawn.Result{Started: time.Now().UTC()}
	// The kind's timeout bounds the setup too: one that hangs (a path on
	// a hung mount) would otherwise hold the spawn past it.
	lctx, cancel := ctx, context.CancelFunc(func() {})
	if j.Kind.Timeout > 0 {
		lctx, cancel = context.WithTimeoutCause(ctx, j.Kind.Timeout, fmt.Errorf("the kind's timeout of %s passed", j.Kind.Timeout))
	}
	sb, err := s.Launcher.Launch(lctx, spec)
	cancel()
	if err != nil {
		return res, fmt.Errorf("the sandbox %s could not be set up: %w", spec.ID, err)
	}
	code, timedOut, err := s.wait(ctx, sb, j.Kind.Timeout)
	res.Ended = time.Now().UTC()
	res.Exit = code
	if timedOut {
		res.Status, res.Exit = ledger.Timeout, spawn.ExitTimeout
		res.Detail = fmt.Sprintf("killed after the kind's timeout of %s (with every process of its sandbox)", j.Kind.Timeout)
		return res, nil
	}
	if err := ctx.Err(); err != nil {
		res.Status, res.Detail = ledger.Failed, fmt.Sprintf("stopped before it ended (%v): the sub-agent and its sandbox were killed", context.Cause(ctx))
		return res, nil
	}
	if err != nil {
		// Launched, the sub-agent ran, or may have, and spent: its end
		// unseen (a pod gone with its stream) is a failure charged what
		// its output says, or the kind's estimate, never one released
		// at nothing as a sandbox that could not start is.
		res.Exit = 0
		if last, lerr := lastLine(spec.Stdout); lerr == nil {
			res.Judge(last)
		}
		res.Status, res.Exit = ledger.Failed, 1
		res.Detail = fmt.Sprintf("the end of the sandbox %s was not seen, so its exit code is not known: %v", spec.ID, err)
		return res, nil
	}
	last, err := lastLine(spec.Stdout)
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

// spec is the job's sandbox: the kind's binary, args and env, in its work
// directory (the one place it may write), its task's files readable, its
// output and audit lines in its directory.
func (s Substrate) spec(j spawn.Job) Spec {
	uid, gid := s.ids()
	sp := Spec{
		ID: "spawn-" + j.ID, Preset: j.Kind.Preset, Kind: j.Kind.Name,
		Command: append([]string{j.Kind.Binary}, j.Args...), SHA256: j.Kind.SHA256,
		Dir: j.Work, RW: []string{j.Work}, RO: []string{j.Dir},
		UID: uid, GID: gid,
		Stdout: filepath.Join(j.Dir, StdoutFile), Stderr: filepath.Join(j.Dir, StderrFile), Audit: filepath.Join(j.Dir, AuditFile),
	}
	for _, k := range sortedKeys(j.Kind.Env) {
		sp.Env = append(sp.Env, k+"="+j.Kind.Env[k])
	}
	return sp
}

// wait waits for the sandbox; at the timeout (or ctx's end) it stops it
// (SIGTERM, then after the grace every process killed). It returns the
// exit code and whether the timeout fired.
func (s Substrate) wait(ctx context.Context, sb Sandbox, timeout time.Duration) (int, bool, error) {
	type exit struct {
		code int
		err  error
	}
	done := make(chan exit, 1)
	go func() {
		code, err := sb.Wait()
		done <- exit{code, err}
	}()
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	timedOut := false
	select {
	case e := <-done:
		return e.code, false, e.err
	case <-expired:
		timedOut = true
	case <-ctx.Done():
	}
	grace := s.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	sb.Stop(grace)
	e := <-done
	return e.code, timedOut, e.err
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
