package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sys/unix"
)

// fileKey identifies file content without reading it: the same inode with the
// same size and times is the same bytes (a rewrite changes mtime/ctime).
type fileKey struct {
	dev, ino, size      uint64
	mtimeSec, mtimeNsec int64
	ctimeSec, ctimeNsec int64
}

// HashCache hashes executables through /proc/<pid>/exe, which opens the
// file the process is running even if the path was since replaced, and
// caches digests by fileKey.
type HashCache struct {
	cache *lru.Cache[fileKey, string]
}

// NewHashCache keeps up to size digests.
func NewHashCache(size int) *HashCache {
	c, _ := lru.New[fileKey, string](size)
	return &HashCache{cache: c}
}

// Exe returns the sha256 (hex) of the executable pid is running.
func (h *HashCache) Exe(pid int) (string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return "", err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", fmt.Errorf("fstat /proc/%d/exe: %w", pid, err)
	}
	k := fileKey{uint64(st.Dev), st.Ino, uint64(st.Size), st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec}
	if sum, ok := h.cache.Get(k); ok {
		return sum, nil
	}
	d := sha256.New()
	if _, err := io.Copy(d, f); err != nil {
		return "", fmt.Errorf("hash /proc/%d/exe: %w", pid, err)
	}
	sum := hex.EncodeToString(d.Sum(nil))
	h.cache.Add(k, sum)
	return sum, nil
}
