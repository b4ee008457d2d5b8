package connhook

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// An exec from a thread other than the main one kills the main thread,
// whose pid the new program takes: the record stays, with the kernel's
// group_dead and without it. An exec that fails has ended, not running
// still. The record goes when the process does.
func TestExecTableKeepsAThreadsExec(t *testing.T) {
	testutil.RequireRoot(t, "BPF tracepoints")
	py := testutil.RequireTool(t, "/usr/bin/python3")
	off, missing := groupDeadOffset()
	for _, tc := range []struct {
		name      string
		groupDead int
		missing   error
	}{{"group_dead", off, missing}, {"main thread", -1, nil}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.missing != nil {
				// An older kernel, whose case is the other.
				t.Skipf("sched_process_exit has no group_dead: %v", tc.missing)
			}
			table, err := newExecTable(tc.groupDead)
			if err != nil {
				t.Fatal(err)
			}
			defer table.close()
			const script = `import os, sys, threading
try:
    os.execv("/nonexistent", ["nonexistent"])
except OSError:
    print("failed", flush=True)
sys.stdin.readline()
t = threading.Thread(target=os.execv, args=("/bin/sleep", ["sleep", "300"]))
t.start()
t.join()`
			cmd := exec.Command(py, "-c", script)
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			pid := cmd.Process.Pid
			if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "failed\n" {
				t.Fatalf("python: %q, %v", line, err)
			}
			failed := table.of(pid)
			if !failed.Recorded || failed.Running || failed.Ended < failed.Began {
				t.Fatalf("record of pid %d after an exec that failed = %+v; want one that ended", pid, failed)
			}

			io.WriteString(stdin, "go\n")
			sleep, _ := filepath.EvalSymlinks("/bin/sleep")
			testutil.WaitFor(t, fmt.Sprintf("pid %d to run sleep", pid), func() bool {
				exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
				return exe == sleep
			})
			testutil.WaitFor(t, fmt.Sprintf("pid %d's exec of sleep to end on record", pid), func() bool {
				e := table.of(pid)
				return e.Recorded && e.Began > failed.Ended && !e.Running && e.Ended > e.Began
			})

			cmd.Process.Kill()
			cmd.Wait()
			if e := table.of(pid); e.Recorded {
				t.Errorf("pid %d's execs %+v still on record after it exited", pid, e)
			}
		})
	}
}

// group_dead is read where the event's format puts it; a format without
// it (older kernels) says so, and the exit program then keeps a record
// while an exec runs.
func TestGroupDeadOffset(t *testing.T) {
	const older = "format:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n" +
		"\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n" +
		"\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n"
	const newer = older + "\tfield:bool group_dead;\toffset:32;\tsize:1;\tsigned:0;\n"
	if off, err := fieldOffset(newer, "bool group_dead"); off != 32 || err != nil {
		t.Errorf("fieldOffset(a format with group_dead) = %d, %v; want 32", off, err)
	}
	if off, err := fieldOffset(older, "bool group_dead"); off != -1 || err == nil {
		t.Errorf("fieldOffset(a format without group_dead) = %d, %v; want -1 and why", off, err)
	}
}
