package proxy

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"golang.org/x/sys/unix"
)

// fullAuditFile is an audit log on a 32 KiB tmpfs with 16 KiB taken by a
// filler, which freeRoom removes.
func fullAuditFile(t *testing.T) (f *os.File, freeRoom func()) {
	t.Helper()
	dir := testutil.Tmpfs(t, 32<<10)
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 16<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "audit.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, func() { os.Remove(filler) }
}

// Many decisions at once, on a disk that fills up: every line whose write
// was reported is in the log, whole, and no other is, whatever order
// the writes went in.
func TestAuditConcurrentLinesWholeOrNothing(t *testing.T) {
	f, _ := fullAuditFile(t)
	p := &Proxy{audit: newAuditLog(f, nil), log: slog.New(slog.DiscardHandler)}
	writeUntilFull(t, f, 32, func(int) error { return p.writeLine(auditDecision(true), AuditMessage, 200, 0, 0) })
}

// writeUntilFull has goroutines goroutines write 50 lines each (write(g),
// g the goroutine's number) into f, a log on a disk that fills up, and
// checks the lines reported written, and only they, are in it, whole.
func writeUntilFull(t *testing.T, f *os.File, goroutines int, write func(g int) error) {
	t.Helper()
	var mu sync.Mutex
	ok, failed := 0, 0
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				err := write(g)
				mu.Lock()
				if err == nil {
					ok++
				} else {
					failed++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failed == 0 {
		t.Fatalf("a 32 KiB tmpfs took %d lines", ok)
	}
	raw, _ := os.ReadFile(f.Name())
	if n := len(auditLines(t, raw)); n != ok {
		t.Fatalf("%d lines in the log, %d reported written (%d failed)", n, ok, failed)
	}
}

// On a pipe each line is its own write, which the kernel writes whole (up
// to PIPE_BUF), whatever another writer of the pipe writes between them:
// lines written together could be split by another's; nothing is lost and
// every line is whole.
func TestAuditConcurrentLinesOnPipe(t *testing.T) {
	// Two open descriptors of one pipe, as another process that shares
	// the proxy's stderr has: writes through one *os.File are serialized
	// by Go, writes through two only by the kernel.
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	dup, err := unix.Dup(fds[1])
	if err != nil {
		t.Fatal(err)
	}
	r, w, w2 := os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w"), os.NewFile(uintptr(dup), "w2")
	defer r.Close()
	read := make(chan []byte)
	go func() {
		// A slow reader: the pipe fills, and a write longer than what
		// it has room for goes in parts, between which the other
		// writer's lines can land.
		var raw []byte
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			raw = append(raw, buf[:n]...)
			if err != nil {
				read <- raw
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	p := &Proxy{audit: newAuditLog(w, nil), log: slog.New(slog.DiscardHandler)}
	var wg sync.WaitGroup
	// Another writer of the same pipe.
	other := []byte(`{"msg":"other"}` + "\n")
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				w2.Write(other)
			}
		}
	}()
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if err := p.writeLine(auditDecision(true), AuditMessage, 200, 0, 0); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	w.Close()
	w2.Close()
	n := 0
	for _, m := range auditLines(t, <-read) {
		if m["msg"] == AuditMessage {
			n++
		}
	}
	if n != 32*50 {
		t.Fatalf("%d audit lines read from the pipe, want %d", n, 32*50)
	}
}

// Lines others write into the proxy's log (AuditWriter: the ingress's)
// are held to the same promise, among the proxy's own: on a disk that
// fills up, the lines reported written are in the file, whole, and no
// other.
func TestAuditWriterLinesWholeOrNothing(t *testing.T) {
	f, _ := fullAuditFile(t)
	p := &Proxy{audit: newAuditLog(f, nil), log: slog.New(slog.DiscardHandler)}
	other := []byte(`{"msg":"CANONICAL-INGRESS","pad":"` + strings.Repeat("i", 700) + `"}` + "\n")
	writeUntilFull(t, f, 16, func(g int) error {
		if g%2 == 0 {
			_, err := p.AuditWriter().Write(other)
			return err
		}
		return p.writeLine(auditDecision(true), AuditMessage, 200, 0, 0)
	})
}
