package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Process is a running sandbox: Pid is its init (PID 1 of the sandbox's
// PID namespace, seen from the host), whose exit takes every process of
// the sandbox with it.
type Process struct {
	Pid  int
	proc *os.Process
	done chan struct{}
	err  error
	ps   *os.ProcessState
	// life is the write end of the pipe the init watches: held for the
	// launcher's whole life (its hang-up tells the init the launcher is
	// gone), and written only with signals for the command.
	life   *os.File
	lifeMu sync.Mutex
	term   *terminal // the sandbox's own terminal, relayed (Config.Terminal)
}

// SetupError is a failure of one of stage 2's ordered steps; the command
// never ran.
type SetupError struct {
	Step string
	Err  string
}

func (e *SetupError) Error() string {
	return fmt.Sprintf("sandbox setup step %q failed: %s", e.Step, e.Err)
}

// Start launches c: it re-executes this binary as the sandbox's init, in
// new PID and mount namespaces, which starts the command stage (the
// ordered restrictions, then exec of the command), and returns once the
// command is running or setup has failed. net must be set unless c.Net is
// host. The init is started from a goroutine that holds its OS thread for
// the child's whole life: the parent-death signal fires when that thread
// exits, and the init's death ends the namespace.
//
// When ctx ends before the command runs, the init is killed and Start
// returns ctx's error: a setup step can wait in the kernel without end (a
// path on a FUSE mount whose server stopped answering, a hard NFS mount
// whose server is gone), and whoever launched the sandbox (an operator's
// ^C, a pod's stop) must not wait with it. Once the command runs, ctx no
// longer matters.
func Start(ctx context.Context, c Config, net *Network) (*Process, error) {
	if c.Dir == "" {
		// By its path, looked up in the sandbox's mounts: inherited, the
		// launcher's directory would be held past them, and a path
		// relative to it would reach what they hide (the host's /tmp
		// under the sandbox's own, its sockets with it).
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("sandbox: the working directory: %w (name one: --cwd)", err)
		}
		c.Dir = wd
	}
	if home := homeOf(c.UID); home != "" {
		c.Hidden = append(slices.Clone(c.Hidden), home)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Net != NetHost && net == nil {
		return nil, errors.New("sandbox: a network namespace is required unless --net host")
	}
	if ctx.Err() != nil {
		return nil, stoppedInSetup(ctx)
	}
	var err error
	// The pipes' launcher ends stay open until the sandbox is running;
	// the ends the init holds are closed once it is started.
	var cfgR, cfgW, statR, statW, lifeR, lifeW *os.File
	fail := func(err error) (*Process, error) {
		for _, f := range []*os.File{cfgR, cfgW, statR, statW, lifeR, lifeW} {
			if f != nil {
				f.Close()
			}
		}
		return nil, err
	}
	if cfgR, cfgW, err = os.Pipe(); err != nil {
		return fail(err)
	}
	if statR, statW, err = os.Pipe(); err != nil {
		return fail(err)
	}
	if lifeR, lifeW, err = os.Pipe(); err != nil {
		return fail(err)
	}
	// fdConfig, fdStatus, fdLife, fdNetNS.
	extra := []*os.File{cfgR, statW, lifeR}
	if net != nil {
		// A duplicate, owned by this *os.File and closed after the start:
		// wrapping net.NS itself would let the finalizer close a
		// descriptor the Network still owns (and may have been reused).
		// Close-on-exec until the init's start lays it out: another
		// child forked meanwhile (a reaper, another sandbox's init)
		// must not inherit it.
		fd, err := unix.FcntlInt(uintptr(net.NS), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return fail(&os.SyscallError{Syscall: "fcntl(netns, F_DUPFD_CLOEXEC)", Err: err})
		}
		nsFile := os.NewFile(uintptr(fd), "netns")
		defer nsFile.Close()
		extra = append(extra, nsFile)
	}
	cmd, err := stageCommand(extra, modeInit)
	if err != nil {
		return fail(err)
	}
	// The command gets c.Env, never the init's (empty) one. In a
	// terminal's foreground, and not in a pipeline (whose other programs
	// may read the terminal too, as a pager does), the sandbox gets a pty
	// of its own, made on the thread that starts it (ownPTYs).
	var term *terminal
	if c.Terminal && controlling(c.Stdin) && controlling(c.Stdout) {
		if term, err = openTerminal(c.Cgroups); err != nil {
			return fail(err)
		}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = offTerminal(&c)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own PID namespace: the init is PID 1, and when it exits
		// the kernel kills whatever the command left behind. Its own
		// mount namespace, for a /proc that shows only the sandbox. Its
		// own IPC namespace: System V and POSIX message queues, shared
		// memory and semaphores are otherwise shared with the host and
		// every other sandbox (one uid by default), past Landlock and
		// the network.
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC,
		// The init leads a session of its own, not only a process
		// group: in the launcher's session the user's terminal would be
		// its controlling one, and a sandbox that ignores SIGTTOU may make
		// its group the terminal's foreground (tcsetpgrp) and read what
		// the user types next. Nor is it given a descriptor of that
		// terminal: a pty of its own instead (onTerminal), or none
		// (offTerminal).
		Setsid: true,
	}
	if c.DieWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	p := &Process{done: make(chan struct{}), life: lifeW}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		slave, err := ownPTYs(term)
		if err != nil {
			started <- err
			close(p.done)
			return
		}
		if slave != nil {
			defer slave.Close() // the sandbox's own copies are all it needs
			cmd.Stdin, cmd.Stdout = slave, slave
			if controlling(c.Stderr) {
				cmd.Stderr = slave
			}
			cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, 0
		}
		if net != nil {
			// The init is born in the sandbox's network namespace, each
			// of its threads with it (checkNetNS); this thread, locked
			// until it ends, runs nothing else.
			if err := unix.Setns(int(net.NS), unix.CLONE_NEWNET); err != nil {
				started <- &os.SyscallError{Syscall: "setns(CLONE_NEWNET)", Err: err}
				close(p.done)
				return
			}
		}
		if err := startManaged(cmd); err != nil {
			started <- err
			close(p.done)
			return
		}
		started <- nil
		p.err = waitManaged(cmd)
		p.ps = cmd.ProcessState
		close(p.done)
	}()
	if err := <-started; err != nil {
		term.discard()
		return fail(fmt.Errorf("start sandbox: %w", err))
	}
	p.Pid, p.proc = cmd.Process.Pid, cmd.Process
	lifeR.Close()
	cfgR.Close()
	statW.Close()
	err = json.NewEncoder(cfgW).Encode(c)
	cfgW.Close()
	if err != nil {
		// The init closed its end: it is gone, or going.
		p.proc.Kill()
		<-p.done
		term.discard()
		return fail(fmt.Errorf("send sandbox config: %w", err))
	}
	// The status pipe closes without a word when exec succeeds (CLOEXEC);
	// a setup failure writes which step failed.
	type status struct {
		se  stepError
		err error
	}
	read := make(chan status, 1)
	go func() {
		var st status
		st.err = json.NewDecoder(statR).Decode(&st.se)
		statR.Close()
		read <- st
	}()
	var st status
	select {
	case st = <-read:
	case <-ctx.Done():
		select {
		case st = <-read: // the setup ended as ctx did: its outcome stands
		default:
			err := p.abandon(ctx)
			lifeW.Close()
			term.discard()
			return nil, err
		}
	}
	if st.err == nil {
		<-p.done
		lifeW.Close()
		term.discard()
		return nil, &SetupError{Step: st.se.Step, Err: st.se.Error}
	}
	if term != nil {
		// The relay begins once the command runs: until then the
		// terminal is the launcher's, a ^C an order to it.
		p.term = term
		term.start()
	}
	return p, nil
}

// reapWithin is how long abandon waits for a killed init to be reaped. A
// wait that SIGKILL ends (for a FUSE request its server has not read, an
// NFS one) ends at once; a process that stays (its request read by a live
// server that never answers) is reaped when the wait ends, by the
// goroutine that started it, and the launch does not wait for that.
const reapWithin = 5 * time.Second

// stoppedInSetup is why a sandbox whose setup ctx ended never ran.
func stoppedInSetup(ctx context.Context) error {
	return fmt.Errorf("sandbox setup stopped before the command ran: %w", context.Cause(ctx))
}

// abandon kills a sandbox whose setup ctx ended, and says so.
func (p *Process) abandon(ctx context.Context) error {
	p.proc.Kill()
	err := stoppedInSetup(ctx)
	select {
	case <-p.done:
		return err
	case <-time.After(reapWithin):
		return fmt.Errorf("%w; its init (pid %d), killed, was still not reaped after %v: a step waits in the kernel (on a hung FUSE or NFS path it was given?)", err, p.Pid, reapWithin)
	}
}

// Signal sends sig to the command, through the init (on the life pipe:
// the init takes no signals as orders). SIGKILL goes to the init itself,
// whose death ends the whole sandbox.
func (p *Process) Signal(sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		// os.Process signals through a pidfd: a reaped init's pid,
		// reused, is never hit.
		return p.proc.Signal(sig)
	}
	select {
	case <-p.done:
		return os.ErrProcessDone
	default:
	}
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	_, err := p.life.Write([]byte{byte(sig)})
	return err
}

// Wait waits for the command and returns its exit code: its status, or
// 128+N when killed by signal N. Every process of the sandbox is gone when
// it returns: the kernel empties a PID namespace before its init is
// reaped.
func (p *Process) Wait() (int, error) {
	<-p.done
	if p.term != nil {
		p.term.close()
	}
	p.lifeMu.Lock()
	p.life.Close()
	p.lifeMu.Unlock()
	if p.ps == nil {
		return 125, p.err
	}
	if ws, ok := p.ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return p.ps.ExitCode(), nil
}

// Done is closed when the command has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// offTerminal is the sandbox's standard streams. Not in a terminal's
// foreground, the sandbox gets no descriptor of a terminal: with one it
// could read what the user types whenever it liked (setsid takes a
// process out of the terminal's job control, which is what stops a
// background job's reads) or change the terminal's modes. What it writes
// to a terminal the launcher copies there (through a pipe, exec.Cmd's);
// it reads nothing (/dev/null).
func offTerminal(c *Config) (io.Reader, io.Writer, io.Writer) {
	in := c.Stdin
	if isTerminal(in) {
		in = nil
	}
	out := relayed(c.Stdout)
	// A terminal is a file: compared as one (a writer of another type
	// may not be comparable at all).
	if so, ok := c.Stdout.(*os.File); ok && so != nil {
		if se, ok := c.Stderr.(*os.File); ok && se == so {
			return in, out, out // one pipe for both, as for the file itself
		}
	}
	return in, out, relayed(c.Stderr)
}

// relayed is w, hidden behind a pipe when it is a terminal, which gets
// nothing it would answer (answerless).
func relayed(w io.Writer) io.Writer {
	if isTerminal(w) {
		return &answerless{w: w}
	}
	return w
}

// isTerminal says whether v is a file that is a terminal. (Through
// control: Fd would make a descriptor the shell shares blocking.)
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	if !ok || f == nil {
		return false
	}
	return control(f, func(fd int) error { _, err := unix.IoctlGetTermios(fd, unix.TCGETS); return err }) == nil
}

// maxPTYs bounds the ptys a sandbox makes (its relayed one among them):
// every devpts instance but the host's draws on one pool the kernel keeps
// (/proc/sys/kernel/pty/max less pty/reserve), which a sandbox could
// otherwise empty for every other sandbox and container.
const maxPTYs = 64

// ownPTYs gives the thread that starts the sandbox (and so the sandbox,
// whose mount namespace is copied from the thread's) a mount namespace of
// its own with a devpts of its own on /dev/pts: the host's /dev/pts holds
// the user's terminals, and one whose owner is the sandbox's uid (--user
// as the user) could be opened by its path and read, what the user types
// anywhere. The sandbox sees only the ptys it makes itself, and the one
// made here for term (nil: none), whose slave is returned: its name,
// /dev/pts/0, is its name in the sandbox too (tty, ttyname).
func ownPTYs(term *terminal) (*os.File, error) {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return nil, &os.SyscallError{Syscall: "unshare(CLONE_NEWNS)", Err: err}
	}
	// Nothing mounted here reaches the host's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, &os.SyscallError{Syscall: "mount(/, MS_REC|MS_PRIVATE)", Err: err}
	}
	const dir = "/dev/pts"
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		if term != nil {
			return nil, fmt.Errorf("a terminal for the sandbox: %s is not a directory", dir)
		}
		return nil, nil // none to hide
	}
	if err := unix.Mount("devpts", dir, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,max="+strconv.Itoa(maxPTYs)); err != nil {
		return nil, &os.SyscallError{Syscall: "mount(devpts, " + dir + ")", Err: err}
	}
	if _, err := os.Lstat("/dev/ptmx"); err == nil {
		if err := unix.Mount(filepath.Join(dir, "ptmx"), "/dev/ptmx", "", unix.MS_BIND, ""); err != nil {
			return nil, &os.SyscallError{Syscall: "mount(" + dir + "/ptmx, /dev/ptmx, MS_BIND)", Err: err}
		}
	}
	if term == nil {
		return nil, nil
	}
	return term.openPTY(filepath.Join(dir, "ptmx"))
}

// controlling says whether v is a file that is the launcher's controlling
// terminal.
func controlling(v any) bool {
	f, ok := v.(*os.File)
	return ok && f != nil && isControllingTerminal(f)
}
