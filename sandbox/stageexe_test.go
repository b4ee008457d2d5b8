package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The stage a launcher embeds runs from a memory file that nothing can
// change once sealed, through a read-only, close-on-exec descriptor.
func TestSealedStage(t *testing.T) {
	bin, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skipf("no /bin/true to seal: %v", err)
	}
	path, err := sealedStage(bin)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := strconv.Atoi(strings.TrimPrefix(path, "/proc/self/fd/"))
	if err != nil {
		t.Fatalf("sealedStage() = %q, want /proc/self/fd/N", path)
	}
	defer unix.Close(fd)
	// Run as the init is: with descriptors laid out from 3 in the
	// child before the path is resolved.
	cmd := exec.Command(path)
	for range 8 {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	}
	if err := cmd.Run(); err != nil {
		t.Errorf("exec %s with %d descriptors passed: %v", path, len(cmd.ExtraFiles), err)
	}
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("F_GETFD = %#x, %v: want FD_CLOEXEC (the sandbox's init must not inherit it)", flags, err)
	}
	// Even root reopening it for writing cannot change a sealed file.
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err == nil {
		_, err = w.Write([]byte("x"))
		w.Close()
	}
	if !errors.Is(err, syscall.EPERM) {
		t.Errorf("writing the sealed stage: %v, want EPERM", err)
	}
}
