package connhook

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
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
	forEachForgetRule(t, func(t *testing.T, table *execTable) {
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
		stdin, line, err := StartPiped(t, cmd)
		pid := cmd.Process.Pid
		if line != "failed\n" {
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
		waitForgotten(t, table, pid)
	})
}

// A 64-bit process that executes a 32-bit program becomes a compat task,
// whose return from execve the syscall tracepoints skip: its exec ends at
// sched_process_exec. One that dies inside the exec (a program whose load
// address is past a 32-bit process's reach, refused past the point of no
// return) reaches neither, and ends it as it exits. Either way the record
// goes with the process, with group_dead and without: the main thread's
// rule keeps it while an exec runs.
func TestExecTableEndsA32BitExec(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the programs are 32-bit x86")
	}
	testutil.RequireRoot(t, "BPF tracepoints")
	dir := t.TempDir()
	spin, unloadable := filepath.Join(dir, "spin32"), filepath.Join(dir, "unloadable32")
	for path, base := range map[string]uint32{spin: 0x08048000, unloadable: 0xfffff000} {
		if err := os.WriteFile(path, elf32(base), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	forEachForgetRule(t, func(t *testing.T, table *execTable) {
		cmd := exec.Command(spin)
		if err := cmd.Start(); errors.Is(err, syscall.ENOEXEC) {
			testutil.RequireFeature(t, "a kernel that runs 32-bit programs (IA32 emulation)", err)
		} else if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		pid := cmd.Process.Pid
		want, _ := filepath.EvalSymlinks(spin)
		testutil.WaitFor(t, fmt.Sprintf("pid %d to run %s", pid, want), func() bool {
			exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
			return exe == want
		})
		testutil.WaitFor(t, fmt.Sprintf("pid %d's exec of a 32-bit program to end on record", pid), func() bool {
			e := table.of(pid)
			return e.Recorded && !e.Running && e.Ended > e.Began
		})
		cmd.Process.Kill()
		cmd.Wait()
		waitForgotten(t, table, pid)

		cmd = exec.Command(unloadable)
		if err := cmd.Start(); err != nil {
			testutil.RequireFeature(t, "a kernel that loads a 32-bit program past the point of no return", err)
		}
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGSEGV {
			t.Fatalf("%s: %v; want it killed inside its exec (SIGSEGV)", unloadable, err)
		}
		waitForgotten(t, table, cmd.Process.Pid)
	})
}

// elf32 is an i386 program loaded at base that loops forever.
func elf32(base uint32) []byte {
	const ehsize, phsize = 52, 32
	code := []byte{0xeb, 0xfe} // jmp .
	size := uint32(ehsize + phsize + len(code))
	b := []byte{0x7f, 'E', 'L', 'F', 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0} // 32-bit, little-endian
	le := binary.LittleEndian
	b = le.AppendUint16(b, 2) // ET_EXEC
	b = le.AppendUint16(b, 3) // EM_386
	b = le.AppendUint32(b, 1)
	b = le.AppendUint32(b, base+ehsize+phsize) // entry
	b = le.AppendUint32(b, ehsize)             // program headers
	b = le.AppendUint32(b, 0)                  // section headers
	b = le.AppendUint32(b, 0)
	b = le.AppendUint16(b, ehsize)
	b = le.AppendUint16(b, phsize)
	b = le.AppendUint16(b, 1)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint32(b, 1) // PT_LOAD, of the whole file
	b = le.AppendUint32(b, 0)
	b = le.AppendUint32(b, base)
	b = le.AppendUint32(b, base)
	b = le.AppendUint32(b, size)
	b = le.AppendUint32(b, size)
	b = le.AppendUint32(b, 5) // r-x
	b = le.AppendUint32(b, 0x1000)
	return append(b, code...)
}

// refusedExec forks a child that never executes a program (no record),
// which installs a seccomp filter of its own refusing execve and calls
// it: the exit tracepoint fires, the entry one does not.
const refusedExec = `#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
	int status;
	if (fork() == 0) {
		struct sock_filter f[] = {
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_execve, 0, 1),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		};
		struct sock_fprog p = {sizeof f / sizeof f[0], f};
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &p)) {
			perror("seccomp");
			_exit(1);
		}
		execve("/bin/true", (char *[]){"true", NULL}, (char *[]){NULL});
		dprintf(1, "%s\n", errno == EPERM ? "refused" : "not refused");
		_exit(0);
	}
	wait(&status);
	return 0;
}
`

// An end without its begin, which any process can make (refusedExec),
// is no exec lost: lost set then would refuse every connector without a
// record (a forked worker that never executed a program) that connected
// before it, host-wide.
func TestExecTableLosesNoExecAtAnEndWithoutItsBegin(t *testing.T) {
	testutil.RequireRoot(t, "BPF tracepoints")
	helper := BuildHelper(t, refusedExec)
	forEachForgetRule(t, func(t *testing.T, table *execTable) {
		out, err := exec.Command(helper).CombinedOutput()
		if err != nil || string(out) != "refused\n" {
			t.Fatalf("%s: %q, %v; want its child's execve refused", helper, out, err)
		}
		// The test never executed a program since the table was made.
		if e := table.of(os.Getpid()); e.Recorded || e.Lost != 0 {
			t.Errorf("execs of a process without a record = %+v after an execve refused before its entry; want no exec lost", e)
		}
	})
}

// leaksRecord's main thread exits alone; then another thread's execve
// fails, and that thread exits: without group_dead the record its exec
// made is no main thread's to take out.
const leaksRecord = `#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *orphan(void *unused) {
	usleep(50000);
	execve("/nonexistent", (char *[]){"nonexistent", NULL}, (char *[]){NULL});
	syscall(SYS_exit, 0);
	return unused;
}

int main(void) {
	pthread_t t;
	pthread_create(&t, NULL, orphan, NULL);
	syscall(SYS_exit, 0);
}
`

// Records that outlive their processes where the exit program cannot
// take them out (the main thread's rule) are swept: repeated, they would
// fill the table.
func TestExecTableSweepsTheDeadsRecords(t *testing.T) {
	testutil.RequireRoot(t, "BPF tracepoints")
	helper := BuildHelper(t, leaksRecord)
	table, err := newExecTable(-1)
	if err != nil {
		t.Fatal(err)
	}
	defer table.close()
	var pids []int
	for range 20 {
		cmd := exec.Command(helper)
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, cmd.Process.Pid)
	}
	testutil.WaitFor(t, "the dead processes' records to be swept", func() bool {
		for _, pid := range pids {
			if table.of(pid).Recorded {
				return false
			}
		}
		return true
	})
}

// BuildHelper compiles the C program source (the package's external tests
// use it too).
func BuildHelper(t *testing.T, source string) string {
	t.Helper()
	gcc := testutil.RequireTool(t, "gcc")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "helper.c"), []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	helper := filepath.Join(dir, "helper")
	if out, err := exec.Command(gcc, "-O2", "-pthread", "-o", helper, filepath.Join(dir, "helper.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return helper
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

// forEachForgetRule runs f on an exec table forgetting a process by each
// rule: the kernel's group_dead, where it has one (an older kernel's case
// is the other), and the main thread's.
func forEachForgetRule(t *testing.T, f func(t *testing.T, table *execTable)) {
	off, missing := groupDeadOffset()
	for _, tc := range []struct {
		name      string
		groupDead int
		missing   error
	}{{"group_dead", off, missing}, {"main thread", -1, nil}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.missing != nil {
				t.Skipf("sched_process_exit has no group_dead: %v", tc.missing)
			}
			table, err := newExecTable(tc.groupDead)
			if err != nil {
				t.Fatal(err)
			}
			defer table.close()
			f(t, table)
		})
	}
}

// waitForgotten waits for pid's record to go, as the process has: at its
// last thread's exit with group_dead, at the next sweep without it.
func waitForgotten(t *testing.T, table *execTable, pid int) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("pid %d's execs to go with it", pid), func() bool { return !table.of(pid).Recorded })
}

// StartPiped starts cmd, killed when the test ends, and reads its first
// line: what a helper says once it is ready for the test's next step,
// which the test writes to stdin.
func StartPiped(t *testing.T, cmd *exec.Cmd) (stdin io.Writer, line string, err error) {
	t.Helper()
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err = bufio.NewReader(out).ReadString('\n')
	return in, line, err
}
