package identity

import (
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// procCache remembers described processes by pid, each with its /proc/<pid>
// directory held open. Reads through that directory fail once the process
// has exited, even if the pid was reused, so a hit is checked with two
// syscalls (stat and readlink of exe: an exec or an edited binary is a miss)
// instead of the dozen that describe a process afresh.
type procCache struct {
	mu  sync.Mutex // serialises replacing an entry, so no directory leaks
	lru *lru.Cache[int, *cachedProc]
}

type cachedProc struct {
	mu     sync.Mutex // a check must not race the directory's close
	dir    procDir
	closed bool
	start  time.Duration // since boot
	exe    fileKey
	p      *Process
}

func newProcCache(size int) *procCache {
	c, _ := lru.NewWithEvict(size, func(_ int, e *cachedProc) { e.close() })
	return &procCache{lru: c}
}

// get returns the cached description of pid if that process still runs the
// same executable at the same path, started by startedBy (when not zero),
// runs as uid (a process that changed uid is described afresh) and, when
// socket is not nil, holds that socket.
func (c *procCache) get(pid int, startedBy time.Duration, uid int, socket *heldSocket) (*Process, bool) {
	e, ok := c.lru.Get(pid)
	if !ok {
		return nil, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.p.UID != uid || (startedBy != 0 && e.start > startedBy) {
		return nil, false
	}
	if k, err := exeKey(e.dir); err != nil || k != e.exe {
		return nil, false
	}
	if exe, err := e.dir.exe(); err != nil || exe != e.p.Exe {
		return nil, false
	}
	if socket != nil {
		if held, err := e.dir.holds(*socket); err != nil || !held {
			return nil, false
		}
	}
	return e.p, true
}

// add keeps dir open for p, closing whatever entry it replaces or evicts.
func (c *procCache) add(dir procDir, start time.Duration, exe fileKey, p *Process) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.lru.Peek(p.PID); ok {
		old.close()
	}
	c.lru.Add(p.PID, &cachedProc{dir: dir, start: start, exe: exe, p: p})
}

// purge closes every held directory.
func (c *procCache) purge() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Purge()
}

func (e *cachedProc) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		e.closed = true
		e.dir.close()
	}
}
