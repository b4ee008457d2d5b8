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
)

// holderCaller is the test binary as a process that hands its n
// descriptors from 3 up to a holder, says so, and exits when its stdin
// ends.
func holderCaller(n int) int {
	var files []*os.File
	for fd := 3; fd < 3+n; fd++ {
		syscall.CloseOnExec(fd)
		files = append(files, os.NewFile(uintptr(fd), "handed"))
	}
	if err := CloseAfterExit(files); err != nil {
		os.Stdout.WriteString(err.Error() + "\n")
		return 1
	}
	os.Stdout.WriteString("handed\n")
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// What a process hands to CloseAfterExit stays open after it has closed
// its own copies, for as long as it runs, and is closed once it has
// exited. Six descriptors: more than the stage's below fdStage.
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
	caller := exec.Command(os.Args[0])
	caller.Env = append(os.Environ(), "AIRLOCK_HOLDER_CALLER="+strconv.Itoa(len(writes)))
	caller.ExtraFiles = writes
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
