package sandbox

import (
	"fmt"
	"io"
	"os"
	"sync"
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
func CloseAfterExit(files []*os.File) error {
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if len(files) == 0 {
		return nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd, err := stageCommand(files, modeHolder)
	if err != nil {
		w.Close()
		return err
	}
	cmd.Stdin = r
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

// runHolder is the holder process: what it was handed is closed as it
// exits, once its stdin, a pipe only the launcher writes, reaches EOF.
func runHolder() {
	io.Copy(io.Discard, os.Stdin) // returns at EOF: the launcher is gone
	os.Exit(0)
}
