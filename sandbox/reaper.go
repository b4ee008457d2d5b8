package sandbox

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// reaper is a process outside the sandbox that outlives a launcher killed
// with SIGKILL, which can clean up nothing itself: the PID namespace takes
// the sandbox's processes with it, but its cgroup directories would stay.
// The reaper holds the read end of a pipe whose only writer is the
// launcher; when the pipe reaches EOF (the launcher exited, however), it
// kills what is left in the groups and removes them.
type reaper struct {
	cmd  *exec.Cmd
	life *os.File // the write end; closing it releases the reaper
}

func startReaper(v2, freezer string, dirs []string) (*reaper, error) {
	self, err := stageExe()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	args := append([]string{"airlock", Stage2Arg, modeReaper, orDash(v2), orDash(freezer)}, dirs...)
	cmd := &exec.Cmd{
		Path:   self,
		Args:   args,
		Env:    []string{},
		Stdin:  r,
		Stderr: os.Stderr,
		// Its own session: a ^C or a kill of the launcher's process
		// group must not take the reaper along before it has run.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if err := startManaged(cmd); err != nil {
		w.Close()
		return nil, fmt.Errorf("start the cgroup reaper: %w", err)
	}
	return &reaper{cmd: cmd, life: w}, nil
}

// release tells the reaper the launcher is done and waits for it: it finds
// the groups gone and exits.
func (r *reaper) release() {
	r.life.Close()
	waitManaged(r.cmd)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func undash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}

// runReaper is the reaper process: args are v2, freezer, then every group.
func runReaper(args []string) {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "airlock: cgroup reaper: missing arguments")
		os.Exit(2)
	}
	io.Copy(io.Discard, os.Stdin) // returns at EOF: the launcher is gone
	if err := destroyGroups(undash(args[0]), undash(args[1]), args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "airlock: cgroup reaper: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}
