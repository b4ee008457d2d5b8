package events

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// BenchmarkAppend is one event of a typical size appended and fsync'd, on
// the disk the test's temporary directory is on: the fsync is most of it.
func BenchmarkAppend(b *testing.B) {
	path := filepath.Join(b.TempDir(), "events.jsonl")
	l, err := Open(path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	e := Event{Source: "supervisor", Kind: "restart", Severity: Warning, Service: "gateway", Detail: "exited with status 137 (SIGKILL); restarting in 200ms (attempt 2 of 5)"}
	testutil.Latencies(b, func(int) {
		if err := l.Append(e); err != nil {
			b.Fatal(err)
		}
	})
	checkCount(b, path, b.N)
}

// BenchmarkAppendParallel is goroutines appending at once: they queue for
// the file, each line still fsync'd before its Append returns.
func BenchmarkAppendParallel(b *testing.B) {
	path := filepath.Join(b.TempDir(), "events.jsonl")
	l, err := Open(path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	e := Event{Source: "proxy", Kind: "health", Severity: Info, Service: "shim", Detail: "healthy again after 3 failed checks"}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := l.Append(e); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	checkCount(b, path, b.N)
}

func checkCount(b *testing.B, path string, n int) {
	got, err := Read(path, time.Time{})
	if err != nil {
		b.Fatal(err)
	}
	if len(got) != n {
		b.Fatalf("Read = %d events, want %d", len(got), n)
	}
}
