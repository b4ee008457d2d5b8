package sandbox

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
)

// Leaf is the sandbox's cgroup: a v2 leaf (for the proxy's candidate list
// and connect hook, and cgroup.kill) and the groups that enforce memory.max
// and pids.max, which are the v2 leaf when its controllers are enabled and
// v1 groups on a hybrid host. Without a v2 leaf, a v1 freezer group lets
// Kill stop the sandbox's processes before killing them, so none can fork
// past the kill.
type Leaf struct {
	V2      string   // "" when cgroup v2 is not writable
	Joined  []string // every directory the sandbox joins (joinCgroup)
	freezer string   // v1 freezer group, only without a v2 leaf

	reaper *reaper
}

// LeafConfig says where the sandbox's groups go and what they enforce.
type LeafConfig struct {
	// Parent is a cgroup v2 directory; "" means the root of the v2
	// hierarchy. Only without one does a sandbox fall back to cgroup v1
	// when v2 is not writable.
	Parent string
	// ID names the groups: airlock-<ID>.
	ID string
	// MemoryMax and PidsMax are limits; 0 means none. A limit asked for
	// is never dropped silently: one that cannot be enforced is an error.
	MemoryMax, PidsMax int64
	// Reap starts a process outside the sandbox that kills and removes
	// the groups if the launcher dies without doing it (SIGKILL), so no
	// exit path leaks them. Off for a sandbox meant to outlive its
	// launcher (DieWithParent false).
	Reap bool
	// Remove are absolute paths the reaper removes too (os.RemoveAll)
	// when the launcher dies without removing them: a launch's own
	// temporary files (its proxy's CA bundle). Only with a reaper of its
	// own (Reap, no ParentReaped tree above it); else they are the
	// launcher's alone.
	Remove []string
	// ParentReaped says a reaper already covers Parent's whole tree
	// (StartTreeReaper, a pod's), and the v1 groups of Parent's name
	// (RemoveV1Tree): the leaf's v1 limit groups on a hybrid host go
	// there, as its v2 group does under Parent, so that they are that
	// tree's to remove, and leaves of two trees never share a name.
	ParentReaped bool
	// Logger says what is lost without a v2 leaf; slog.Default() when nil.
	Logger *slog.Logger
}

// LeafName is the name of sandbox id's group under its parent: a pod
// finds its services' and one-offs' groups by it.
func LeafName(id string) string { return "airlock-" + id }

// NewLeaf creates the sandbox's groups, LeafName(id).
func NewLeaf(lc LeafConfig) (*Leaf, error) {
	if lc.MemoryMax < 0 || lc.PidsMax < 0 {
		return nil, fmt.Errorf("cgroup limits must not be negative (memory.max %d, pids.max %d)", lc.MemoryMax, lc.PidsMax)
	}
	l := &Leaf{}
	name := LeafName(lc.ID)
	parent, err := lc.Parent, error(nil)
	if parent == "" {
		parent, err = cgroup2.Mount()
	}
	if err == nil {
		l.V2, err = cgroup2.Create(parent, name)
	}
	if err != nil && lc.Parent != "" {
		// A parent was named (a pod's group): a leaf elsewhere would put
		// the sandbox outside it, where nothing decides for it.
		return nil, err
	}
	if err != nil {
		log := lc.Logger
		if log == nil {
			log = slog.Default()
		}
		log.Warn("cgroup v2 not writable: the proxy finds the sandbox's processes by scanning its process tree, and there is no connect hook", "err", err)
		if l.freezer, err = createV1("freezer", "", name); err != nil {
			return nil, fmt.Errorf("without a cgroup v2 leaf the sandbox needs a v1 freezer group, to kill all of its processes: %w", err)
		}
		l.Joined = append(l.Joined, l.freezer)
	} else {
		l.Joined = append(l.Joined, l.V2)
	}
	v1Parent := ""
	if lc.ParentReaped && lc.Parent != "" {
		v1Parent = filepath.Base(lc.Parent)
	}
	limits := map[string]int64{"memory": lc.MemoryMax, "pids": lc.PidsMax}
	for _, ctrl := range []string{"memory", "pids"} {
		v := limits[ctrl]
		if v == 0 {
			continue
		}
		dir, err := l.limitDir(ctrl, v1Parent, name)
		if err == nil {
			err = writeLimit(dir, ctrl, v)
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("cannot enforce %s.max=%d: %w", ctrl, v, err), l.Destroy())
		}
	}
	if lc.Reap && !(lc.ParentReaped && l.under(lc.Parent, v1Parent)) {
		if l.reaper, err = startReaper(l.V2, l.freezer, l.Joined, lc.Remove); err != nil {
			return nil, errors.Join(err, l.Destroy())
		}
	}
	return l, nil
}

// under says whether every group of the leaf is below dir, or, a v1
// group, below the v1 group v1Parent of its controller (never below "",
// no parent named).
func (l *Leaf) under(dir, v1Parent string) bool {
	if dir == "" {
		return false
	}
	prefix := filepath.Clean(dir) + "/"
	for _, d := range l.Joined {
		v1 := v1Parent != "" && filepath.Base(filepath.Dir(d)) == v1Parent && filepath.Dir(filepath.Dir(filepath.Dir(d))) == "/sys/fs/cgroup"
		if !strings.HasPrefix(d, prefix) && !v1 {
			return false
		}
	}
	return true
}

// limitDir is where controller ctrl is enforced: the v2 leaf when the
// controller is enabled for it, else a v1 group of that controller, under
// v1Parent ("" for the controller's root).
func (l *Leaf) limitDir(ctrl, v1Parent, name string) (string, error) {
	if l.V2 != "" {
		raw, _ := os.ReadFile(filepath.Join(filepath.Dir(l.V2), "cgroup.subtree_control"))
		for _, enabled := range strings.Fields(string(raw)) {
			if enabled == ctrl {
				return l.V2, nil
			}
		}
	}
	dir, err := createV1(ctrl, v1Parent, name)
	if err != nil {
		return "", err
	}
	l.Joined = append(l.Joined, dir)
	return dir, nil
}

// v1Controllers are the v1 hierarchies a leaf may have groups in.
var v1Controllers = []string{"memory", "pids", "freezer"}

// createV1 makes the v1 group name of controller ctrl, under parent when
// that is not "" (made too, unless it is there).
func createV1(ctrl, parent, name string) (string, error) {
	v1 := filepath.Join("/sys/fs/cgroup", ctrl)
	if _, err := os.Stat(filepath.Join(v1, "cgroup.procs")); err != nil {
		return "", fmt.Errorf("neither cgroup v2 nor v1 offers the %s controller", ctrl)
	}
	if parent != "" {
		v1 = filepath.Join(v1, parent)
		if err := os.Mkdir(v1, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("create cgroup %s: %w", v1, err)
		}
	}
	return cgroup2.Create(v1, name)
}

// RemoveV1Tree removes, as RemoveTree does, the v1 groups named name at
// the root of each v1 controller's hierarchy, where the limit groups of a
// leaf whose parent is name go (LeafConfig.Parent); found says whether
// there were any.
func RemoveV1Tree(name string) (found bool, err error) {
	var errs []error
	for _, ctrl := range v1Controllers {
		dir := filepath.Join("/sys/fs/cgroup", ctrl, name)
		if !exists(dir) {
			continue
		}
		found = true
		errs = append(errs, RemoveTree(dir))
	}
	return found, errors.Join(errs...)
}

func writeLimit(dir, ctrl string, v int64) error {
	files := map[string][]string{
		"memory": {"memory.max", "memory.limit_in_bytes"},
		"pids":   {"pids.max"},
	}[ctrl]
	for _, f := range files {
		p := filepath.Join(dir, f)
		if _, err := os.Stat(p); err == nil {
			if err := os.WriteFile(p, []byte(strconv.FormatInt(v, 10)), 0); err != nil {
				return err
			}
			return noSwap(dir, f, v)
		}
	}
	return fmt.Errorf("%s has no %s limit file", dir, ctrl)
}

// noSwap holds a memory limit (written to file) to memory: past it, a
// group that may swap spills into the host's swap without bound, and one
// allocation thrashes the host instead of meeting the OOM killer. v2 has
// no swap for the group; v1 limits memory and swap together to the
// memory's limit (written after it: it may not be lower). Without swap
// accounting the files are absent, and the kernel keeps no count to bound.
func noSwap(dir, file string, v int64) error {
	f, val := "memory.swap.max", "0"
	if file == "memory.limit_in_bytes" {
		f, val = "memory.memsw.limit_in_bytes", strconv.FormatInt(v, 10)
	}
	p := filepath.Join(dir, f)
	if _, err := os.Stat(p); err != nil {
		return nil
	}
	return os.WriteFile(p, []byte(val), 0)
}

// OOMKills is how many processes the kernel's OOM killer has killed in the
// sandbox's groups: v2 memory.events and v1 memory.oom_control both count
// them as oom_kill.
func (l *Leaf) OOMKills() int64 {
	var n int64
	for _, d := range l.Joined {
		// A group without a memory controller counts none.
		k, _ := cgroup2.OOMKills(d)
		n += k
	}
	return n
}

// Kill kills every process in the sandbox's groups, forks in flight
// included: cgroup.kill on v2 does it atomically; on v1 the freezer stops
// them first, so none forks between the listing and the kill.
func (l *Leaf) Kill() error {
	return killGroups(l.V2, l.freezer, l.Joined)
}

func killGroups(v2, freezer string, joined []string) error {
	if v2 != "" {
		err := os.WriteFile(filepath.Join(v2, "cgroup.kill"), []byte("1"), 0)
		if err == nil || errors.Is(err, os.ErrNotExist) && !exists(v2) {
			return nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("kill cgroup %s: %w", v2, err)
		}
		// A kernel before 5.14 has no cgroup.kill: kill pid by pid.
	}
	if freezer != "" && exists(freezer) {
		if err := freeze(freezer); err != nil {
			return err
		}
		// Killed while frozen, they die when thawed.
		defer os.WriteFile(filepath.Join(freezer, "freezer.state"), []byte("THAWED"), 0)
	}
	for _, d := range joined {
		for _, pid := range procs(d) {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
				return fmt.Errorf("kill pid %d of cgroup %s: %w", pid, d, err)
			}
		}
	}
	return nil
}

// freezeWait bounds how long a v1 freezer may take to stop every task.
const freezeWait = 5 * time.Second

// freeze stops every task of a v1 freezer group and waits until the
// kernel says FROZEN: while it says FREEZING a task may still fork, and a
// child listed after the kill would survive it.
func freeze(dir string) error {
	state := filepath.Join(dir, "freezer.state")
	if err := os.WriteFile(state, []byte("FROZEN"), 0); err != nil {
		return fmt.Errorf("freeze cgroup %s: %w", dir, err)
	}
	deadline := time.Now().Add(freezeWait)
	for {
		raw, err := os.ReadFile(state)
		if err == nil && strings.TrimSpace(string(raw)) == "FROZEN" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("freeze cgroup %s: still %q after %v", dir, strings.TrimSpace(string(raw)), freezeWait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Destroy kills what is left in the groups and removes them. A group the
// kernel will not remove (a process that would not die) is an error that
// names it, never ignored.
func (l *Leaf) Destroy() error {
	err := destroyGroups(l.V2, l.freezer, l.Joined)
	if l.reaper != nil {
		l.reaper.release()
	}
	return err
}

// cgroupRemoveWait bounds how long Destroy waits for killed processes to
// leave their groups: the kernel frees a group only once its last process
// has been reaped.
const cgroupRemoveWait = 10 * time.Second

func destroyGroups(v2, freezer string, joined []string) error {
	killErr := killGroups(v2, freezer, joined)
	var errs []error
	deadline := time.Now().Add(cgroupRemoveWait)
	// Children before parents would matter for nested groups; these are
	// siblings in different hierarchies, so any order removes them.
	for _, d := range joined {
		for {
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("remove cgroup %s (processes left: %v): %w", d, procs(d), err))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if len(errs) > 0 && killErr != nil {
		errs = append(errs, killErr)
	}
	return errors.Join(errs...)
}

// procs lists a group's processes.
func procs(dir string) []int {
	raw, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var out []int
	for _, f := range strings.Fields(string(raw)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// RemoveTree kills every process in the cgroup directory dir and its
// descendants (cgroup.kill covers them on v2) and removes the groups,
// deepest first: a pod's group, with its services' leaves. A v1 group (a
// memory group on a hybrid host) has no cgroup.kill: its processes are
// killed one by one as each group is removed.
func RemoveTree(dir string) error {
	v2 := dir
	if !exists(filepath.Join(dir, "cgroup.events")) {
		v2 = ""
	}
	if err := killGroups(v2, "", nil); err != nil {
		return err
	}
	var dirs []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := destroyGroups("", "", []string{dirs[i]}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pauseGroups freezes (or thaws) the sandbox's processes: a v2 group's
// cgroup.freeze, a v1 freezer group's state. It fails when none of dirs
// can be.
func pauseGroups(dirs []string, paused bool) error {
	v2, v1 := "0", "THAWED"
	if paused {
		v2, v1 = "1", "FROZEN"
	}
	for _, d := range dirs {
		if os.WriteFile(filepath.Join(d, "cgroup.freeze"), []byte(v2), 0) == nil ||
			os.WriteFile(filepath.Join(d, "freezer.state"), []byte(v1), 0) == nil {
			return nil
		}
	}
	return fmt.Errorf("none of the sandbox's cgroups %q has a freezer", dirs)
}
