package events

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// childEnv makes the test binary a writer process (see writer): tests of
// several processes appending to one file, and of one killed mid-write.
const childEnv = "AIRLOCK_EVENTS_WRITER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(writer(spec))
	}
	os.Exit(m.Run())
}

// writerSpec is what a writer process does: goroutines each append n
// events (n 0: until killed) with details padded to pad bytes, and the
// process prints "service seq" on stdout once each Append has returned.
type writerSpec struct {
	Path       string
	Name       string
	Goroutines int
	N          int
	Pad        int
	Opts       Options
}

func (s writerSpec) env() string {
	return fmt.Sprintf("%s=%s|%s|%d|%d|%d|%d|%d", childEnv, s.Path, s.Name, s.Goroutines, s.N, s.Pad, s.Opts.MaxBytes, s.Opts.Keep)
}

func writer(spec string) int {
	f := strings.Split(spec, "|")
	num := func(i int) int { n, _ := strconv.Atoi(f[i]); return n }
	s := writerSpec{Path: f[0], Name: f[1], Goroutines: num(2), N: num(3), Pad: num(4), Opts: Options{MaxBytes: int64(num(5)), Keep: num(6)}}
	l, err := Open(s.Path, s.Opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out := make(chan string)
	done := make(chan error)
	for g := range s.Goroutines {
		go func() {
			done <- appendSeq(l, fmt.Sprintf("%s-%d", s.Name, g), s.N, s.Pad, func(svc string, i int) {
				out <- fmt.Sprintf("%s %d", svc, i)
			})
		}()
	}
	w := bufio.NewWriter(os.Stdout)
	for left := s.Goroutines; left > 0; {
		select {
		case line := <-out:
			fmt.Fprintln(w, line)
			w.Flush()
		case err := <-done:
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			left--
		}
	}
	if err := l.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startWriter starts the test binary as a writer process.
func startWriter(t *testing.T, s writerSpec) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), s.env())
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, bufio.NewScanner(stdout)
}
