package sandbox

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// terminal is the sandbox's own terminal, a pty, relayed to the launcher's
// controlling terminal (Config.Terminal), as sudo's use_pty and ssh -t
// do. The sandbox never holds a descriptor of the user's terminal: what
// it reads is what the relay passes on while the launch is in the
// foreground, and nothing once the user has suspended it (^Z), whatever
// its processes do (leave the session, ignore SIGTTIN, take the pty's
// foreground). The user's terminal is raw while the relay runs: every key
// goes to the pty, whose line discipline makes ^C and ^\ signals for the
// sandbox's foreground group; ^Z is the relay's own, to pause the sandbox
// (its cgroups frozen) and stop the launch as a shell's job.
type terminal struct {
	outer  *os.File     // the launcher's controlling terminal, /dev/tty
	master *os.File     // the pty's master; the sandbox holds its slave
	saved  unix.Termios // the outer terminal's modes, given back at close
	groups []string     // the sandbox's cgroups, frozen while it is suspended
	susp   byte         // the outer terminal's suspend character; 0: none

	mu  sync.Mutex // raw, and the modes with it
	raw bool

	sigs      chan os.Signal
	stderr    int // the launcher's own stderr, moved aside while raw; -1: not moved
	stderrOut chan struct{}
	out       chan struct{} // closed when the sandbox's output is all relayed
}

// openTerminal makes a pty for the sandbox with the modes and size of the
// launcher's controlling terminal. The slave is the caller's to give to
// the sandbox and close; start begins the relay once the sandbox runs.
func openTerminal(groups []string) (t *terminal, slave *os.File, err error) {
	outer, err := os.OpenFile("/dev/tty", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open the controlling terminal: %w", err)
	}
	t = &terminal{outer: outer, groups: groups, stderr: -1}
	defer func() {
		if err != nil {
			t.outer.Close()
			if t.master != nil {
				t.master.Close()
			}
		}
	}()
	saved, err := unix.IoctlGetTermios(int(outer.Fd()), unix.TCGETS)
	if err != nil {
		return nil, nil, &os.SyscallError{Syscall: "tcgetattr(/dev/tty)", Err: err}
	}
	t.saved, t.susp = *saved, saved.Cc[unix.VSUSP]
	if t.master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0); err != nil {
		return nil, nil, fmt.Errorf("open a pty: %w", err)
	}
	m := int(t.master.Fd())
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		return nil, nil, &os.SyscallError{Syscall: "ioctl(TIOCSPTLCK)", Err: err}
	}
	if slave, err = ptyPeer(m); err != nil {
		return nil, nil, err
	}
	// The sandbox's terminal starts as the user's: its erase and
	// interrupt keys, its size.
	if err := unix.IoctlSetTermios(int(slave.Fd()), unix.TCSETS, saved); err != nil {
		slave.Close()
		return nil, nil, &os.SyscallError{Syscall: "tcsetattr(pty)", Err: err}
	}
	t.resize()
	return t, slave, nil
}

// ptyPeer opens the slave of the pty whose master is m: through the master
// itself (TIOCGPTPEER, Linux 4.13), so that no other pty can be opened by
// its path in its place; by its number in /dev/pts before that.
func ptyPeer(m int) (*os.File, error) {
	fd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(m), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno == 0 {
		return os.NewFile(fd, "pty"), nil
	}
	n, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
	if err != nil {
		return nil, &os.SyscallError{Syscall: "ioctl(TIOCGPTN)", Err: err}
	}
	f, err := os.OpenFile(filepath.Join("/dev/pts", strconv.Itoa(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("open the pty's slave: %w", err)
	}
	return f, nil
}

// isControllingTerminal says whether f is the launcher's controlling
// terminal: the kernel answers TIOCGSID only for that one. (Fd would make
// the file blocking: the descriptor is read here through SyscallConn.)
func isControllingTerminal(f *os.File) bool {
	raw, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var ierr error
	if err := raw.Control(func(fd uintptr) { _, ierr = unix.IoctlGetInt(int(fd), unix.TIOCGSID) }); err != nil {
		return false
	}
	return ierr == nil
}

// start makes the user's terminal raw and relays both ways until the
// sandbox's side of the pty is closed by all of its processes.
func (t *terminal) start() {
	t.out = make(chan struct{})
	t.sigs = make(chan os.Signal, 4)
	signal.Notify(t.sigs, syscall.SIGWINCH, syscall.SIGCONT)
	t.makeRaw()
	go t.signals()
	go t.input()
	go func() {
		defer close(t.out)
		// The pty's master reads EIO once the last slave is closed: the
		// sandbox is gone.
		io.Copy(t.outer, t.master)
	}()
}

// close waits for the sandbox's last output to be relayed (its processes
// are gone) and gives the user's terminal its modes back.
func (t *terminal) close() {
	<-t.out
	signal.Stop(t.sigs)
	t.cooked()
	t.master.Close()
	t.outer.Close()
}

// input relays what the user types to the sandbox. Its suspend character
// is the relay's: what came before it goes on, then the launch is
// suspended, and what follows it goes on when the launch is resumed.
func (t *terminal) input() {
	buf := make([]byte, 4096)
	for {
		// In the background (a shell's bg) the read stops the launch
		// (SIGTTIN) until it is in the foreground again.
		n, err := t.outer.Read(buf)
		if err != nil {
			return
		}
		b := buf[:n]
		for len(b) > 0 {
			i := -1
			if t.susp != 0 {
				i = bytes.IndexByte(b, t.susp)
			}
			if i < 0 {
				t.master.Write(b)
				break
			}
			t.master.Write(b[:i])
			b = b[i+1:]
			t.suspend()
		}
	}
}

// suspend pauses the sandbox and stops the launch as the terminal's ^Z
// would: its whole process group, which the shell then reports stopped.
// Resumed (SIGCONT), signals resumes the sandbox.
func (t *terminal) suspend() {
	if err := pauseGroups(t.groups, true); err != nil {
		fmt.Fprintf(t.outer, "\r\nairlock: the sandbox could not be paused, and runs on without the terminal until it is resumed: %v\r\n", err)
	}
	t.cooked()
	syscall.Kill(0, syscall.SIGTSTP)
}

// signals follows the terminal's size, and a resume: in the foreground
// the terminal is made raw again, and the sandbox runs again, in the
// foreground or not (a shell's bg).
func (t *terminal) signals() {
	for s := range t.sigs {
		switch s {
		case syscall.SIGWINCH:
			t.resize()
		case syscall.SIGCONT:
			if foregroundOf(t.outer) {
				t.makeRaw()
				t.resize()
			}
			if err := pauseGroups(t.groups, false); err != nil {
				fmt.Fprintf(t.outer, "airlock: the sandbox could not be resumed: %v\r\n", err)
			}
		}
	}
}

// TerminalForeground reports whether the launcher holds the foreground of
// its controlling terminal (Config.Terminal). The terminal, not stdin:
// with its stdin a pipe, a command still prompts on /dev/tty (ssh, git's
// credentials).
func TerminalForeground() bool {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return false // no controlling terminal
	}
	defer tty.Close()
	return foregroundOf(tty)
}

// foregroundOf says whether the launcher's process group is the
// foreground one of the terminal tty.
func foregroundOf(tty *os.File) bool {
	raw, err := tty.SyscallConn()
	if err != nil {
		return false
	}
	pgrp, ierr := 0, error(nil)
	if err := raw.Control(func(fd uintptr) { pgrp, ierr = unix.IoctlGetInt(int(fd), unix.TIOCGPGRP) }); err != nil {
		return false
	}
	return ierr == nil && pgrp == unix.Getpgrp()
}

// resize gives the pty the user's terminal's size; the kernel tells the
// sandbox's foreground group (SIGWINCH) when it changes.
func (t *terminal) resize() {
	ws, err := unix.IoctlGetWinsize(int(t.outer.Fd()), unix.TIOCGWINSZ)
	if err == nil {
		unix.IoctlSetWinsize(int(t.master.Fd()), unix.TIOCSWINSZ, ws)
	}
}

// makeRaw passes every key to the pty untouched (cfmakeraw(3)): the pty's
// own line discipline edits, echoes and signals. The launcher's own stderr
// (its logs, the audit lines of an in-process proxy), when it is the
// terminal, goes through withCR meanwhile: a raw terminal starts no new
// line at a line feed.
func (t *terminal) makeRaw() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.raw {
		return
	}
	raw := t.saved
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if unix.IoctlSetTermios(int(t.outer.Fd()), unix.TCSETSW, &raw) != nil {
		return
	}
	t.raw = true
	t.moveStderr()
}

// cooked gives the user's terminal the modes it had.
func (t *terminal) cooked() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.raw {
		return
	}
	t.restoreStderr()
	unix.IoctlSetTermios(int(t.outer.Fd()), unix.TCSETSW, &t.saved)
	t.raw = false
}

// moveStderr puts a pipe in place of the launcher's stderr when that is
// the terminal, copied there through withCR until restoreStderr.
func (t *terminal) moveStderr() {
	if !controlling(os.Stderr) {
		return
	}
	r, w, err := os.Pipe()
	if err != nil {
		return
	}
	saved, err := unix.FcntlInt(2, unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		r.Close()
		w.Close()
		return
	}
	if err := unix.Dup3(int(w.Fd()), 2, 0); err != nil {
		unix.Close(saved)
		r.Close()
		w.Close()
		return
	}
	w.Close()
	t.stderr, t.stderrOut = saved, make(chan struct{})
	go func() {
		defer close(t.stderrOut)
		defer r.Close()
		io.Copy(withCR{t.outer}, r)
	}()
}

// restoreStderr puts the launcher's stderr back, once all that was written
// to the pipe meanwhile is shown.
func (t *terminal) restoreStderr() {
	if t.stderr < 0 {
		return
	}
	unix.Dup3(t.stderr, 2, 0) // the pipe's write end closes, unless a child holds it too
	unix.Close(t.stderr)
	t.stderr = -1
	select {
	case <-t.stderrOut:
	case <-time.After(time.Second):
	}
}

// withCR writes "\r\n" for each line feed, as the terminal's cooked
// output would have.
type withCR struct{ w io.Writer }

func (c withCR) Write(p []byte) (int, error) {
	if _, err := c.w.Write(bytes.ReplaceAll(p, []byte("\n"), []byte("\r\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// discard closes a terminal whose relay never began (the sandbox did not
// start); nil does nothing.
func (t *terminal) discard() {
	if t != nil {
		t.master.Close()
		t.outer.Close()
	}
}
