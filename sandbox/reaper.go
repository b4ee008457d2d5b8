package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
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

func startReaper(v2, freezer string, dirs, remove []string) (*reaper, error) {
	args := append([]string{modeReaper, orDash(v2), orDash(freezer), strconv.Itoa(len(remove))}, remove...)
	return spawnReaper(append(args, dirs...))
}

// TreeReaper is a reaper for a cgroup directory and everything below it (a
// pod's group and its sandboxes' leaves): leaves made under it need no
// reaper each (LeafConfig.Reap false), which saves a process per sandbox.
type TreeReaper struct{ r *reaper }

// StartTreeReaper starts the reaper of dir's tree: when the launcher exits
// without releasing it, it kills every process below dir and removes the
// groups (RemoveTree).
func StartTreeReaper(dir string) (*TreeReaper, error) {
	r, err := spawnReaper([]string{modeTreeReaper, dir})
	if err != nil {
		return nil, err
	}
	return &TreeReaper{r}, nil
}

// Release tells the reaper the launcher has removed the tree itself, and
// waits for it to exit.
func (t *TreeReaper) Release() { t.r.release() }

func spawnReaper(args []string) (*reaper, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd, err := stageCommand(nil, args...)
	if err != nil {
		w.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stderr = r, os.Stderr
	// Its own session: a ^C or a kill of the launcher's process group
	// must not take the reaper along before it has run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
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

// runReaper is the reaper process: args are v2, freezer, the count of
// paths to remove, those paths (LeafConfig.Remove), then every group; or,
// for a tree reaper, the tree's directory alone.
func runReaper(tree bool, args []string) {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	var remove []string
	if !tree && len(args) >= 3 {
		n, err := strconv.Atoi(args[2])
		if err != nil || n < 0 || n > len(args)-3 {
			args = nil
		} else {
			remove = args[3 : 3+n]
			args = append(args[:2:2], args[3+n:]...)
		}
		for _, p := range remove {
			if !filepath.IsAbs(p) {
				args = nil // resolved from "/", not the launcher's directory
			}
		}
	}
	if !tree && len(args) < 2 || tree && len(args) != 1 {
		fmt.Fprintln(os.Stderr, "airlock: cgroup reaper: missing arguments")
		os.Exit(2)
	}
	io.Copy(io.Discard, os.Stdin) // returns at EOF: the launcher is gone
	destroy := func() error {
		err := destroyGroups(undash(args[0]), undash(args[1]), args[2:])
		for _, path := range remove {
			err = errors.Join(err, os.RemoveAll(path))
		}
		return err
	}
	if tree {
		// And the v1 groups of its name, where its leaves' v1 limit
		// groups are (LeafConfig.ParentReaped).
		destroy = func() error {
			_, v1err := RemoveV1Tree(filepath.Base(args[0]))
			return errors.Join(RemoveTree(args[0]), v1err)
		}
	}
	if err := destroy(); err != nil {
		fmt.Fprintf(os.Stderr, "airlock: cgroup reaper: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}
