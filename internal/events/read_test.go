package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func TestSince(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	l, err := Open(path, Options{MaxBytes: 400, Keep: 10}) // rotated every two events
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t0 := time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC)
	for i, kind := range []string{"boot_step", "ready", "exit", "restart", "ready", "stop"} {
		if err := l.Append(Event{TS: t0.Add(time.Duration(i) * time.Second), Source: "supervisor", Kind: kind, Severity: Info, Service: "gateway"}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		since time.Time
		want  string
	}{
		{"zero: all", time.Time{}, "boot_step ready exit restart ready stop"},
		{"the first", t0, "boot_step ready exit restart ready stop"},
		{"at an event: it is in", t0.Add(2 * time.Second), "exit restart ready stop"},
		{"between two", t0.Add(2*time.Second + 1), "restart ready stop"},
		{"the last", t0.Add(5 * time.Second), "stop"},
		{"after all", t0.Add(time.Hour), ""},
		{"in another zone", t0.Add(3 * time.Second).In(time.FixedZone("PST", -8*3600)), "restart ready stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Read(path, tt.since)
			if err != nil {
				t.Fatal(err)
			}
			if kinds(got) != tt.want {
				t.Errorf("Read(since %v) = %q, want %q", tt.since, kinds(got), tt.want)
			}
			// Follow starts with what Read returns.
			if tt.want == "" {
				return
			}
			c := newCollector()
			ctx, cancel := context.WithCancel(t.Context())
			errc := make(chan error, 1)
			go func() { errc <- Follow(ctx, path, tt.since, c.add) }()
			got = c.waitFor(t, errc, func(e Event) bool { return e.Kind == "stop" })
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("Follow after cancel = %v, want context.Canceled", err)
			}
			if kinds(got) != tt.want {
				t.Errorf("Follow(since %v) = %q, want %q", tt.since, kinds(got), tt.want)
			}
		})
	}
}

func kinds(events []Event) string {
	var k []string
	for _, e := range events {
		k = append(k, e.Kind)
	}
	return strings.Join(k, " ")
}

func TestReadMissingFile(t *testing.T) {
	dir := t.TempDir()
	for _, path := range []string{filepath.Join(dir, "events.jsonl"), filepath.Join(dir, "no", "events.jsonl")} {
		if _, err := Read(path, time.Time{}); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
			t.Errorf("Read(%s) = %v, want fs.ErrNotExist naming the path", path, err)
		}
		if err := Follow(t.Context(), path, time.Time{}, func(Event) {}); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
			t.Errorf("Follow(%s) = %v, want fs.ErrNotExist naming the path", path, err)
		}
	}
}

// Read while the files are renamed under it returns the chain as it was at
// one moment: a run of consecutive events, none missing, none twice. On a
// tmpfs, where fsync costs nothing, rotations come every few microseconds.
func TestReadDuringRotationIsConsistent(t *testing.T) {
	path := filepath.Join(testutil.Tmpfs(t, 64<<20), "events.jsonl")
	const n, pad = 4000, 100
	l, err := Open(path, Options{MaxBytes: 512, Keep: 20}) // two lines a file
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := appendSeq(l, "a", 1, pad, nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- appendSeq(l, "a", n, pad, nil) }()
	reads := 0
	for writing := true; writing; reads++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			writing = false
		default:
		}
		got, err := Read(path, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(got); i++ {
			if prev, cur := seq(t, got[i-1]), seq(t, got[i]); cur != prev+1 && !(cur == 0 && prev == 0) {
				t.Fatalf("read %d: seq %d follows %d: not the chain at one moment", reads, cur, prev)
			}
		}
	}
	t.Logf("%d reads during %d appends", reads, n)
}

// The chain as a writer killed mid-rotation leaves it, and as an operator
// who removed its newest files does: Read returns what is there, in order,
// past the empty names.
func TestReadPastEmptyNames(t *testing.T) {
	for _, c := range []struct {
		name string
		// renames made after ten lines in five files (path, .1 to .4)
		renames [][2]string
		want    string // the events' seqs, in order
	}{
		{"a rotation killed after .2 → .3", [][2]string{{".4", ".5"}, {".3", ".4"}, {".2", ".3"}}, "0 1 2 3 4 5 6 7 8 9"},
		{"killed after the live file's rename", [][2]string{{".4", ".5"}, {".3", ".4"}, {".2", ".3"}, {".1", ".2"}, {"", ".1"}}, "0 1 2 3 4 5 6 7 8 9"},
		{"the live file and .1 removed", [][2]string{{"", ""}, {".1", ""}}, "0 1 2 3 4 5"},
		{".2 and .3 removed", [][2]string{{".2", ""}, {".3", ""}}, "0 1 6 7 8 9"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.jsonl")
			fiveFiles(t, path)
			for _, r := range c.renames {
				var err error
				if r[1] == "" {
					err = os.Remove(path + r[0])
				} else {
					err = os.Rename(path+r[0], path+r[1])
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			got, err := Read(path, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			var seqs []string
			for _, e := range got {
				seqs = append(seqs, strconv.Itoa(seq(t, e)))
			}
			if s := strings.Join(seqs, " "); s != c.want {
				t.Errorf("Read: %s, want %s", s, c.want)
			}
		})
	}
}

// A file rotated out while the walk stands on it has left the chain even
// when a link elsewhere keeps it (a backup's hard link): the walk ends
// there instead of looking for it until it gives up.
func TestWalkEndsAtAFileRotatedOutButLinked(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "events.jsonl")
	fiveFiles(t, path)
	oldest, err := os.Open(path + ".4")
	if err != nil {
		t.Fatal(err)
	}
	defer oldest.Close()
	held, err := oldest.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Link(path+".4", filepath.Join(dir, "backup")); err != nil {
		t.Fatal(err)
	}
	// A rotation with keep 4: .3 takes .4's name, and so on.
	for _, r := range [][2]string{{".3", ".4"}, {".2", ".3"}, {".1", ".2"}, {"", ".1"}} {
		if err := os.Rename(path+r[0], path+r[1]); err != nil {
			t.Fatal(err)
		}
	}
	prev, _, _, err := predecessor(path, oldest, held, 4)
	if err != nil || prev != nil {
		t.Fatalf("predecessor of a file rotated out: %v, %v; want none", prev, err)
	}
}

// fiveFiles writes appendSeq's events 0 to 9 at path, two to a file: path
// holds 8 and 9, path.1 6 and 7, and so on to path.4.
func fiveFiles(t *testing.T, path string) {
	t.Helper()
	l, err := Open(path, Options{MaxBytes: 512, Keep: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := appendSeq(l, "a", 10, 100, nil); err != nil {
		t.Fatal(err)
	}
	if n := checkFiles(t, path, 512); n != 5 {
		t.Fatalf("%d files, want 5", n)
	}
}

// A tail that read part of a line cut short (the writer then truncates
// it away and writes the next line where it began) reads that next line
// whole: it does not keep the cut bytes in front of it.
func TestTailAfterATruncatedLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	good := func(detail string) []byte {
		raw, _ := json.Marshal(Event{TS: time.Now(), Source: "test", Kind: "k", Severity: Info, Detail: detail})
		return append(raw, '\n')
	}
	first := good("first")
	if err := os.WriteFile(path, append(append([]byte(nil), first...), `{"ts":"2026-11-27T10:00:00Z","source":"cut`...), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []string
	emit := func(e Event) { got = append(got, e.Detail) }
	tl := &tail{file: f}
	if err := tl.drain(time.Time{}, emit); err != nil {
		t.Fatal(err)
	}
	// The writer removes its cut bytes and writes the next line there.
	if err := os.Truncate(path, int64(len(first))); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(good("second"))
	w.Close()
	if err := tl.drain(time.Time{}, emit); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[first second]" {
		t.Fatalf("the tail read %v; want [first second]", got)
	}
}
