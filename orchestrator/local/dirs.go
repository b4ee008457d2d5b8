package local

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// reachable refuses a work directory the sandbox's uid could not reach:
// every directory above it must let others traverse it (x for other), or
// the sub-agent would fail inside with a bare EACCES. The fix is named.
func reachable(work string) error {
	for dir := filepath.Dir(work); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is mode %v: the sub-agent's uid cannot reach its directory %s below it; chmod o+x %s (or use another --home)", dir, fi.Mode().Perm(), work, dir)
		}
		if dir == "/" || dir == "." {
			return nil
		}
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
