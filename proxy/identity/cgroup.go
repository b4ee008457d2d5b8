package identity

import (
	"bytes"
	"fmt"
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
