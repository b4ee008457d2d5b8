package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

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
	// hashing holds the files being hashed: a program that opens many
	// connections at once, as soon as it starts, has each of their
	// lookups miss the cache together, and a 100 MB binary hashed once
	// per connection would cost seconds of CPU instead of a fraction of
	// one.
	mu      sync.Mutex
	hashing map[fileKey]*hashCall
}

// hashCall is one file being hashed; done is closed when sum or err is set.
type hashCall struct {
	done chan struct{}
	sum  string
	err  error
}

// NewHashCache keeps up to size digests.
func NewHashCache(size int) *HashCache {
	c, _ := lru.New[fileKey, string](size)
	return &HashCache{cache: c, hashing: map[fileKey]*hashCall{}}
}

func keyOf(st *unix.Stat_t) fileKey {
	return fileKey{uint64(st.Dev), st.Ino, uint64(st.Size), st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec}
}

// exeKey is the fileKey of the executable the process is running: one
// fstatat(2) through the exe link.
func exeKey(d procDir) (fileKey, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, "exe", &st, 0); err != nil {
		return fileKey{}, fmt.Errorf("stat /proc/%d/exe: %w", d.pid, err)
	}
	return keyOf(&st), nil
}

// Exe returns the sha256 (hex) of the executable the process is running,
// whose key (exeKey) is k. A cache hit reads nothing; a lookup of a file
// being hashed for another waits for that digest.
func (h *HashCache) Exe(d procDir, k fileKey) (string, error) {
	if sum, ok := h.cache.Get(k); ok {
		return sum, nil
	}
	h.mu.Lock()
	if c, ok := h.hashing[k]; ok {
		h.mu.Unlock()
		<-c.done
		if c.err == nil {
			return c.sum, nil
		}
		// That process could not be read (it may have exited): this
		// one may still be.
		return h.hash(d, k)
	}
	c := &hashCall{done: make(chan struct{})}
	h.hashing[k] = c
	h.mu.Unlock()
	c.sum, c.err = h.hash(d, k)
	h.mu.Lock()
	delete(h.hashing, k)
	h.mu.Unlock()
	close(c.done)
	return c.sum, c.err
}

// isMemfd says whether f, the executable opened, is a memfd, by its
// name (memfd_create's "/memfd:NAME (deleted)"): read from the descriptor,
// not the process's exe link, which an exec since would name another.
func isMemfd(f *os.File) bool {
	buf := make([]byte, 256)
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), buf)
	return err == nil && strings.HasPrefix(string(buf[:n]), "/memfd:")
}

// hash reads and hashes the executable d runs, and caches its digest.
func (h *HashCache) hash(d procDir, k fileKey) (string, error) {
	link := "/proc/" + strconv.Itoa(d.pid) + "/exe"
	fd, err := unix.Openat(d.fd, "exe", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", link, err)
	}
	f := os.NewFile(uintptr(fd), link)
	defer f.Close()
	// Key what is actually read: the file behind the link may have
	// changed between the stat and the open.
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", fmt.Errorf("fstat %s: %w", link, err)
	}
	if keyOf(&st) != k {
		return "", fmt.Errorf("%s changed while it was being identified", link)
	}
	// A memory file (memfd: no link in any directory, its link named
	// /memfd:NAME) can be rewritten through a shared mapping made before
	// its exec, with no write(2), its size and times unchanged: its key
	// would keep the digest of bytes it no longer holds. Only one sealed
	// against writes has fixed bytes. (A tmpfs file answers F_GET_SEALS
	// too, and exec keeps it from being written: it is not one.)
	if seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0); err == nil && seals&unix.F_SEAL_WRITE == 0 && st.Nlink == 0 && isMemfd(f) {
		return "", fmt.Errorf("%s is a memory file its owner may still write (not sealed with F_SEAL_WRITE): its bytes are not fixed, so no digest names them", link)
	}
	digest := sha256.New()
	if _, err := io.Copy(digest, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", link, err)
	}
	sum := hex.EncodeToString(digest.Sum(nil))
	h.cache.Add(k, sum)
	return sum, nil
}
