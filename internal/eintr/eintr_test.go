package eintr

import (
	"os"
	"os/signal"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRetryPollInterruptedBySignal interrupts a real poll(2) with a signal
// the process handles (the kernel answers EINTR then, whatever SA_RESTART
// says) and expects Retry to wait on until the pipe is readable.
func TestRetryPollInterruptedBySignal(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGUSR1)
	defer signal.Stop(sigs)

	var interrupted atomic.Int32
	tid := make(chan int)
	type result struct {
		n   int
		err error
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid <- unix.Gettid()
		n, err := Retry(func() (int, error) {
			fds := []unix.PollFd{{Fd: int32(p[0]), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, -1)
			if err == unix.EINTR {
				interrupted.Add(1)
			}
			return n, err
		})
		done <- result{n, err}
	}()
	thread := <-tid
	// A signal that lands before poll blocks interrupts nothing: signal
	// until one has interrupted it.
	for deadline := time.Now().Add(10 * time.Second); interrupted.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no signal interrupted the poll in 10s")
		}
		if err := unix.Tgkill(os.Getpid(), thread, unix.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("poll returned (%d, %v) before the pipe was readable", r.n, r.err)
	case <-time.After(20 * time.Millisecond):
	}
	if _, err := unix.Write(p[1], []byte{1}); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.n != 1 || r.err != nil {
		t.Fatalf("poll = (%d, %v), want (1, <nil>)", r.n, r.err)
	}
}

func TestDoReturnsTheFirstOtherResult(t *testing.T) {
	calls := 0
	errs := []error{unix.EINTR, unix.EINTR, unix.EWOULDBLOCK, nil}
	if err := Do(func() error { calls++; return errs[calls-1] }); err != unix.EWOULDBLOCK || calls != 3 {
		t.Fatalf("Do = %v after %d calls, want EWOULDBLOCK after 3", err, calls)
	}
}
