package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/airlock-sandbox/airlock/sandbox/stagebin"
	"golang.org/x/sys/unix"
)

// stage is the binary the sandbox's own processes run, found once per
// launcher process (a pod launches many sandboxes from one).
var stage struct {
	once sync.Once
	path string
	err  error
}

// stageExe is the path the launcher executes as the sandbox's init and
// reaper (and the init, as /proc/self/exe, as the command stage): the
// embedded stage binary (stagebin) in a sealed memory file when airlock
// carries one, else this binary itself.
func stageExe() (string, error) {
	stage.once.Do(func() {
		if len(stagebin.Binary) == 0 {
			stage.path, stage.err = os.Executable()
			return
		}
		stage.path, stage.err = sealedStage(stagebin.Binary)
	})
	return stage.path, stage.err
}

// PrepareStage starts making the stage binary ready in the background
// (~1.5 ms to write it into its memory file), for a launcher to overlap
// with its other setup; whatever needs it waits for it.
func PrepareStage() { go stageExe() }

// stageFDMin is above every descriptor a stage process is given.
const stageFDMin = 64

// sealedStage writes bin into a memory file, seals it against any change
// and returns a path that executes it (/proc/self/fd/N, also valid in a
// child before its exec). Nothing on disk can be swapped in between, and
// the descriptor is read-only (a file open for writing cannot be
// executed) and close-on-exec (the sandbox's init does not inherit it).
// It stays open for the launcher's life.
func sealedStage(bin []byte) (string, error) {
	fd, err := unix.MemfdCreate("airlock-stage", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) {
		// Before 6.3 the kernel knows no MFD_EXEC: every memfd is
		// executable there.
		fd, err = unix.MemfdCreate("airlock-stage", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return "", &os.SyscallError{Syscall: "memfd_create(airlock-stage)", Err: err}
	}
	defer unix.Close(fd)
	for b := bin; len(b) > 0; {
		n, err := unix.Write(fd, b)
		if err != nil {
			return "", &os.SyscallError{Syscall: "write(memfd airlock-stage)", Err: err}
		}
		b = b[n:]
	}
	const seals = unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return "", &os.SyscallError{Syscall: "fcntl(memfd airlock-stage, F_ADD_SEALS)", Err: err}
	}
	ro, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("reopen the sealed stage read-only: %w", err)
	}
	defer unix.Close(ro)
	// The child resolves the path after its descriptors are laid out
	// (0-2, then ExtraFiles from 3): a low number would name one of
	// those instead of the stage.
	high, err := unix.FcntlInt(uintptr(ro), unix.F_DUPFD_CLOEXEC, stageFDMin)
	if err != nil {
		return "", &os.SyscallError{Syscall: "fcntl(memfd airlock-stage, F_DUPFD_CLOEXEC)", Err: err}
	}
	return "/proc/self/fd/" + strconv.Itoa(high), nil
}
