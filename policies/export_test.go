package policies

import "time"

// SetRewatchWait sets how long a bundle directory gone may take to come
// back before the watch ends, until the returned restore.
func SetRewatchWait(d time.Duration) (restore func()) {
	old := rewatchWait
	rewatchWait = d
	return func() { rewatchWait = old }
}
