package proxy

import (
	"io"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// An opaque tunnel that moves no data is closed after the idle timeout, and
// one that keeps moving data is not: measured by the kernel, as the relay
// splices.
func TestWatchIdleClosesSilentTunnels(t *testing.T) {
	silentC, silentS := testutil.TCPPair(t)
	busyC, busyS := testutil.TCPPair(t)
	stopSilent := watchIdle(400*time.Millisecond, silentS)
	stopBusy := watchIdle(400*time.Millisecond, busyS)
	go io.Copy(io.Discard, busyS)
	stop := time.After(1500 * time.Millisecond)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-tick.C:
			busyC.Write([]byte("x"))
		case <-stop:
			running = false
		}
	}
	silentC.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := silentC.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("silent tunnel read = %v; want EOF (closed by the idle watcher)", err)
	}
	if _, err := busyC.Write([]byte("still open")); err != nil {
		t.Fatalf("busy tunnel was closed: %v", err)
	}
	if !stopSilent() {
		t.Error("the watcher of the silent tunnel does not report closing it")
	}
	if stopBusy() {
		t.Error("the watcher of the busy tunnel reports closing it")
	}
}
