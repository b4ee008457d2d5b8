package sandbox

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// holders are the write ends of the holders' pipes (CloseAfterExit), open
// until this process exits: referenced so that no finalizer closes one
// sooner.
var holders struct {
	sync.Mutex
	life []*os.File
}

// CloseAfterExit hands files to a stage process of their own, which holds
// them until this process has exited, then exits: they are closed after
// this process's exit instead of by it. The caller's copies are closed.
// Call it just before the process exits.
//
// It is for descriptors whose last close is slow in the kernel: a
// tracepoint's perf event waits out RCU grace periods as it detaches (~70
// ms each on the 2-vCPU VM), an exit closes its descriptors one after
// another, and whoever waits for the exit waits for all of them: a shell,
// or a spawner starting sandboxes at scale (the connect hook's seven
// tracepoints took ~470 ms of each `airlock launch --preset`'s exit). The
// holder is this process's child, not waited for; once this process is
// gone, its nearest subreaper reaps it.
//
// As PID 1 (a container's) it hands nothing over: the namespace ends only
// once every process in it has, the holder too.
func CloseAfterExit(files []*os.File) error {
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if len(files) == 0 || os.Getpid() == 1 {
		return nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd, err := stageCommand(files, modeHolder, strconv.Itoa(len(files)))
	if err != nil {
		w.Close()
		return err
	}
	cmd.Stdin = r
	// Its own session, as the reaper's: a ^C to the launcher's process
	// group is not the holder's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := startManaged(cmd); err != nil {
		w.Close()
		return fmt.Errorf("start the descriptors' holder: %w", err)
	}
	holders.Lock()
	holders.life = append(holders.life, w)
	holders.Unlock()
	go waitManaged(cmd)
	return nil
}

// runHolder is the holder process: what it was handed (args[0]
// descriptors, laid out by stageCommand) is closed as it exits, once its
// stdin, a pipe only the launcher writes, reaches EOF. It keeps nothing
// else the launcher inherited (a descriptor open until the holder exits
// would keep its reader waiting as long).
func runHolder(args []string) {
	n, err := strconv.Atoi(strings.Join(args, " "))
	if err != nil || n < 1 {
		fmt.Fprintf(os.Stderr, "airlock: descriptors' holder: %q is no count\n", args)
		os.Exit(2)
	}
	after := 3 + n // the first past those handed, fdStage skipped
	if n > fdStage-3 {
		after++
	}
	// A kernel without close_range runs no sandbox either (the command
	// stage's closeFDs); were it refused, the holder would only keep a
	// reader of one waiting until it exits.
	unix.CloseRange(uint(after), ^uint(0), 0)
	io.Copy(io.Discard, os.Stdin) // returns at EOF: the launcher is gone
	os.Exit(0)
}
