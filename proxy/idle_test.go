package proxy

import (
	"io"
	"net"
	"testing"
	"time"
)

// An opaque tunnel that moves no data is closed after the idle timeout, and
// one that keeps moving data is not: measured by the kernel, as the relay
// splices.
func TestWatchIdleClosesSilentTunnels(t *testing.T) {
	pair := func() (net.Conn, net.Conn) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); s.Close() })
		return c, s
	}
	silentC, silentS := pair()
	busyC, busyS := pair()
	done := make(chan struct{})
	defer close(done)
	go watchIdle(silentS, silentS, 400*time.Millisecond, done)
	go watchIdle(busyS, busyS, 400*time.Millisecond, done)
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
}
