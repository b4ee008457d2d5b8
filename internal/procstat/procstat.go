// Package procstat reads what /proc says of a process that survives its
// pid being reused: its start time after boot, and the boot itself.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Stat reads pid's state and start time (clock ticks after boot) from
// /proc/PID/stat.
func Stat(pid int) (state string, ticks int64, err error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, err
	}
	// The fields after the command's closing parenthesis: state is the
	// first (field 3), starttime the 20th (field 22).
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return "", 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 20 {
		return "", 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ticks, err = strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("/proc/%d/stat: starttime %q", pid, f[19])
	}
	return f[0], ticks, nil
}

// Dead says whether a state Stat read is a process that has exited (a
// zombie, or dead).
func Dead(state string) bool { return state == "Z" || state == "X" }

// BootID is this boot's random id: a pid and start time recorded under
// another boot name no process of this one.
func BootID() (string, error) {
	raw, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(raw)), nil
}
