package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"
)

// Stage2Arg is argv[1] of the airlock binary re-executed as one of the
// sandbox's own processes; argv[2] says which (see RunStage2). main must
// call RunStage2 before anything else when it sees it.
const Stage2Arg = "__airlock-sandbox-stage2"

// The processes the launcher starts from its own binary.
const (
	modeInit    = "init"    // PID 1 of the sandbox (init.go)
	modeCommand = "command" // the ordered restrictions, then exec of the command
	modeReaper  = "reaper"  // removes the cgroups of a launcher that died (reaper.go)
	// modeTreeReaper removes a cgroup tree (a pod's) of a launcher that died.
	modeTreeReaper = "reaper-tree"
	// modeHolder holds descriptors until the launcher has exited
	// (CloseAfterExit).
	modeHolder = "holder"
)

// File descriptors the launcher hands to the init, and the init to the
// command stage (config and status only).
const (
	fdConfig = 3 // JSON Config, read once
	fdStatus = 4 // setup error report; closed by a successful exec
	fdLife   = 5 // read end of a pipe only the launcher writes: EOF when it is gone
	fdNetNS  = 6 // the sandbox's network namespace (absent for --net host)
	// fdStage is the stage binary, which the init and the reapers were
	// executed from by this number (stageCommand); they close it first.
	fdStage = 7
)

// stepError names the step that failed; the launcher prints it.
type stepError struct {
	Step  string `json:"step"`
	Error string `json:"error"`
}

// RunStage2 runs the sandbox process argv[2] names. It never returns.
func RunStage2() {
	mode := ""
	if len(os.Args) > 2 {
		mode = os.Args[2]
	}
	switch mode {
	case modeInit:
		unix.Close(fdStage)
		runInit()
	case modeCommand: // started by the init, which gave it no fdStage
		runCommandStage()
	case modeReaper, modeTreeReaper:
		unix.Close(fdStage)
		runReaper(mode == modeTreeReaper, os.Args[3:])
	case modeHolder:
		unix.Close(fdStage)
		runHolder(os.Args[3:])
	}
	fmt.Fprintf(os.Stderr, "airlock: unknown sandbox stage %q\n", mode)
	os.Exit(125)
}

// workDir enters Config.Dir by its path among the sandbox's mounts: as
// root (enter), so that a directory the sandbox's uid may not enter (the
// 0700 home the launcher ran from) is its directory all the same, as it
// was the launcher's; where root is the one refused (a FUSE mount without
// allow_other, an NFS home that squashes root), as the sandbox's uid
// (enterAsSandbox). Landlock says what it may read there.
type workDir struct{ refused bool }

func (w *workDir) enter(c *Config) error {
	if c.Dir == "" {
		return nil
	}
	err := os.Chdir(c.Dir)
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		w.refused = true
		return nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: the sandbox does not have it (what the host has in /run off the host network, and in /tmp and /var/tmp, is there only where the sandbox is given it); give it with --ro, or name another with --cwd", err)
	}
	return err
}

func (w *workDir) enterAsSandbox(c *Config) error {
	if !w.refused {
		return nil
	}
	return os.Chdir(c.Dir)
}

// runCommandStage runs the ordered per-process restrictions and execs the
// command. It only returns on failure, after reporting which step failed.
func runCommandStage() {
	// Credentials, capabilities, no_new_privs, Landlock and seccomp are
	// per thread: do everything on this one and exec from it.
	runtime.LockOSThread()
	c, report := readConfig()
	step := ""
	fail := func(err error) { report(step, err) }
	parent := os.Getppid()
	var wd workDir

	steps := []struct {
		name string
		run  func(*Config) error
	}{
		// The init has joined the network namespace and mounted the
		// sandbox's /proc. The cgroups are joined here, before anything
		// forks, so that everything the command starts is in them, and
		// the init is not: its threads would count against pids.max
		// and the OOM killer could pick it.
		{"join cgroup", joinCgroup},
		// Landlock's paths must be opened before the uid switch can make
		// them unreadable.
		{"open landlock paths", openLandlock},
		// A pinned command is opened and hashed here, as root, and that
		// descriptor is what the exec runs (execpin.go).
		{"verify pinned binary", openPinned},
		// As root, before the uid switch (workDir).
		{"enter the working directory", wd.enter},
		// The session keyring came from whoever launched the sandbox
		// (an operator's shell: Kerberos tickets, ecryptfs and other
		// keys), and its keys' names show in /proc/keys to whoever
		// possesses it; with --seccomp off, keyctl reads them. As root,
		// whose key quota a sandbox of a shared uid cannot exhaust.
		{"leave the launcher's session keyring", newSessionKeyring},
		// The bounding set caps what any later exec can gain; dropping
		// it needs CAP_SETPCAP, so it goes before the uid switch.
		{"drop capability bounding set", dropBounding},
		// setgroups/setresgid/setresuid on this thread, the one that
		// execs (switchThreadIDs).
		{"switch uid and gid", switchThreadIDs},
		{"enter the working directory as the sandbox's uid", wd.enterAsSandbox},
		// The uid switch cleared the capabilities; grant exactly the
		// kept ones back, permitted, effective, inheritable and ambient.
		{"set capabilities", setCaps},
		{"disable core dumps", noDumps},
		{"set rlimits", setRlimits},
		// The parent (the init) dying kills this process with the
		// namespace anyway; the signal covers the gap until exec.
		{"die with parent", func(c *Config) error { return dieWithParent(c, parent) }},
		// no_new_privs: setuid binaries and file capabilities cannot
		// raise privileges again; Landlock and seccomp require it.
		{"no_new_privs", noNewPrivs},
		{"landlock", enforceLandlock},
		// seccomp last of the restrictions, as close to exec as possible.
		{"seccomp", seccomp},
		{"verify", verify},
		// Nothing the launcher held may leak into the command.
		{"close inherited file descriptors", closeFDs},
	}
	for _, s := range steps {
		step = s.name
		if err := s.run(c); err != nil {
			fail(err)
		}
	}
	step = "exec"
	// The command runs in its directory (workDir); a name with a slash
	// is taken from there by exec, a bare one only from PATH's absolute
	// entries.
	path, err := lookPath(c.Command[0], c.Env)
	if err != nil {
		fail(err)
	}
	if pinned >= 0 {
		fail(execPinned(c.Command, c.Env))
	}
	fail(syscall.Exec(path, c.Command, c.Env))
}

// joinCgroup joins c.Cgroups, each as "0", the writer itself, whatever its
// pid in this namespace. A v1 group is joined by this thread alone (its
// tasks file), the one that execs: the exec ends the process's other
// threads, and the command runs in this one's groups. Joined as a whole
// process (cgroup.procs), each join took the kernel's global threadgroup
// lock for writing, whose first writer waits for an RCU grace period: ~15
// ms of a one-off's start in a pod whose limits live in v1 groups. A v2
// group takes whole processes only, and the v2 leaf the command stage is
// born in when it can (startCommandStage).
func joinCgroup(c *Config) error {
	for _, dir := range c.Cgroups {
		file := "cgroup.procs"
		var fs unix.Statfs_t
		if err := unix.Statfs(dir, &fs); err != nil {
			return fmt.Errorf("join cgroup %s: %w", dir, err)
		}
		if fs.Type == unix.CGROUP_SUPER_MAGIC {
			file = "tasks"
		}
		if err := os.WriteFile(dir+"/"+file, []byte("0"), 0); err != nil {
			return fmt.Errorf("join cgroup %s: %w", dir, err)
		}
	}
	return nil
}

// landlockRules is built by openLandlock and enforced by enforceLandlock;
// statusFD is opened with them, so verify can read the kernel's view even
// when Landlock leaves /proc out of reach.
var (
	landlockRules *ruleset
	statusFD      = -1
)

func openLandlock(c *Config) error {
	fd, err := unix.Open("/proc/thread-self/status", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	statusFD = fd
	if c.Landlock == LandlockOff {
		fmt.Fprintln(os.Stderr, "airlock: landlock off: the file system is not restricted")
		return nil
	}
	rs, err := buildRuleset(c)
	if err != nil {
		return err
	}
	for _, s := range rs.skipped {
		fmt.Fprintf(os.Stderr, "airlock: landlock: NOT enforced: %s\n", s)
	}
	landlockRules = rs
	return nil
}

func enforceLandlock(*Config) error {
	if landlockRules == nil {
		return nil
	}
	return landlockRules.enforce()
}

func dropBounding(c *Config) error {
	keep, err := keptCaps(c.KeepCaps)
	if err != nil {
		return err
	}
	caps, err := capability.NewPid2(0)
	if err != nil {
		return err
	}
	if err := caps.Load(); err != nil {
		return err
	}
	caps.Clear(capability.BOUNDS)
	caps.Set(capability.BOUNDING, keep...)
	if err := caps.Apply(capability.BOUNDS); err != nil {
		return fmt.Errorf("prctl(PR_CAPBSET_DROP): %w", err)
	}
	if len(keep) > 0 {
		// Keep permitted capabilities across the uid switch, so the
		// kept ones can be re-raised after it.
		if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
			return &os.SyscallError{Syscall: "prctl(PR_SET_KEEPCAPS)", Err: err}
		}
	}
	return nil
}

// newSessionKeyring gives this thread, the one that execs, an anonymous
// session keyring of its own in place of the launcher's.
func newSessionKeyring(*Config) error {
	_, _, e := unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0)
	switch e {
	case 0:
		return nil
	case unix.ENOSYS, unix.EPERM:
		// A kernel without keys has none to leak. EPERM is a seccomp
		// filter above the launcher (Docker's and containerd's default
		// profiles refuse keyctl): the keyring it holds is its
		// container's own, and the sandbox, under that filter too,
		// cannot use keyctl on it either.
		return nil
	}
	return &os.SyscallError{Syscall: "keyctl(KEYCTL_JOIN_SESSION_KEYRING)", Err: e}
}

// switchIDs switches every thread of the process to the sandbox's uid and
// gid (package syscall signals each thread to make the calls itself): the
// init, which goes on running Go code on any of its threads.
func switchIDs(c *Config) error {
	if err := syscall.Setgroups([]int{c.GID}); err != nil {
		return &os.SyscallError{Syscall: "setgroups", Err: err}
	}
	if err := syscall.Setresgid(c.GID, c.GID, c.GID); err != nil {
		return &os.SyscallError{Syscall: "setresgid", Err: err}
	}
	if err := syscall.Setresuid(c.UID, c.UID, c.UID); err != nil {
		return &os.SyscallError{Syscall: "setresuid", Err: err}
	}
	return nil
}

// switchThreadIDs switches only the calling thread, the command stage's
// locked one, which execs the command: an exec keeps that thread's
// credentials and ends the others, which run nothing but the runtime until
// then, as the thread's own capabilities, no_new_privs and Landlock domain
// already are (verify reads this thread's status). Signalling every thread
// (switchIDs) cost ~1.3 ms of each launch on two CPUs: three rounds of
// signals, each waited for by yielding until every thread has run its
// handler, while the init and the launcher want the same CPUs.
func switchThreadIDs(c *Config) error {
	if err := unix.Setgroups([]int{c.GID}); err != nil { // per thread in x/sys
		return &os.SyscallError{Syscall: "setgroups", Err: err}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(c.GID), uintptr(c.GID), uintptr(c.GID)); e != 0 {
		return &os.SyscallError{Syscall: "setresgid", Err: e}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(c.UID), uintptr(c.UID), uintptr(c.UID)); e != 0 {
		return &os.SyscallError{Syscall: "setresuid", Err: e}
	}
	return nil
}

func setCaps(c *Config) error {
	keep, _ := keptCaps(c.KeepCaps)
	caps, err := capability.NewPid2(0)
	if err != nil {
		return err
	}
	if err := caps.Load(); err != nil {
		return err
	}
	caps.Clear(capability.CAPS | capability.AMBS)
	caps.Set(capability.PERMITTED|capability.EFFECTIVE|capability.INHERITABLE|capability.AMBIENT, keep...)
	if err := caps.Apply(capability.CAPS); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := caps.Apply(capability.AMBS); err != nil {
		return fmt.Errorf("prctl(PR_CAP_AMBIENT): %w", err)
	}
	return unix.Prctl(unix.PR_SET_KEEPCAPS, 0, 0, 0, 0)
}

func noDumps(*Config) error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return &os.SyscallError{Syscall: "prctl(PR_SET_DUMPABLE)", Err: err}
	}
	return unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
}

func setRlimits(c *Config) error {
	for name, v := range c.Rlimits {
		if err := unix.Setrlimit(rlimitNames[name], &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("setrlimit(%s=%d): %w", name, v, err)
		}
	}
	return nil
}

func dieWithParent(c *Config, parent int) error {
	if !c.DieWithParent {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return &os.SyscallError{Syscall: "prctl(PR_SET_PDEATHSIG)", Err: err}
	}
	if os.Getppid() != parent {
		return fmt.Errorf("the launcher (pid %d) exited during setup", parent)
	}
	return nil
}

func noNewPrivs(*Config) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return &os.SyscallError{Syscall: "prctl(PR_SET_NO_NEW_PRIVS)", Err: err}
	}
	return nil
}

func seccomp(c *Config) error {
	if !c.Seccomp {
		fmt.Fprintln(os.Stderr, "airlock: seccomp off: no system call filter but the terminal's (TIOCSTI and TIOCLINUX refused)")
	}
	return loadSeccomp(c.Seccomp)
}

// verify reads this thread's status back: the kernel's view, not ours.
func verify(c *Config) error {
	buf := make([]byte, 8192)
	n, err := unix.Pread(statusFD, buf, 0)
	if err != nil {
		return &os.SyscallError{Syscall: "pread(/proc/thread-self/status)", Err: err}
	}
	raw := buf[:n]
	want := map[string]string{
		"Uid":        fmt.Sprintf("%d\t%d\t%d\t%d", c.UID, c.UID, c.UID, c.UID),
		"Gid":        fmt.Sprintf("%d\t%d\t%d\t%d", c.GID, c.GID, c.GID, c.GID),
		"NoNewPrivs": "1",
	}
	keep, _ := keptCaps(c.KeepCaps)
	var mask uint64
	for _, k := range keep {
		mask |= 1 << uint(k)
	}
	caps := fmt.Sprintf("%016x", mask)
	for _, f := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		want[f] = caps
	}
	want["Seccomp"] = "2" // the terminal's filter at least
	got := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("/proc/thread-self/status %s = %q, want %q", k, got[k], v)
		}
	}
	return nil
}

func closeFDs(*Config) error {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return &os.SyscallError{Syscall: "close_range(CLOEXEC)", Err: err}
	}
	return nil
}

// lookPath resolves the command with the sandbox's own PATH. Only its
// absolute entries count: an empty or relative one would find the command
// in whatever directory the sandbox is in (Go's exec.LookPath refuses
// such a result too).
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, dir := range strings.Split(p, ":") {
				if !filepath.IsAbs(dir) {
					continue
				}
				cand := dir + "/" + name
				if st, err := os.Stat(cand); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
					return cand, nil
				}
			}
		}
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}
