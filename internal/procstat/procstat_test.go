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

func TestParse(t *testing.T) {
	tail := " 1 1 0 34816 1 4194560 109 0 0 0 0 0 0 0 20 0 1 0 4242 1 2 3\n"
	for _, c := range []struct {
		name, raw string
		state     string
		ticks     int64
		bad       bool
	}{
		{"plain", "12 (sh) S" + tail, "S", 4242, false},
		// A command may name itself anything: the last ')' ends it.
		{"spaces and parens", "12 (a) Z (b c)) Z" + tail, "Z", 4242, false},
		{"no command", "12 sh S" + tail, "", 0, true},
		{"short", "12 (sh) S 1 1 0\n", "", 0, true},
		{"bad starttime", "12 (sh) S 1 1 0 34816 1 4194560 109 0 0 0 0 0 0 0 20 0 1 0 x 1\n", "", 0, true},
	} {
		state, ticks, err := Parse([]byte(c.raw))
		if (err != nil) != c.bad || state != c.state || ticks != c.ticks {
			t.Errorf("%s: Parse = %q, %d, %v; want %q, %d, error %v", c.name, state, ticks, err, c.state, c.ticks, c.bad)
		}
	}
	raw := []byte("12 (sh) S" + tail)
	if n := testing.AllocsPerRun(100, func() { Parse(raw) }); n != 0 {
		t.Errorf("Parse allocates %v times, want none (it runs per new connection)", n)
	}
}
