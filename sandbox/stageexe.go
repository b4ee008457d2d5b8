package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"

	"github.com/airlock-sandbox/airlock/sandbox/stagebin"
	"golang.org/x/sys/unix"
)

// stage is the binary the sandbox's own processes run, opened once per
// launcher process (a pod launches many sandboxes from one) and held for
// its life.
var stage struct {
	once sync.Once
	file *os.File
	err  error
}

// stageFile is the file the launcher executes as the sandbox's init and
// reaper (and the init, as /proc/self/exe, as the command stage): the
// embedded stage binary (stagebin) in a sealed memory file when airlock
// carries one, else this binary itself.
func stageFile() (*os.File, error) {
	stage.once.Do(func() {
		if len(stagebin.Binary) == 0 {
			stage.file, stage.err = openSelf()
			return
		}
		stage.file, stage.err = sealedStage(stagebin.Binary)
	})
	return stage.file, stage.err
}

// PrepareStage starts making the stage binary ready in the background
// (~1.5 ms to write it into its memory file), for a launcher to overlap
// with its other setup; whatever needs it waits for it.
func PrepareStage() { go stageFile() }

// stageCommand is a command that runs the stage binary with args after
// Stage2Arg, extra as its descriptors from 3 and the stage binary itself as
// fdStage, which the stage closes first thing.
//
// The child executes the stage by that number, /proc/self/fd/7, resolved
// after its descriptors are laid out. A number of the launcher's own could
// be taken over by that layout: Go moves descriptors it must not overwrite
// to just above the highest one passed, whatever was there.
func stageCommand(extra []*os.File, args ...string) (*exec.Cmd, error) {
	f, err := stageFile()
	if err != nil {
		return nil, err
	}
	return stageCommandOf(f, extra, args...), nil
}

// stageCommandOf is stageCommand with the stage binary f. extra fill the
// descriptors from 3 up, fdStage skipped: the init's and the reapers' few
// take fixed numbers below it, the holder's more go on above it
// (CloseAfterExit).
func stageCommandOf(f *os.File, extra []*os.File, args ...string) *exec.Cmd {
	files := make([]*os.File, max(fdStage-3, len(extra))+1) // nil: closed in the child
	n := copy(files, extra[:min(len(extra), fdStage-3)])
	copy(files[fdStage-3+1:], extra[n:])
	files[fdStage-3] = f
	return &exec.Cmd{
		Path: "/proc/self/fd/" + strconv.Itoa(fdStage),
		Args: append([]string{"airlock", Stage2Arg}, args...),
		// Not the launcher's directory: the init's would be the command
		// stage's, under the mounts that hide it (Config.Dir is looked
		// up in them).
		Dir:        "/",
		Env:        stageEnv(),
		ExtraFiles: files,
	}
}

// stageEnv is the whole environment of a stage process: none of the
// launcher's (the command gets Config.Env, set apart), and one processor
// for the Go runtime. The stages run one thing at a time; with a P per
// CPU the runtime starts threads for the idle ones, which cost each stage
// their clone(2)s and the init a signal each when it switches uid on all
// its threads, on the CPUs the other stages want (~0.7 ms of a launch on
// two CPUs).
func stageEnv() []string { return []string{"GOMAXPROCS=1"} }

// openSelf opens the binary this process runs: /proc/self/exe is that
// file even if its path was replaced since.
func openSelf() (*os.File, error) {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return nil, fmt.Errorf("open the stage binary: %w", err)
	}
	return f, nil
}

// sealedStage writes bin into a memory file and seals it against any
// change: nothing on disk can be swapped in between. The file returned is
// read-only (a file open for writing cannot be executed) and close-on-exec:
// a child gets it only as fdStage, from stageCommand.
func sealedStage(bin []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("airlock-stage", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) {
		// Before 6.3 the kernel knows no MFD_EXEC: every memfd is
		// executable there.
		fd, err = unix.MemfdCreate("airlock-stage", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil, &os.SyscallError{Syscall: "memfd_create(airlock-stage)", Err: err}
	}
	defer unix.Close(fd)
	for b := bin; len(b) > 0; {
		n, err := unix.Write(fd, b)
		if err != nil {
			return nil, &os.SyscallError{Syscall: "write(memfd airlock-stage)", Err: err}
		}
		b = b[n:]
	}
	const seals = unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return nil, &os.SyscallError{Syscall: "fcntl(memfd airlock-stage, F_ADD_SEALS)", Err: err}
	}
	ro, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reopen the sealed stage read-only: %w", err)
	}
	return os.NewFile(uintptr(ro), "airlock-stage"), nil
}
