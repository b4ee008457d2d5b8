package sandbox

import (
	"bytes"
	crand "crypto/rand"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
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
	inDone    chan struct{} // closed when input has returned
	relay     *answerless   // the sandbox's output on its way to the terminal
	answers   atomic.Bool   // the terminal answered a query during the session (answerSeen)
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
	t.out, t.stop, t.inDone, t.keys = make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan []byte, keyChunks)
	t.relay = &answerless{w: t.outer, passAll: t.passes, utf8: t.saved.Iflag&unix.IUTF8 != 0}
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
		io.Copy(t.relay, t.master)
	}()
}

// close waits for the sandbox's last output to be relayed (its processes
// are gone), ends the input (a key typed from now on is the shell's, but
// for a drain's), and gives the user's terminal its modes back.
func (t *terminal) close() {
	<-t.out
	signal.Stop(t.sigs)
	close(t.stop)
	t.outer.SetReadDeadline(time.Now())
	<-t.inDone // its read ended: the drain's is the only one
	t.mu.Lock()
	t.closed = true // raw is close's alone now: makeRaw refuses, input has returned
	raw := t.raw
	t.mu.Unlock()
	restore := uint(unix.TCSETSW)
	// Only where an answer may be on its way: something that may ask
	// passed as it is, and the terminal is raw and the launch's to read.
	// (Nothing passes as it is off the foreground; there the answers
	// would be the shell's to read anyway.)
	if raw && t.relay.mayHaveAsked() && foregroundOf(t.outer) {
		t.drain()
		// Flushed, not kept for the shell: what arrived since the
		// drain's last read is the rest of an answer late past its
		// bound, or keys typed as the sandbox ended, dropped with the
		// others. Without a drain, keys typed ahead are the shell's.
		restore = unix.TCSETSF
	}
	t.cooked(restore)
	t.master.Close()
	t.outer.Close()
}

// drainWithin bounds the drain where the terminal answered nothing
// during the session (script(1), a CI's pty, a terminal that answers no
// query): one that answers no cursor report holds the launch's end no
// longer, and what it answers later is the shell's input, as without a
// drain. drainAnswered bounds it where the terminal did answer: one that
// answers at all answers the request within its round trip, which over a
// slow link (ssh) can be longer than drainWithin, and the drain given up
// before its reports arrive would leave them to the shell, the garbage
// of the relay's own making. A sandbox can make the drain last this long,
// its request swallowed by a string it left open (tmux's passthrough,
// ESC Ptmux;) or meaningless in a mode it set (VT52's), or by asking for
// more reports than the drain looks among, or answers come
// later than this (many queries over a slow link): bounded, and no worse
// than no drain.
//
// Out of reach either way are answers a terminal gives late by design:
// kitty asks the user before it answers an OSC 52 clipboard read, and
// types the answer whenever they allow it, long after the launch ended.
const (
	drainWithin   = 300 * time.Millisecond
	drainAnswered = 2 * time.Second
)

// drain reads, and drops, the answers to what the sandbox asked the
// terminal as it ended, which the terminal types into its input once the
// relay has stopped reading it: left there, the shell would read them as
// typed by the user (a DECRQSS or title report carrying text of the
// sandbox's choosing). It asks the terminal, after all the sandbox wrote,
// for cursor reports at places of its own choosing (askCursorReports): a
// terminal answers in order, so once those are read, so are the answers
// before them. Reports the sandbox asked for, which may come first and
// alone (its query's answer held back behind them on a slow link), cannot
// pass for them: the places are random. Keys typed meanwhile are dropped
// with the answers, there being no telling them apart: typed as the
// sandbox ended, they were meant for it. The terminal stays raw
// throughout: nothing is echoed, and no line is waited for.
func (t *terminal) drain() {
	raw, err := t.outer.SyscallConn()
	if err != nil {
		return
	}
	var rows, cols int
	control(t.outer, func(fd int) error {
		ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
		if err == nil {
			rows, cols = int(ws.Row), int(ws.Col)
		}
		return err
	})
	ask, reports := askCursorReports(rows, cols)
	within := drainWithin
	if t.answers.Load() {
		within = drainAnswered
	}
	t.outer.SetReadDeadline(time.Now().Add(within)) // close's, which ended input, has passed
	if _, err := t.outer.Write(ask); err != nil {
		return
	}
	buf := make([]byte, 1024)
	for {
		var n int
		var rerr error
		err := raw.Read(func(fd uintptr) bool {
			if !foregroundOf(t.outer) { // a read would stop the launch (SIGTTIN)
				rerr = os.ErrClosed
				return true
			}
			n, rerr = unix.Read(int(fd), buf)
			return rerr != unix.EAGAIN && rerr != unix.EINTR
		})
		if err != nil || rerr != nil || n <= 0 || reports.scan(buf[:n]) {
			return // the reports read, past the deadline, or not the launch's to read
		}
	}
}

// askCursorReports is the drain's request, in one write, and what finds
// its answer. First it ends what the sandbox may have left the terminal
// in that would hold the request unanswered: CAN and ST a string left
// open (kitty ignores CAN inside an OSC, and ST ends it), and the end of a
// synchronized update (mode 2026), during which kitty holds all it reads,
// queries included, for up to 2 s, past the drain's bound, then answers
// them into the shell. Then the cursor saved (DECSC, its origin mode with
// it: the terminal's one saved cursor, whatever the sandbox saved there,
// is lost), origin mode off (the places absolute), moved to
// reportPlaces places and each reported, and restored (DECRC). The
// places are random, unknowable to the sandbox, and on a screen of rows
// by cols (24 by 80 if unknown or smaller than minPlaces cells: a terminal
// reports a place off its screen as the edge's, and the drain then waits
// out its bound, where on a screen of a few cells a sandbox could ask for
// every run of four places, as reportPlaces says).
func askCursorReports(rows, cols int) ([]byte, *cursorReports) {
	if rows*cols < minPlaces {
		rows, cols = 24, 80
	}
	var seed [32]byte
	crand.Read(seed[:])
	rng := mrand.New(mrand.NewChaCha8(seed))
	ask := []byte("\x18\x1b\\\x1b[?2026l\x1b7\x1b[?6l")
	c := &cursorReports{}
	for i := range c.places {
		c.places[i] = fmt.Sprintf("%d;%d", 1+rng.IntN(rows), 1+rng.IntN(cols))
		ask = fmt.Appendf(ask, "\x1b[%sH\x1b[6n", c.places[i])
	}
	return append(ask, "\x1b8"...), c
}

// reportPlaces is how many places the drain asks reports of, and
// maxDrainReports how many reports it reads at most before it stops
// looking for theirs. On a small screen the places are few, and a
// sandbox could ask, as it ends, for reports along a de Bruijn sequence of
// them, one of whose runs the drain's would be: a run of two is found
// among (rows·cols)² reports, of four not among any number a drain sees
// within its bound, once it reads 64 at most.
const (
	reportPlaces    = 4
	maxDrainReports = 64
	minPlaces       = 64 // cells; 64⁴ runs are far past any 64 reports
)

// cursorReports finds, in what the terminal types, cursor reports of its
// places, in order, one right after the other (each ESC [ row ; column R,
// or with CSI as a C1 control), however reads split them, whatever
// reports come before (some of the places' the sandbox asked for), among
// the first maxDrainReports reports.
type cursorReports struct {
	places  [reportPlaces]string // row;column
	at      byte                 // 0: in no report; ESC: after ESC; '[': in one's parameters
	param   []byte
	last    [reportPlaces]string // the places of the reports just read, one after the other, the latest last
	run     int                  // how many of last are reports
	reports int                  // how many reports were read
}

// scan reads p on, and says whether it held the reports' end.
func (c *cursorReports) scan(p []byte) bool {
	for _, b := range p {
		if c.step(b) {
			return true
		}
	}
	return false
}

func (c *cursorReports) step(b byte) bool {
	switch {
	case c.at == 0 && b == 0x1b:
		c.at = 0x1b
	case c.at == 0 && b == 0x9b, c.at == 0x1b && b == '[':
		c.at, c.param = '[', c.param[:0]
	case c.at == '[' && (b >= '0' && b <= '9' || b == ';') && len(c.param) < 16:
		c.param = append(c.param, b)
	case c.at == '[' && b == 'R':
		c.at = 0
		c.reports++
		copy(c.last[:], c.last[1:])
		c.last[len(c.last)-1] = string(c.param)
		c.run = min(c.run+1, len(c.last))
		return c.run == len(c.last) && c.last == c.places && c.reports <= maxDrainReports
	default: // something between reports, which may begin the next
		began := c.at != 0
		c.at, c.run = 0, 0
		if began {
			return c.step(b)
		}
	}
	return false
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
	defer close(t.inDone)
	raw, err := t.outer.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 4096)
	var seen answerSeen
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
			return rerr != unix.EAGAIN && rerr != unix.EINTR
		})
		if err != nil || rerr != nil || n <= 0 {
			return
		}
		b := buf[:n]
		if !t.answers.Load() && seen.scan(b) {
			t.answers.Store(true)
		}
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

// answerSeen finds, in what the terminal types, an answer to a query: a
// cursor report (ESC [ row ; column R) or primary device attributes
// (ESC [ ? … c), the two a program asks most, split between reads or not.
// Keys make neither: a key's sequence ends in a letter other than R, or
// in ~ (F3 with a modifier is ESC [ 1 ; m R in some terminals, which
// only lengthens a drain's bound).
type answerSeen struct {
	at      byte // 0: in none; ESC: after ESC; '[': in a CSI's parameters
	private bool // the CSI's parameters begin with ?
}

// scan reads p on, and says whether it held an answer's end.
func (a *answerSeen) scan(p []byte) bool {
	for _, b := range p {
		switch {
		case b == 0x1b:
			a.at = 0x1b
		case a.at == 0x1b && b == '[', b == 0x9b:
			a.at, a.private = '[', false
		case a.at == '[' && b == '?' && !a.private:
			a.private = true
		case a.at == '[' && (b >= '0' && b <= '9' || b == ';'):
		case a.at == '[' && (b == 'R' && !a.private || b == 'c' && a.private):
			return true
		default:
			a.at = 0
		}
	}
	return false
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
	t.cooked(unix.TCSETSW)
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

// cooked gives the user's terminal the modes it had, by the request how:
// TCSETSW keeps what is typed ahead for the shell, TCSETSF drops it.
func (t *terminal) cooked(how uint) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.raw {
		return
	}
	t.restoreStderr()
	control(t.outer, func(fd int) error { return unix.IoctlSetTermios(fd, how, &t.saved) })
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
