package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// children lists the processes a launcher forked, under any of its threads.
func children(pid string) []string {
	tasks, _ := filepath.Glob("/proc/" + pid + "/task/*/children")
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
	testutil.WaitFor(t, "the launcher's reaper and init to run the stage", func() bool {
		n := 0
		for _, k := range children(strconv.Itoa(cmd.Process.Pid)) {
			if staged(k) {
				n++
			}
		}
		return n == 2
	})
	// Each was executed from the file by a descriptor number and closes
	// it first thing; the command, below the init, never has it.
	testutil.WaitFor(t, "every process of the launch to hold no descriptor of the stage's memory file", func() bool {
		kids := children(strconv.Itoa(cmd.Process.Pid))
		for _, k := range kids {
			kids = append(kids, children(k)...)
		}
		for _, k := range kids {
			fds, _ := filepath.Glob("/proc/" + k + "/fd/*")
			for _, fd := range fds {
				if target, _ := os.Readlink(fd); strings.Contains(target, "airlock-stage") {
					return false
				}
			}
		}
		return true
	})
}
