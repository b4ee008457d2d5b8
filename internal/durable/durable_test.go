package durable_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/durable"
	"golang.org/x/sys/unix"
)

// WriteFile replaces the file whole with the mode asked, leaves no
// temporary file, and replaces a symlink at the path rather than writing
// through it.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	elsewhere := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(elsewhere, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		setup func(path string) error
		perm  os.FileMode
	}{
		{"new file", func(string) error { return nil }, 0o600},
		{"over an old, longer file", func(p string) error { return os.WriteFile(p, []byte("old old old old"), 0o644) }, 0o644},
		{"over a symlink", func(p string) error { return os.Symlink(elsewhere, p) }, 0o600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := tc.setup(path); err != nil {
				t.Fatal(err)
			}
			if err := durable.WriteFile(path, []byte("new"), tc.perm); err != nil {
				t.Fatal(err)
			}
			st, err := os.Lstat(path)
			if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != tc.perm {
				t.Errorf("Lstat = %v, %v; want a regular file, mode %v", st.Mode(), err, tc.perm)
			}
			if got, _ := os.ReadFile(path); string(got) != "new" {
				t.Errorf("content %q, want %q", got, "new")
			}
		})
	}
	if got, _ := os.ReadFile(elsewhere); string(got) != "keep" {
		t.Errorf("the symlink's target = %q: written through", got)
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, ".*")); len(tmps) != 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
	missing := filepath.Join(dir, "no", "such")
	if err := durable.WriteFile(missing, nil, 0o600); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("WriteFile into a missing directory = %v, want an error naming the path", err)
	}
}

// OpenLocked creates the file 0600 in a 0700 directory, and refuses a
// symlink planted at the path.
func TestOpenLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d", "log")
	f, err := durable.OpenLocked(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want mode %v", p, st.Mode(), err, want)
		}
	}
	target := filepath.Join(t.TempDir(), "target")
	link := filepath.Join(filepath.Dir(path), "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if f, err := durable.OpenLocked(link); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("OpenLocked(symlink) = %v, want ELOOP", err)
		if f != nil {
			f.Close()
		}
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the symlink's target was created: %v", err)
	}
}

// A torn last line is ended before the next line, in the same write.
func TestAppendLineEndsATornLine(t *testing.T) {
	for _, tc := range []struct{ have, want string }{
		{"", "{\"c\":3}\n"},
		{"{\"a\":1}\n", "{\"a\":1}\n{\"c\":3}\n"},
		{"{\"a\":1}\n{\"b\"", "{\"a\":1}\n{\"b\"\n{\"c\":3}\n"},
	} {
		path := filepath.Join(t.TempDir(), "log.jsonl")
		if err := os.WriteFile(path, []byte(tc.have), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := durable.OpenLocked(path)
		if err != nil {
			t.Fatal(err)
		}
		err = durable.AppendLine(f, []byte("{\"c\":3}\n"))
		f.Close()
		if got, _ := os.ReadFile(path); err != nil || string(got) != tc.want {
			t.Errorf("AppendLine after %q = %q, %v; want %q", tc.have, got, err, tc.want)
		}
	}
}

// Concurrent appenders (each with its own open file, as processes are)
// never interleave: every line is whole, and each Append sees the others'
// whole appends.
func TestConcurrentAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	const writers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				line := []byte(fmt.Sprintf("%d-%d %s\n", w, i, strings.Repeat("x", 512)))
				if w%2 == 0 {
					errs <- durable.Append(path, func(have []byte) ([]byte, error) {
						if len(have) > 0 && have[len(have)-1] != '\n' {
							return nil, fmt.Errorf("saw half a line")
						}
						return line, nil
					})
					continue
				}
				f, err := durable.OpenLocked(path)
				if err == nil {
					err = durable.AppendLine(f, line)
					f.Close()
				}
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := os.ReadFile(path)
	lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
	if len(lines) != writers*each {
		t.Fatalf("%d lines, want %d", len(lines), writers*each)
	}
	for _, l := range lines {
		if len(l) < 512 || !bytes.HasSuffix(l, []byte(strings.Repeat("x", 512))) {
			t.Fatalf("a torn or interleaved line: %.40q", l)
		}
	}
}

// Append writes nothing when add returns nothing, and nothing when it
// fails, returning its error.
func TestAppendNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, []byte("a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := durable.Append(path, func([]byte) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if err := durable.Append(path, func([]byte) ([]byte, error) { return []byte("b\n"), boom }); !errors.Is(err, boom) {
		t.Errorf("Append = %v, want boom", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "a\n" {
		t.Errorf("file = %q, want untouched", got)
	}
}

// WriteFile sets its file's mode through its descriptor: another user who
// can write the directory, and puts a symbolic link in the temporary
// file's place as soon as it appears, never gets the mode of the link's
// target changed (the writer is root: a chmod by name followed the link).
func TestWriteFileModeNotByName(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(target, []byte("root:secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE); err != nil {
		t.Fatal(err)
	}
	// The other user stops at a file named "stop", and is waited for: it
	// must not be swapping while the directory is removed.
	done := make(chan struct{})
	defer func() {
		os.WriteFile(filepath.Join(dir, "stop"), nil, 0o600)
		<-done
	}()
	go func() { // the other user: each temporary file, swapped for a link
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := unix.Read(fd, buf)
			if err != nil || n <= 0 {
				return
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				length := int(binary.NativeEndian.Uint32(buf[off+12:]))
				name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+length]), "\x00")
				off += unix.SizeofInotifyEvent + length
				if name == "stop" {
					return
				}
				if strings.HasPrefix(name, ".out.") {
					p := filepath.Join(dir, name)
					if os.Remove(p) == nil {
						os.Symlink(target, p)
					}
				}
			}
		}
	}()
	for i := range 50 {
		durable.WriteFile(filepath.Join(dir, "out"), []byte("metrics\n"), 0o644)
		if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("after %d writes the link's target is %v (%v); want it 0600, untouched", i+1, fi.Mode().Perm(), err)
		}
	}
}
