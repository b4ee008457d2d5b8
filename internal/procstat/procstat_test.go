package procstat

import (
	"os"
	"os/exec"
	"testing"
)

// A live process reads as running with a start time; the same pid after it
// has exited and been reaped reads as no process; the boot id is stable.
func TestStat(t *testing.T) {
	state, ticks, err := Stat(os.Getpid())
	if err != nil || Dead(state) || ticks <= 0 {
		t.Fatalf("Stat(self) = %q, %d, %v; want a live process with a start time", state, ticks, err)
	}
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Stat(cmd.Process.Pid); err == nil {
		t.Errorf("Stat(a reaped process) = nil error")
	}
	a, err := BootID()
	b, _ := BootID()
	if err != nil || a == "" || a != b {
		t.Errorf("BootID = %q, %q, %v; want one non-empty id", a, b, err)
	}
}
