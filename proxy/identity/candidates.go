package identity

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Candidates lists the pids that may own a sandbox's sockets. Searching only
// them is what keeps a lookup cheap; it is also a boundary: a socket owned
// by a process outside the sandbox is not attributed to the sandbox.
type Candidates interface {
	PIDs() ([]int, error)
}

// Cgroup lists the processes of a cgroup v2 directory (and its
// descendants), the sandbox launcher's leaf.
type Cgroup string

func (c Cgroup) PIDs() ([]int, error) {
	var pids []int
	err := filepath.WalkDir(string(c), func(p string, d os.DirEntry, err error) error {
		if gone(p, string(c), err) {
			return nil
		}
		if err != nil {
			return err
		}
		if d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		raw, err := os.ReadFile(p)
		if gone(filepath.Dir(p), string(c), err) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, f := range bytes.Fields(raw) {
			if pid, err := strconv.Atoi(string(f)); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", c, err)
	}
	return pids, nil
}

// gone reports whether err says that a child cgroup of root was removed
// while it was listed: its processes have left, and the rest of the
// listing stands. The root itself gone is an error.
func gone(dir, root string, err error) bool {
	return errors.Is(err, fs.ErrNotExist) && filepath.Clean(dir) != filepath.Clean(root)
}

// Tree lists a root process and its descendants, through
// /proc/<pid>/task/<tid>/children.
type Tree int

func (t Tree) PIDs() ([]int, error) {
	seen := map[int]bool{}
	queue := []int{int(t)}
	buf := make([]byte, 4096)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			continue // exited
		}
		for _, task := range tasks {
			raw, err := readProc("/proc/"+strconv.Itoa(pid)+"/task/"+task.Name()+"/children", buf)
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(raw)) {
				if c, err := strconv.Atoi(f); err == nil {
					queue = append(queue, c)
				}
			}
		}
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	return pids, nil
}

// AllProcesses lists every process on the host: the fallback for a proxy
// that serves host clients with no sandbox boundary to search.
type AllProcesses struct{}

func (AllProcesses) PIDs() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
