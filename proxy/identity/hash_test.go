package identity

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// readBytes is what this process has read through read(2) and the like
// (/proc/self/io's rchar).
func readBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no rchar in /proc/self/io")
	return 0
}

// The connections a program opens together, as it starts, miss the cache
// together: its executable is read once for all of them, not once each,
// and each gets its digest.
func TestHashCacheHashesOnceForConcurrentMisses(t *testing.T) {
	d, err := openProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	k, err := exeKey(d)
	if err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	self, _ = filepath.EvalSymlinks(self)
	want := fileSHA(t, self)
	const lookups = 8
	h := NewHashCache(16)
	before := readBytes(t)
	var wg sync.WaitGroup
	sums := make([]string, lookups)
	errs := make([]error, lookups)
	for i := range lookups {
		wg.Go(func() { sums[i], errs[i] = h.Exe(d, k) })
	}
	wg.Wait()
	read := readBytes(t) - before
	for i := range lookups {
		if errs[i] != nil || sums[i] != want {
			t.Fatalf("lookup %d: %q, %v; want %s", i, sums[i], errs[i], want)
		}
	}
	if size := int64(k.size); read >= 2*size {
		t.Fatalf("%d lookups read %d bytes of a %d-byte executable; want it read once", lookups, read, size)
	}
}
