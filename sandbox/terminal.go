package sandbox

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/signal"
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

	mu        sync.Mutex // raw, closed and suspended, and the modes with them
	raw       bool
	closed    bool
	suspended bool // by the relay's ^Z, until SIGCONT

	sigs      chan os.Signal
	keys      chan []byte   // what input relays, written to the pty by feed
	stop      chan struct{} // closed by close: input ends
	stderr    int           // the launcher's own stderr, moved aside while raw; -1: not moved
	stderrOut chan struct{}
	out       chan struct{} // closed when the sandbox's output is all relayed
}

// openTerminal readies a terminal for the sandbox with the modes of the
// launcher's controlling terminal; its pty is made by openPTY, on the
// thread that starts the sandbox, and start begins the relay once the
// sandbox runs. The descriptors are used through SyscallConn, never Fd:
// they stay in Go's poller, so that close can end a read in flight.
func openTerminal(groups []string) (*terminal, error) {
	outer, err := os.OpenFile("/dev/tty", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("open the controlling terminal: %w", err)
	}
	t := &terminal{outer: outer, groups: groups, stderr: -1}
	var saved *unix.Termios
	if err := control(outer, func(fd int) (err error) { saved, err = unix.IoctlGetTermios(fd, unix.TCGETS); return err }); err != nil {
		outer.Close()
		return nil, &os.SyscallError{Syscall: "tcgetattr(/dev/tty)", Err: err}
	}
	t.saved, t.susp = *saved, saved.Cc[unix.VSUSP]
	return t, nil
}

// openPTY makes the pty through ptmx and returns its slave, with the
// user's terminal's modes (its erase and interrupt keys) and size.
func (t *terminal) openPTY(ptmx string) (slave *os.File, err error) {
	if t.master, err = os.OpenFile(ptmx, os.O_RDWR|syscall.O_NOCTTY, 0); err != nil {
		return nil, fmt.Errorf("open a pty: %w", err)
	}
	err = control(t.master, func(m int) error {
		if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
			return &os.SyscallError{Syscall: "ioctl(TIOCSPTLCK)", Err: err}
		}
		// The slave through the master itself (TIOCGPTPEER, Linux
		// 4.13): no other pty can be opened by its path in its place.
		fd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(m), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
		if errno != 0 {
			return &os.SyscallError{Syscall: "ioctl(TIOCGPTPEER)", Err: errno}
		}
		slave = os.NewFile(fd, "pty")
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := control(slave, func(fd int) error { return unix.IoctlSetTermios(fd, unix.TCSETS, &t.saved) }); err != nil {
		slave.Close()
		return nil, &os.SyscallError{Syscall: "tcsetattr(pty)", Err: err}
	}
	t.resize()
	return slave, nil
}

// control runs f on f's descriptor without taking it out of Go's poller.
func control(f *os.File, fn func(fd int) error) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := raw.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// isControllingTerminal says whether f is the launcher's controlling
// terminal: the kernel answers TIOCGSID only for that one.
func isControllingTerminal(f *os.File) bool {
	return control(f, func(fd int) error { _, err := unix.IoctlGetInt(fd, unix.TIOCGSID); return err }) == nil
}

// start makes the user's terminal raw and relays both ways until the
// sandbox's side of the pty is closed by all of its processes.
func (t *terminal) start() {
	t.out, t.stop, t.keys = make(chan struct{}), make(chan struct{}), make(chan []byte, keyChunks)
	t.sigs = make(chan os.Signal, 4)
	signal.Notify(t.sigs, syscall.SIGWINCH, syscall.SIGCONT)
	t.makeRaw()
	go t.signals()
	go t.input()
	go t.feed()
	go func() {
		defer close(t.out)
		// The pty's master reads EIO once the last slave is closed: the
		// sandbox is gone. In the background (a shell's bg) the terminal's
		// answers are the shell's input: answerless then.
		io.Copy(&answerless{w: t.outer, passAll: t.passes}, t.master)
	}()
}

// close waits for the sandbox's last output to be relayed (its processes
// are gone), ends the input (a key typed from now on is the shell's), and
// gives the user's terminal its modes back.
func (t *terminal) close() {
	<-t.out
	signal.Stop(t.sigs)
	close(t.stop)
	t.outer.SetReadDeadline(time.Now())
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.cooked()
	t.master.Close()
	t.outer.Close()
}

// discard closes a terminal whose relay never began (the sandbox did not
// start); nil does nothing.
func (t *terminal) discard() {
	if t == nil {
		return
	}
	if t.master != nil {
		t.master.Close()
	}
	t.outer.Close()
}

// input relays what the user types to the sandbox, while the launch is in
// the terminal's foreground only: the read is the relay's own, made only
// once the foreground is seen (a read in the background would stop the
// launch, SIGTTIN, and Go's poller retries one whenever the terminal is
// readable, the shell's input too). Its suspend character is the relay's:
// what came before it goes on, then the launch is suspended, and what
// follows it goes on when the launch is resumed.
func (t *terminal) input() {
	raw, err := t.outer.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 4096)
	for {
		var n int
		var rerr error
		err := raw.Read(func(fd uintptr) bool {
			select {
			case <-t.stop:
				rerr = os.ErrClosed
				return true
			case <-t.out: // the sandbox is gone: keys typed now are the shell's
				rerr = os.ErrClosed
				return true
			default:
			}
			if !foregroundOf(t.outer) {
				// Not ours to read: the shell's, or another job's. Looked
				// at again when the terminal is readable, at most this
				// often.
				time.Sleep(50 * time.Millisecond)
				return false
			}
			// In the foreground again without a SIGCONT (a shell's fg of
			// a job running in the background): raw before a key is
			// read, not at the ticker's next look.
			t.rawInForeground()
			n, rerr = unix.Read(int(fd), buf)
			return rerr != unix.EAGAIN
		})
		if err != nil || rerr != nil || n <= 0 {
			return
		}
		b := buf[:n]
		for len(b) > 0 {
			i := -1
			if t.susp != 0 {
				i = bytes.IndexByte(b, t.susp)
			}
			if i < 0 {
				t.send(b)
				break
			}
			t.send(b[:i])
			if !t.suspend() {
				t.send(b[i : i+1]) // the sandbox's own, then
			}
			b = b[i+1:]
		}
	}
}

// keyChunks bounds what the relay holds of the user's keys that the
// sandbox has not read: past the pty's own buffer, this many reads.
const keyChunks = 64

// send queues keys for the pty. The relay never waits on a sandbox that
// reads none (frozen, busy): it goes on reading the terminal, so the next
// ^Z is seen. Past keyChunks, keys are dropped with a bell, as a full
// terminal's line discipline does.
func (t *terminal) send(b []byte) {
	if len(b) == 0 {
		return
	}
	select {
	case t.keys <- bytes.Clone(b):
	default:
		t.outer.Write([]byte{'\a'})
	}
}

// feed writes the queued keys to the pty, in order, until close.
func (t *terminal) feed() {
	for {
		select {
		case b := <-t.keys:
			if _, err := t.master.Write(b); err != nil {
				return
			}
		case <-t.stop:
			return
		}
	}
}

// suspend pauses the sandbox and stops the launch as the terminal's ^Z
// would: its whole process group, which the shell then reports stopped.
// Resumed (SIGCONT), signals resumes the sandbox. Where nothing would
// resume it (no shell's job control above the launch: the launcher leads
// its session, as under ssh -t or tmux, or its group is orphaned, or the
// stop is ignored) it does nothing and says so.
func (t *terminal) suspend() bool {
	if !jobControl() {
		return false
	}
	// Suspended before the pause: what the sandbox wrote before it and
	// the relay still copies goes out answerless (passes), the launch
	// about to leave the terminal to the shell.
	t.mu.Lock()
	t.suspended = true // the terminal stays cooked until SIGCONT
	t.mu.Unlock()
	// A sequence the sandbox began in the foreground ends here, not with
	// the shell's "Stopped" line and prompt inside it (DECRQSS's
	// ESC P $ q and the prompt, answered into the shell's input).
	t.outer.Write([]byte{0x18})
	if err := pauseGroups(t.groups, true); err != nil {
		fmt.Fprintf(t.outer, "\r\nairlock: the sandbox could not be paused, and runs on without the terminal until it is resumed: %v\r\n", err)
	}
	t.cooked()
	syscall.Kill(0, syscall.SIGTSTP)
	return true
}

// passes says whether what the sandbox writes reaches the user's terminal
// as it is: while the launch holds its foreground and is not being
// suspended, when the terminal's answers are the sandbox's to read.
func (t *terminal) passes() bool {
	t.mu.Lock()
	suspended := t.suspended
	t.mu.Unlock()
	return !suspended && foregroundOf(t.outer)
}

// jobControl says whether a stop of the launch's group would be seen and
// undone by a shell: the kernel drops a terminal stop signal for an
// orphaned group, whose parent is outside its session or in the group
// itself.
func jobControl() bool {
	ppid := os.Getppid()
	psid, err1 := unix.Getsid(ppid)
	sid, err2 := unix.Getsid(0)
	ppgrp, err3 := unix.Getpgid(ppid)
	return err1 == nil && err2 == nil && err3 == nil && psid == sid && ppgrp != unix.Getpgrp() && !signal.Ignored(syscall.SIGTSTP)
}

// signals follows the terminal's size, and a resume: in the foreground
// the terminal is made raw again, and the sandbox runs again, in the
// foreground or not (a shell's bg).
func (t *terminal) signals() {
	// A shell's fg of a job running in the background sends no SIGCONT:
	// the foreground is looked for too, while the terminal is not raw.
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			t.rawInForeground()
		case s := <-t.sigs:
			switch s {
			case syscall.SIGWINCH:
				t.resize()
			case syscall.SIGCONT:
				t.mu.Lock()
				t.suspended = false
				t.mu.Unlock()
				t.rawInForeground()
				if err := pauseGroups(t.groups, false); err != nil {
					fmt.Fprintf(t.outer, "airlock: the sandbox could not be resumed: %v\r\n", err)
				}
			}
		}
	}
}

// rawInForeground makes the terminal raw again, with the pty its size,
// when the launch holds the terminal's foreground and the terminal is not
// raw: not while the launch is being suspended (it would stop with the
// shell's terminal raw), nor once the relay is closed.
func (t *terminal) rawInForeground() {
	t.mu.Lock()
	may := !t.raw && !t.suspended && !t.closed
	t.mu.Unlock()
	if may && foregroundOf(t.outer) { // makeRaw looks again, under the lock
		t.makeRaw()
		t.resize()
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
	var pgrp int
	err := control(tty, func(fd int) (err error) { pgrp, err = unix.IoctlGetInt(fd, unix.TIOCGPGRP); return err })
	return err == nil && pgrp == unix.Getpgrp()
}

// resize gives the pty the user's terminal's size; the kernel tells the
// sandbox's foreground group (SIGWINCH) when it changes.
func (t *terminal) resize() {
	var ws *unix.Winsize
	if control(t.outer, func(fd int) (err error) { ws, err = unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); return err }) == nil {
		control(t.master, func(fd int) error { return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, ws) })
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
	if t.raw || t.closed || t.suspended {
		return
	}
	raw := t.saved
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if control(t.outer, func(fd int) error { return unix.IoctlSetTermios(fd, unix.TCSETSW, &raw) }) != nil {
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
	control(t.outer, func(fd int) error { return unix.IoctlSetTermios(fd, unix.TCSETSW, &t.saved) })
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
	if err := control(w, func(fd int) error { return unix.Dup3(fd, 2, 0) }); err != nil {
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
		// Drained to its end whatever happens to the terminal: a reader
		// gone, the launcher's next log line would be its death by
		// SIGPIPE.
		io.Copy(withCR{t.outer}, r)
		io.Copy(io.Discard, r)
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
