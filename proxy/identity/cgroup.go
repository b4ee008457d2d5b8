package identity

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
)

// readCgroup returns the cgroup v2 path of the process: the "0::" line of
// its cgroup file, read through its pinned directory like the rest of the
// description, so that a reused pid cannot lend its cgroup. A host with
// only cgroup v1 has no such line: "".
func readCgroup(d procDir) (string, error) {
	buf := procBufs.Get().(*[4096]byte)
	defer procBufs.Put(buf)
	raw, err := d.read("cgroup", buf[:])
	if err != nil {
		return "", err
	}
	if len(raw) == len(buf) {
		// The v2 line comes last on a hybrid host: a cut file may
		// have lost it, which must not read as "no cgroup v2".
		return "", fmt.Errorf("cgroup file larger than %d bytes", len(buf))
	}
	// The v2 line is the first on a v2-only host, the last on a hybrid one.
	line, ok := bytes.CutPrefix(raw, []byte("0::"))
	if !ok {
		i := bytes.Index(raw, []byte("\n0::"))
		if i < 0 {
			return "", nil
		}
		line = raw[i+4:]
	}
	path, _, _ := bytes.Cut(line, []byte("\n"))
	return string(path), nil
}

// CgroupPath converts dir, a directory under the cgroup v2 mount
// (/sys/fs/cgroup/airlock-pod/agent, or under /sys/fs/cgroup/unified on a
// hybrid host), to the path /proc/<pid>/cgroup shows for its processes
// and Process.Cgroup holds ("/airlock-pod/agent"). It assumes the mount
// shows the hierarchy from the proxy's cgroup namespace root, as a
// cgroup2 mount does.
func CgroupPath(dir string) (string, error) {
	mnt, err := cgroup2.Mount()
	if err != nil {
		return "", err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(mnt, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("cgroup %s is not under the cgroup v2 mount %s", dir, mnt)
	}
	if rel == "." {
		return "/", nil
	}
	return "/" + rel, nil
}
