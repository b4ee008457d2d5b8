package sandbox

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// holderCaller is the test binary as a process that hands its n
// descriptors from 3 up to a holder, closes the one after them, which it
// inherited (not close-on-exec) and did not hand over, says so, and exits
// when its stdin ends.
func holderCaller(n int) int {
	var files []*os.File
	for fd := 3; fd < 3+n; fd++ {
		syscall.CloseOnExec(fd)
		files = append(files, os.NewFile(uintptr(fd), "handed"))
	}
	// Above the numbers the holder's layout takes.
	const kept = 50
	if err := unix.Dup2(3+n, kept); err != nil {
		os.Stdout.WriteString(err.Error() + "\n")
		return 1
	}
	syscall.Close(3 + n)
	if err := CloseAfterExit(files); err != nil {
		os.Stdout.WriteString(err.Error() + "\n")
		return 1
	}
	syscall.Close(kept)
	os.Stdout.WriteString("handed\n")
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// What a process hands to CloseAfterExit stays open after it has closed
// its own copies, for as long as it runs, and is closed once it has
// exited. Six descriptors: more than the stage's below fdStage. What it
// did not hand over is not held.
func TestCloseAfterExit(t *testing.T) {
	var reads, writes []*os.File
	for range 6 {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		reads, writes = append(reads, r), append(writes, w)
		defer r.Close()
	}
	keptR, keptW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer keptR.Close()
	caller := exec.Command(os.Args[0])
	caller.Env = append(os.Environ(), "AIRLOCK_HOLDER_CALLER="+strconv.Itoa(len(writes)))
	caller.ExtraFiles = append(writes, keptW)
	stdin, err := caller.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := caller.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := caller.Start(); err != nil {
		t.Fatal(err)
	}
	defer caller.Process.Kill()
	for _, w := range writes {
		w.Close()
	}
	keptW.Close()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "handed\n" {
		t.Fatalf("the caller said %q, %v", line, err)
	}

	for i, r := range reads {
		r.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := r.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("pipe %d while the caller runs, its copy closed: %v, want it held open", i, err)
		}
	}
	keptR.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := keptR.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("a pipe the caller inherited and closed, not handed over: %v, want EOF (the holder has no copy)", err)
	}
	stdin.Close()
	if err := caller.Wait(); err != nil {
		t.Fatal(err)
	}
	for i, r := range reads {
		r.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := r.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("pipe %d after the caller exited: %v, want EOF", i, err)
		}
	}
}
