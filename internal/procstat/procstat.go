// Package procstat reads what /proc says of a process that survives its
// pid being reused: its start time after boot, and the boot itself.
package procstat

import (
	"bytes"
	"errors"
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
	state, ticks, err = Parse(raw)
	if err != nil {
		return "", 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return state, ticks, nil
}

// Parse reads the state and start time (clock ticks after boot) from the
// contents of a /proc/PID/stat. It allocates nothing: the proxy's identity
// lookup parses one per new connection.
func Parse(raw []byte) (state string, ticks int64, err error) {
	// The fields after the command's closing parenthesis (the command
	// may hold spaces and parentheses itself): state is the first (field
	// 3), starttime the 20th (field 22).
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return "", 0, errors.New("no command field")
	}
	rest := raw[i+1:]
	for n := 0; ; n++ {
		rest = bytes.TrimLeft(rest, " \n")
		if len(rest) == 0 {
			return "", 0, fmt.Errorf("%d fields after the command, want 20 or more", n)
		}
		end := bytes.IndexAny(rest, " \n")
		if end < 0 {
			end = len(rest)
		}
		switch field := rest[:end]; n {
		case 0:
			state = string(field)
		case 19:
			if ticks, err = strconv.ParseInt(string(field), 10, 64); err != nil {
				return "", 0, fmt.Errorf("starttime %q", field)
			}
			return state, ticks, nil
		}
		rest = rest[end:]
	}
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
