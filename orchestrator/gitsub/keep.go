package gitsub

import "sync"

// kept are the claims held until this process exits. Kept reachable: an
// *os.File nothing refers to is closed by its finalizer, and the lock
// would go with it at the next garbage collection.
var kept struct {
	sync.Mutex
	claims []func()
}

// keepUntilExit holds a claim for the rest of this process's life.
func keepUntilExit(release func()) {
	kept.Lock()
	defer kept.Unlock()
	kept.claims = append(kept.claims, release)
}
