package cgroup2

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The memory files of a group, v2 first, then v1: on a hybrid hierarchy
// the memory controller is a v1 group, and the same questions are asked of
// it (the OOM kills are "oom_kill N" in both).
var (
	oomFiles   = []string{"memory.events", "memory.oom_control"}
	limitFiles = []string{"memory.max", "memory.limit_in_bytes"}
)

// noLimit is the smallest value v1 reports for "no limit" (the largest
// page-aligned int64); v2 says "max".
const noLimit = 1 << 62

// OOMKills is how many processes the kernel's OOM killer has killed in the
// group dir (a v2 group, or a v1 memory group).
func OOMKills(dir string) (int64, error) {
	raw, _, err := readFirst(dir, oomFiles)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	// A kernel before 4.13 does not count them.
	return 0, fmt.Errorf("%s: no oom_kill count in %s", dir, strings.Join(oomFiles, " or "))
}

// MemoryLimit is the group's memory limit in bytes; 0 means none.
func MemoryLimit(dir string) (int64, error) {
	raw, name, err := readFirst(dir, limitFiles)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(raw))
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a limit", filepath.Join(dir, name), s)
	}
	if v >= noLimit {
		return 0, nil
	}
	return v, nil
}

// SetMemoryLimit sets the group's memory limit in bytes. Its caller runs
// as root (a watchdog's --cgroup): the file written is the group's own,
// in a directory on a cgroup filesystem (v2, or v1 on a hybrid host) and
// not through a symbolic link, so that a path pointing elsewhere is not
// written with a number.
func SetMemoryLimit(dir string, v int64) error {
	_, name, err := readFirst(dir, limitFiles)
	if err != nil {
		return err
	}
	d, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("set the memory limit of %s: %w", dir, err)
	}
	defer unix.Close(d)
	var st unix.Statfs_t
	if err := unix.Fstatfs(d, &st); err != nil {
		return fmt.Errorf("set the memory limit of %s: %w", dir, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC && st.Type != unix.CGROUP_SUPER_MAGIC {
		return fmt.Errorf("set the memory limit of %s: not a cgroup's directory (filesystem magic %#x)", dir, st.Type)
	}
	fd, err := unix.Openat(d, name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("set the memory limit of %s: %s: %w", dir, name, err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte(strconv.FormatInt(v, 10))); err != nil {
		return fmt.Errorf("set the memory limit of %s: %w", dir, err)
	}
	return nil
}

// readFirst reads the first of names that dir has.
func readFirst(dir string, names []string) ([]byte, string, error) {
	for _, n := range names {
		raw, err := os.ReadFile(filepath.Join(dir, n))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		return raw, n, nil
	}
	return nil, "", fmt.Errorf("%s is not a memory cgroup: it has none of %s", dir, strings.Join(names, ", "))
}

// NewMemoryGroup makes a group named name with a memory limit and no swap
// to spill into, so that past the limit is the OOM killer: a v2 group at the
// hierarchy's root when v2 has the memory controller, else a v1 memory
// group (a hybrid host). For the tests and benchmarks of what happens at a
// limit; sandbox.RemoveTree removes it.
func NewMemoryGroup(name string, limit int64) (string, error) {
	parent := "/sys/fs/cgroup/memory"
	if mnt, err := Mount(); err == nil {
		if raw, _ := os.ReadFile(filepath.Join(mnt, "cgroup.controllers")); slices.Contains(strings.Fields(string(raw)), "memory") {
			if err := EnableControllers(mnt, "memory"); err != nil {
				return "", err
			}
			parent = mnt
		}
	}
	dir, err := Create(parent, name)
	if err != nil {
		return "", err
	}
	for _, f := range []string{"memory.swap.max", "memory.memsw.limit_in_bytes"} {
		os.WriteFile(filepath.Join(dir, f), []byte("0"), 0) // absent without swap accounting
	}
	if err := SetMemoryLimit(dir, limit); err != nil {
		return "", errors.Join(err, Remove(dir))
	}
	return dir, nil
}
