package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// A reader following while goroutines and processes append across many
// rotations sees every line exactly once, each writer's in order.
func TestFollowSeesEveryLineOnceAcrossRotations(t *testing.T) {
	const n, pad = 50, 100
	opts := Options{MaxBytes: 1 << 10, Keep: 1000}
	tests := []struct {
		name             string
		goroutines       int
		procs            int
		startAfterWrites bool // Follow starts with files already rotated
	}{
		{"goroutines", 4, 0, false},
		{"processes and goroutines", 2, 3, false},
		{"started mid-stream", 2, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.jsonl")
			l, err := Open(path, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			want := map[string]int{"first": 1}
			if err := appendSeq(l, "first", 1, pad, nil); err != nil {
				t.Fatal(err)
			}
			c := newCollector()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			errc := make(chan error, 1)
			follow := func() { go func() { errc <- Follow(ctx, path, time.Time{}, c.add) }() }
			if !tt.startAfterWrites {
				follow()
				c.waitFor(t, errc, func(e Event) bool { return e.Service == "first" })
			}

			var wg sync.WaitGroup
			errs := make(chan error, tt.goroutines+tt.procs)
			for g := range tt.goroutines {
				svc := fmt.Sprintf("g%d", g)
				want[svc] = n
				wg.Go(func() { errs <- appendSeq(l, svc, n, pad, nil) })
			}
			for p := range tt.procs {
				s := writerSpec{Path: path, Name: fmt.Sprintf("p%d", p), Goroutines: 1, N: n, Pad: pad, Opts: opts}
				cmd, _ := startWriter(t, s)
				want[s.Name+"-0"] = n
				wg.Go(func() { errs <- cmd.Wait() })
			}
			if tt.startAfterWrites {
				follow()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := appendSeq(l, "last", 1, pad, nil); err != nil {
				t.Fatal(err)
			}
			want["last"] = 1
			got := c.waitFor(t, errc, func(e Event) bool { return e.Service == "last" })
			checkSeqs(t, got, want)
			if files := checkFiles(t, path, opts.MaxBytes); files < 40 {
				t.Errorf("only %d files: the test meant many rotations", files)
			}
		})
	}
}

// A reader whose unread files were rotated out (deleted) says so rather
// than go on as if it had seen everything.
func TestFollowFellBehind(t *testing.T) {
	const pad = 100
	opts := Options{MaxBytes: 1 << 10, Keep: 2} // 4 lines a file
	path := filepath.Join(t.TempDir(), "events.jsonl")
	l, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := appendSeq(l, "a", 1, pad, nil); err != nil {
		t.Fatal(err)
	}
	// The reader blocks in its callback on the first event while the
	// writer rotates its file, and the two after it, away.
	blocked, release := make(chan struct{}), make(chan struct{})
	errc := make(chan error, 1)
	var once sync.Once
	go func() {
		errc <- Follow(t.Context(), path, time.Time{}, func(Event) {
			once.Do(func() { close(blocked); <-release })
		})
	}()
	<-blocked
	if err := appendSeq(l, "b", 4*(opts.Keep+2), pad, nil); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-errc; !errors.Is(err, ErrFellBehind) {
		t.Fatalf("Follow = %v, want ErrFellBehind", err)
	}
}

// Lines appended to the live file after the reader last read it, just
// before it was rotated, are read from the rotated file before the new one.
func TestFollowReadsTheRotatedFileToItsEnd(t *testing.T) {
	const pad = 100
	line, err := json.Marshal(seqEvent("a", 0, pad))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "events.jsonl")
	l, err := Open(path, Options{MaxBytes: 2 * int64(len(line)+1), Keep: 5}) // two lines a file
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := appendSeq(l, "a", 1, pad, nil); err != nil {
		t.Fatal(err)
	}
	// The reader has read to the end of the file and blocks in its
	// callback on "a": "b" is appended where it has already looked, then
	// "c" rotates the file.
	blocked, release := make(chan struct{}), make(chan struct{})
	c := newCollector()
	errc := make(chan error, 1)
	go func() {
		errc <- Follow(t.Context(), path, time.Time{}, func(e Event) {
			if e.Service == "a" {
				close(blocked)
				<-release
			}
			c.add(e)
		})
	}()
	<-blocked
	for _, svc := range []string{"b", "c"} {
		if err := appendSeq(l, svc, 1, pad, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := checkFiles(t, path, 2*int64(len(line)+1)); n != 2 {
		t.Fatalf("%d files, want 2: the test needs c to rotate", n)
	}
	close(release)
	got := c.waitFor(t, errc, func(e Event) bool { return e.Service == "c" })
	checkSeqs(t, got, map[string]int{"a": 1, "b": 1, "c": 1})
}
