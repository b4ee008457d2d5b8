package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func TestAppendWritesOneLinePerEvent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent-inbox.jsonl")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ts := time.Date(2026, 11, 23, 14, 0, 0, 123456789, time.FixedZone("CET", 3600))
	tests := []struct {
		name   string
		detail string
	}{
		{"plain", "exited with status 1"},
		{"newlines", "line one\nline two\r\n{\"ts\":\"fake\"}\n"},
		{"quotes and html", `"</script>" & <b>`},
		{"line separators", "a\u2028b\u2029c"},
		{"invalid utf-8", "bad \xff byte"},
		{"control bytes", "nul \x00 esc \x1b"},
	}
	for _, tt := range tests {
		if err := l.Append(Event{TS: ts, Source: "supervisor", Kind: "exit", Severity: Warning, Service: "gateway", Detail: tt.detail}); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(raw, []byte("\n")); n != len(tests) {
		t.Fatalf("file has %d newlines, want %d (one per event):\n%s", n, len(tests), raw)
	}
	got, err := Read(path, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(tests) {
		t.Fatalf("Read returned %d events, want %d", len(got), len(tests))
	}
	for i, tt := range tests {
		want := strings.ToValidUTF8(tt.detail, "\ufffd")
		if got[i].Detail != want {
			t.Errorf("%s: Detail = %q, want %q", tt.name, got[i].Detail, want)
		}
		if !got[i].TS.Equal(ts) || got[i].TS.Location() != time.UTC {
			t.Errorf("%s: TS = %v, want %v in UTC", tt.name, got[i].TS, ts.UTC())
		}
	}
	if !bytes.HasPrefix(raw, []byte(`{"ts":"2026-11-23T13:00:00.123456789Z","source":"supervisor","kind":"exit","severity":"warning","service":"gateway","detail":"exited with status 1","recovered":false}`+"\n")) {
		t.Errorf("first line is not the documented format:\n%s", raw)
	}
}

func TestAppendFillsTimestamp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before := time.Now()
	if err := l.Append(Event{Source: "supervisor", Kind: "ready", Severity: Info}); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].TS.Before(before) || got[0].TS.Location() != time.UTC {
		t.Fatalf("Read = %+v, want one event stamped in UTC at or after %v", got, before)
	}
	if raw, _ := os.ReadFile(path); bytes.Contains(raw, []byte(`"service"`)) {
		t.Errorf("an event without a service writes one: %s", raw)
	}
}

func TestAppendRefusesWhatReadersCannotPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		e    Event
		want string
	}{
		{"no source", Event{Kind: "ready", Severity: Info}, "no source"},
		{"no kind", Event{Source: "supervisor", Severity: Info}, "no kind"},
		{"no severity", Event{Source: "supervisor", Kind: "ready"}, `severity ""`},
		{"unknown severity", Event{Source: "supervisor", Kind: "ready", Severity: "error"}, `severity "error"`},
		{"unencodable time", Event{TS: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), Source: "supervisor", Kind: "ready", Severity: Info}, "encode supervisor/ready"},
	}
	for _, tt := range tests {
		err := l.Append(tt.e)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Append = %v, want an error naming %s and %q", tt.name, err, path, tt.want)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	err = l.Append(Event{Source: "supervisor", Kind: "ready", Severity: Info})
	if !errors.Is(err, os.ErrClosed) || !strings.Contains(err.Error(), path) {
		t.Errorf("Append after Close = %v, want os.ErrClosed naming %s", err, path)
	}
	if raw, _ := os.ReadFile(path); len(raw) != 0 {
		t.Errorf("refused events were written: %q", raw)
	}
}

// The file is private; the directories made on its way are traversable,
// not listable, as the pod makes its state directory: a host watchdog run
// before the pod's first boot may make them, and the pod's services go
// through them to the CA bundle beside the inbox.
func TestOpenMakesThePrivateFileInTraversableDirectories(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o022))
	state := filepath.Join(t.TempDir(), "state")
	dir := filepath.Join(state, "pod")
	path := filepath.Join(dir, "events.jsonl")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	for name, want := range map[string]os.FileMode{state: os.ModeDir | 0o711, dir: os.ModeDir | 0o711, path: 0o600} {
		if fi, err := os.Stat(name); err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", name, fi.Mode(), err, want)
		}
	}

	// A file someone left readable is narrowed; a symlink is refused.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if l, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if fi, _ := os.Stat(path); fi.Mode() != 0o600 {
		t.Errorf("reopened %s keeps mode %v, want 0600", path, fi.Mode())
	}
	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(link, Options{}); !errors.Is(err, syscall.ELOOP) || !strings.Contains(err.Error(), link) {
		t.Errorf("Open(symlink) = %v, want ELOOP naming %s", err, link)
	}
	if _, err := Open(path, Options{MaxBytes: -1}); err == nil {
		t.Error("Open with a negative MaxBytes succeeded")
	}
}

var stamp = regexp.MustCompile(`"ts":"[^"]*"`)

// A writer killed mid-line leaves a torn line; the next writer must not
// glue its line to it, and readers skip it, wherever it is.
func TestTornLinesAreSkipped(t *testing.T) {
	whole := func(svc string) string {
		return fmt.Sprintf(`{"ts":"2026-11-23T13:00:00Z","source":"test","kind":"seq","severity":"info","service":%q,"detail":"0","recovered":false}`, svc)
	}
	torn := whole("torn")[:50]
	tests := []struct {
		name     string
		before   string // the file as a crashed writer left it
		readable int    // events Read finds in it
		want     []string
		wantRaw  string // the file after one more Append of "next"
		rotateAt int64  // MaxBytes, 0: default
	}{
		{"empty", "", 0, []string{"next"}, whole("next") + "\n", 0},
		{"torn last line", whole("a") + "\n" + torn, 1, []string{"a", "next"}, whole("a") + "\n" + torn + "\n" + whole("next") + "\n", 0},
		{"torn line only", torn, 0, []string{"next"}, torn + "\n" + whole("next") + "\n", 0},
		{"torn in the middle", whole("a") + "\n" + torn + "\n" + whole("b") + "\n", 2, []string{"a", "b", "next"}, "", 0},
		{"two torn in a row", torn + "\n" + torn + "\n" + whole("a") + "\n" + torn, 1, []string{"a", "next"}, "", 0},
		{"whole but unterminated", whole("a"), 0, []string{"a", "next"}, whole("a") + "\n" + whole("next") + "\n", 0},
		{"torn last line, then rotation", whole("a") + "\n" + torn, 1, []string{"a", "next"}, whole("next") + "\n", 200},
		{"whole but unterminated, then rotation", whole("a"), 0, []string{"a", "next"}, whole("next") + "\n", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.jsonl")
			if err := os.WriteFile(path, []byte(tt.before), 0o600); err != nil {
				t.Fatal(err)
			}
			if got, err := Read(path, time.Time{}); err != nil || len(got) != tt.readable {
				t.Fatalf("Read of the crashed file = %d events, %v; want %d", len(got), err, tt.readable)
			}
			l, err := Open(path, Options{MaxBytes: tt.rotateAt})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if err := appendSeq(l, "next", 1, 0, nil); err != nil {
				t.Fatal(err)
			}
			got, err := Read(path, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			var svcs []string
			for _, e := range got {
				svcs = append(svcs, e.Service)
			}
			if strings.Join(svcs, ",") != strings.Join(tt.want, ",") {
				t.Errorf("Read = %v, want %v", svcs, tt.want)
			}
			if tt.wantRaw != "" {
				raw, _ := os.ReadFile(path)
				if raw := stamp.ReplaceAll(raw, []byte(`"ts":"2026-11-23T13:00:00Z"`)); string(raw) != tt.wantRaw {
					t.Errorf("file =\n%s\nwant\n%s", raw, tt.wantRaw)
				}
			}
		})
	}
}

// Rotation keeps Keep files, each whole, and a line never straddles two.
func TestRotationKeepsWholeLines(t *testing.T) {
	const pad = 8
	line, err := json.Marshal(seqEvent("a", 0, pad))
	if err != nil {
		t.Fatal(err)
	}
	five := int64(5 * (len(line) + 1)) // five lines a file
	tests := []struct {
		name      string
		opts      Options
		n, pad    int
		wantFiles int
		wantFirst int // the oldest seq left
	}{
		// 40 events fill 8 files, of which the live one and Keep are kept.
		{"keep 3", Options{MaxBytes: five, Keep: 3}, 40, pad, 4, 20},
		{"keep 1", Options{MaxBytes: five, Keep: 1}, 40, pad, 2, 30},
		{"all kept", Options{MaxBytes: five, Keep: 100}, 40, pad, 8, 0},
		{"one byte short of five", Options{MaxBytes: five - 1, Keep: 100}, 40, pad, 10, 0},
		// A line longer than MaxBytes is written whole, alone.
		{"lines over max", Options{MaxBytes: 100, Keep: 10}, 5, 256 << 10, 5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.jsonl")
			l, err := Open(path, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if err := appendSeq(l, "a", tt.n, tt.pad, nil); err != nil {
				t.Fatal(err)
			}
			if n := checkFiles(t, path, tt.opts.MaxBytes); n != tt.wantFiles {
				t.Errorf("%d files, want %d", n, tt.wantFiles)
			}
			got, err := Read(path, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 || seq(t, got[0]) != tt.wantFirst || seq(t, got[len(got)-1]) != tt.n-1 {
				t.Fatalf("Read = %d events, want seq %d to %d", len(got), tt.wantFirst, tt.n-1)
			}
			for i, e := range got {
				if seq(t, e) != tt.wantFirst+i {
					t.Fatalf("event %d is seq %d, want %d", i, seq(t, e), tt.wantFirst+i)
				}
			}
		})
	}
}

// Goroutines sharing a Log, Logs sharing a path in one process, and
// processes sharing a path: only whole lines, none lost, across many
// rotations.
func TestConcurrentAppendersLoseNothing(t *testing.T) {
	const n, pad = 50, 100
	opts := Options{MaxBytes: 1 << 10, Keep: 1000} // 4 lines a file; nothing rotated out
	tests := []struct {
		name             string
		logs, goroutines int // in this process: Logs, goroutines on each
		procs            int // writer processes, 2 goroutines each
	}{
		{"goroutines", 1, 6, 0},
		{"logs in one process", 3, 2, 0},
		{"processes", 0, 0, 4},
		{"processes and goroutines", 1, 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.jsonl")
			want := map[string]int{}
			var cmds []func() error
			for p := range tt.procs {
				s := writerSpec{Path: path, Name: fmt.Sprintf("p%d", p), Goroutines: 2, N: n, Pad: pad, Opts: opts}
				cmd, _ := startWriter(t, s)
				cmds = append(cmds, cmd.Wait)
				want[s.Name+"-0"], want[s.Name+"-1"] = n, n
			}
			var wg sync.WaitGroup
			errs := make(chan error, tt.logs*tt.goroutines)
			for i := range tt.logs {
				l, err := Open(path, opts)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				for g := range tt.goroutines {
					svc := fmt.Sprintf("l%d-%d", i, g)
					want[svc] = n
					wg.Go(func() { errs <- appendSeq(l, svc, n, pad, nil) })
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			for _, wait := range cmds {
				if err := wait(); err != nil {
					t.Fatalf("writer process: %v", err)
				}
			}
			files := checkFiles(t, path, opts.MaxBytes)
			got, err := Read(path, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			checkSeqs(t, got, want)
			if files < 50 {
				t.Errorf("only %d files: the test meant many rotations", files)
			}
		})
	}
}

// A write the full disk cuts short is taken back: the file keeps only
// whole lines, the error names the file, and once there is room again the
// next Append is whole.
func TestFullDiskLeavesNoPartialLine(t *testing.T) {
	dir := testutil.Tmpfs(t, 1<<20)
	path := filepath.Join(dir, "events.jsonl")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := appendSeq(l, "a", 3, 100, nil); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 800<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	big := seqEvent("a", 3, 400<<10) // more than is left, less than the disk
	err = l.Append(big)
	if !errors.Is(err, io.ErrShortWrite) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Append on a full disk = %v, want a short write naming %s", err, path)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Fatalf("the cut line was left: file grew from %d to %d bytes", len(before), len(after))
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(big); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, path, DefaultMaxBytes)
	got, err := Read(path, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, got, map[string]int{"a": 4})
}
