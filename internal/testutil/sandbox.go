package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SandboxCommand is the pid of a sandbox's command: the one child of its
// init (init is the host pid airlock reports), listed under whichever of
// the init's threads forked it.
func SandboxCommand(init int) (int, error) {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", init))
	var kids []string
	for _, t := range tasks {
		raw, _ := os.ReadFile(t)
		kids = append(kids, strings.Fields(string(raw))...)
	}
	if len(kids) != 1 {
		return 0, fmt.Errorf("sandbox init %d has children %q, want one", init, kids)
	}
	return strconv.Atoi(kids[0])
}
