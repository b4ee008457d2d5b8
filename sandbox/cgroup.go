package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
)

// Leaf is the sandbox's cgroup: a v2 leaf (for the proxy's candidate list
// and connect hook) and the groups that enforce memory.max and pids.max,
// which are the v2 leaf when its controllers are enabled and v1 groups on a
// hybrid host.
type Leaf struct {
	V2     string   // "" when cgroup v2 is not writable
	Joined []string // every directory whose cgroup.procs the sandbox joins
}

// NewLeaf creates the sandbox's groups, airlock-<id>, under parent (a
// cgroup v2 directory; "" means the root of the v2 hierarchy). Limits that
// cannot be enforced are an error: a limit asked for is never dropped
// silently. warn reports what is lost without a v2 leaf.
func NewLeaf(parent, id string, memoryMax, pidsMax int64, warn func(string)) (*Leaf, error) {
	l := &Leaf{}
	name := "airlock-" + id
	var err error
	if parent == "" {
		parent, err = cgroup2.Mount()
	}
	if err == nil {
		l.V2, err = cgroup2.Create(parent, name)
	}
	if err != nil {
		warn(fmt.Sprintf("cgroup v2 not writable (%v): the proxy finds the sandbox's processes by scanning its process tree, and there is no connect hook", err))
	} else {
		l.Joined = append(l.Joined, l.V2)
	}
	limits := map[string]int64{"memory": memoryMax, "pids": pidsMax}
	for _, ctrl := range []string{"memory", "pids"} {
		v := limits[ctrl]
		if v <= 0 {
			continue
		}
		dir, err := l.limitDir(ctrl, name)
		if err == nil {
			err = writeLimit(dir, ctrl, v)
		}
		if err != nil {
			l.Remove()
			return nil, fmt.Errorf("cannot enforce %s.max=%d: %w", ctrl, v, err)
		}
	}
	return l, nil
}

// limitDir is where controller ctrl is enforced: the v2 leaf when the
// controller is enabled for it, else a v1 group of that controller.
func (l *Leaf) limitDir(ctrl, name string) (string, error) {
	if l.V2 != "" {
		raw, _ := os.ReadFile(filepath.Join(filepath.Dir(l.V2), "cgroup.subtree_control"))
		for _, enabled := range strings.Fields(string(raw)) {
			if enabled == ctrl {
				return l.V2, nil
			}
		}
	}
	v1 := filepath.Join("/sys/fs/cgroup", ctrl)
	if _, err := os.Stat(filepath.Join(v1, "cgroup.procs")); err != nil {
		return "", errors.New("neither cgroup v2 nor v1 offers the controller")
	}
	dir, err := cgroup2.Create(v1, name)
	if err != nil {
		return "", err
	}
	l.Joined = append(l.Joined, dir)
	return dir, nil
}

func writeLimit(dir, ctrl string, v int64) error {
	files := map[string][]string{
		"memory": {"memory.max", "memory.limit_in_bytes"},
		"pids":   {"pids.max"},
	}[ctrl]
	for _, f := range files {
		p := filepath.Join(dir, f)
		if _, err := os.Stat(p); err == nil {
			return os.WriteFile(p, []byte(strconv.FormatInt(v, 10)), 0)
		}
	}
	return fmt.Errorf("%s has no %s limit file", dir, ctrl)
}

// Remove deletes the groups; their processes must have exited.
func (l *Leaf) Remove() {
	for _, d := range l.Joined {
		os.Remove(d)
	}
}
