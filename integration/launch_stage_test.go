package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// children lists the processes a launcher forked, under any of its threads.
func children(pid int) []string {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var kids []string
	for _, task := range tasks {
		raw, _ := os.ReadFile(task)
		kids = append(kids, strings.Fields(string(raw))...)
	}
	return kids
}

// A launcher that embeds the stage runs the sandbox's init and its cgroup
// reaper from the sealed memory file, not from airlock (whose start costs
// them several times more), and hands neither that file's descriptor.
func TestLaunchRunsEmbeddedStage(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch (uid switch, namespaces)")
	cmd := exec.Command(airlockBin, "launch", "--net", "none", "--user", "61000", "--", "/bin/sleep", "60")
	cmd.Env = cleanEnv()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	// The reaper and the init, each once it has executed its stage.
	staged := func(pid string) bool {
		exe, _ := os.Readlink("/proc/" + pid + "/exe")
		return strings.HasPrefix(exe, "/memfd:airlock-stage")
	}
	var kids []string
	testutil.WaitFor(t, "the launcher's reaper and init", func() bool {
		kids = children(cmd.Process.Pid)
		n := 0
		for _, k := range kids {
			if staged(k) {
				n++
			}
		}
		return n == 2
	})
	for _, k := range kids {
		fds, _ := filepath.Glob("/proc/" + k + "/fd/*")
		for _, fd := range fds {
			if target, _ := os.Readlink(fd); strings.Contains(target, "airlock-stage") {
				t.Errorf("process %s holds the stage's memory file as %s", k, fd)
			}
		}
	}
}
