// Package eintr repeats system calls a signal interrupted before they did
// anything. Go's runtime signals its own threads (SIGURG preempts a
// goroutine, SIGCHLD arrives when a child exits), and the raw calls of
// syscall and x/sys/unix hand EINTR back to the caller: poll(2) returns it
// even with a zero timeout. Taken for a failure, it fails a sandbox's setup
// or a lock at random.
package eintr

import (
	"errors"

	"golang.org/x/sys/unix"
)

// Retry calls call until it returns anything but EINTR.
func Retry[T any](call func() (T, error)) (T, error) {
	for {
		v, err := call()
		if !errors.Is(err, unix.EINTR) {
			return v, err
		}
	}
}

// Do is Retry for a call that returns only an error.
func Do(call func() error) error {
	for {
		if err := call(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
