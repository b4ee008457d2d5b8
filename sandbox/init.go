package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/eintr"
	"golang.org/x/sys/unix"
)

// runInit is PID 1 of the sandbox's PID namespace: it prepares what the
// whole sandbox shares (mounts, network namespace), starts the
// command stage, gives up its own privileges and then only reaps, forwards
// signals and exits with the command's status. When it exits, or dies
// with the launcher, the kernel kills every process left in the namespace:
// nothing the command started outlives the sandbox.
func runInit() {
	// The command stage is started from this thread, which holds the
	// init's mounts as set up here.
	runtime.LockOSThread()
	c, fail := readConfig()
	steps := []struct {
		name string
		run  func(*Config) error
	}{
		// The launcher may have died between the clone and the
		// parent-death signal taking effect, which the kernel would
		// then never send.
		{"check the launcher", launcherAlive},
		// A new mount namespace starts with the host's mounts, shared:
		// without making them private, the /proc mounted next would
		// appear on the host too.
		{"make mounts private", privateMounts},
		// Landlock follows links, and the steps below resolve them: one
		// on the way to a path given, in a directory the sandbox's uid
		// may write, may be a sandbox's own (its last run's, another's
		// of the same uid), pointed at whatever it wants given. Here, in
		// the init, as every look at the paths: a hung mount among them
		// holds only what the launch's stop can kill. Landlock's own
		// open checks again (openGiven), race-free, but sees the
		// sandbox's mounts, where the links on the way below /tmp are
		// made again as root's: a sandbox's link there is seen only here.
		{"refuse links the sandbox could have made", resolveGiven},
		// A /proc of the sandbox's own PID namespace: the sandbox sees
		// only its own processes, not the host's or their command lines.
		{"mount /proc", mountProc},
		// The launcher entered the sandbox's network namespace on the
		// thread it made the init from, so the init and each of its
		// threads were born in it: a thread left in the host's, as
		// one that joins with setns(2) leaves the others, would show the
		// host's interfaces, routes and sockets to the sandbox through
		// /proc/1/task/N/net.
		{"check network namespace", checkNetNS},
		// POSIX shared memory is files in /dev/shm, a tmpfs the IPC
		// namespace does not cover: the host's, and other sandboxes',
		// would be readable there.
		{"hide the host's shared memory", privateSharedMemory},
		// The host's /dev holds other terminals than the pty the sandbox
		// is given (virtual consoles, a container's console) and every
		// other device, which the default read-only /dev would let a
		// sandbox whose uid owns one open (--user as the user logged in
		// on a console reads what is typed there). A /dev of the
		// devices a program uses (devDevices), the ones the sandbox is
		// given by name (--ro, --rw), its own ptys and shared memory.
		{"give the sandbox only its devices", privateDev},
		// The host's processes, cgroups and socket directories mounted
		// elsewhere too (a chroot's /proc and /run) would show under a
		// path the sandbox is given, past what the steps around this
		// one hide.
		{"hide the host's views mounted elsewhere", hideHostViews},
		// The host's /tmp and /var/tmp hold other users' and programs'
		// sockets (tmpDirs), reachable by path whatever Landlock says.
		// After the views are hidden, which finds them by where the
		// host has them.
		{"give the sandbox its own /tmp", privateTmp},
		// Likewise the directories where the sandbox's uid may own
		// sockets (its account's home, run as a person's uid).
		{"hide the directories of the uid's sockets", hideDirs},
		// Every name is answered by the proxy, whatever server is asked
		// (the redirect catches port 53), or by nothing at all (--net
		// none); the sandbox's resolver asks its own loopback, so no query
		// is even addressed outside it, and no host resolver is reachable
		// by a Unix socket: asked to resolve, a host daemon would carry
		// the name out of a sandbox that has no network.
		{"keep DNS and the host's sockets out of the sandbox", hideHostServices},
		// What the sandbox is given to write, its own mount (writable.go),
		// so that the rest can be made read-only around it.
		{"bind the paths given to write onto themselves", bindWritable},
		// A device node outside /dev (a chroot's /dev/pts or /dev/console,
		// a container's /dev bound elsewhere) would open a terminal or
		// device its own /dev leaves out; and on a writable mount a file
		// the sandbox's uid owns, given to read or not given, has its mode
		// (a setuid bit), owner, times and attributes changed past
		// Landlock. Last, once every mount is made.
		{"allow devices only in /dev, writes only where given", noDevices},
	}
	for _, s := range steps {
		if err := s.run(c); err != nil {
			fail(s.name, err)
		}
	}
	// One *os.File for the status pipe, closed by its own Close: a second
	// wrapper's finalizer would close the number again, later, whatever
	// it is then.
	status := os.NewFile(fdStatus, "status")
	child, err := startCommandStage(c, status)
	if err != nil {
		fail("start the command stage", err)
	}
	// The command stage reports its own failures on the status pipe, and
	// the pipe must close when its exec succeeds: this copy goes now.
	status.Close()
	// From here the init is one of the sandbox's processes: no root, no
	// capabilities, the same filter. A failure now cannot be reported as
	// a step (the command may be running): it stops the sandbox.
	if err := dropInitPrivileges(c); err != nil {
		fmt.Fprintf(os.Stderr, "airlock: sandbox init: %v\n", err)
		syscall.Kill(child, syscall.SIGKILL)
		os.Exit(125)
	}
	go relaySignals(child)
	os.Exit(reap(child))
}

// readConfig reads the sandbox's Config from the launcher and returns a
// fail that reports a step's error on the status pipe and exits 125.
func readConfig() (*Config, func(step string, err error)) {
	fail := func(step string, err error) {
		b, _ := json.Marshal(stepError{Step: step, Error: err.Error()})
		unix.Write(fdStatus, b)
		os.Exit(125)
	}
	var c Config
	// Closed by its Close, not by number: its finalizer would close the
	// number again once another file (the status pipe) has it.
	cf := os.NewFile(fdConfig, "config")
	err := json.NewDecoder(cf).Decode(&c)
	cf.Close()
	if err != nil {
		fail("read config", err)
	}
	return &c, fail
}

// launcherAlive checks the launcher still holds its end of the life pipe:
// a hang-up means it has exited (a signal it wrote is only readable data).
// Only a sandbox that dies with its launcher cares.
func launcherAlive(c *Config) error {
	if !c.DieWithParent {
		return nil
	}
	fds := []unix.PollFd{{Fd: fdLife, Events: unix.POLLIN}}
	if _, err := eintr.Retry(func() (int, error) { return unix.Poll(fds, 0) }); err != nil {
		return &os.SyscallError{Syscall: "poll(life pipe)", Err: err}
	}
	if fds[0].Revents&unix.POLLHUP != 0 {
		return fmt.Errorf("the launcher exited during setup")
	}
	return nil
}

// relaySignals passes each signal the launcher writes on the life pipe (one
// byte, its number) to the command. It ends when the launcher is gone.
func relaySignals(child int) {
	life := os.NewFile(fdLife, "life")
	var b [1]byte
	for {
		if n, err := life.Read(b[:]); n == 0 || err != nil {
			return
		}
		syscall.Kill(child, syscall.Signal(b[0]))
	}
}

func privateMounts(*Config) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return &os.SyscallError{Syscall: "mount(/, MS_REC|MS_PRIVATE)", Err: err}
	}
	return nil
}

func mountProc(*Config) error {
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return &os.SyscallError{Syscall: "mount(proc, /proc)", Err: err}
	}
	return nil
}

// checkNetNS checks every thread of the init is in the network namespace
// the launcher passed (fdNetNS), reading the sandbox's /proc.
func checkNetNS(c *Config) error {
	if c.Net == NetHost {
		return nil
	}
	var want unix.Stat_t
	err := unix.Fstat(fdNetNS, &want)
	unix.Close(fdNetNS)
	if err != nil {
		return &os.SyscallError{Syscall: "fstat(netns)", Err: err}
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, task := range tasks {
		var got unix.Stat_t
		path := "/proc/self/task/" + task.Name() + "/ns/net"
		if err := unix.Stat(path, &got); err != nil {
			return &os.PathError{Op: "stat", Path: path, Err: err}
		}
		if got.Dev != want.Dev || got.Ino != want.Ino {
			return fmt.Errorf("thread %s of the init is in network namespace %d, not the sandbox's %d", task.Name(), got.Ino, want.Ino)
		}
	}
	return nil
}

// resolvConf is the sandbox's /etc/resolv.conf: on the proxy network, and
// with no network.
var resolvConf = map[Net]string{
	NetProxy: "# airlock: the proxy answers every name with a synthetic address and decides the connection\nnameserver 127.0.0.1\n",
	NetNone:  "# airlock: no network: nothing answers names\nnameserver 127.0.0.1\n",
}

// hostSocketDirs are where the host's daemons listen on Unix sockets,
// hidden in the sandbox under empty read-only tmpfs mounts: /run holds
// nearly all of them (nscd's, systemd-resolved's, avahi's and D-Bus's,
// which would resolve names for the sandbox past the proxy's answerer, and
// a database's, snapd's, the journal's), /var/lib/sss/pipes sssd's (user
// and host lookups to a directory server), /tmp/.X11-unix a display's.
// Landlock does not mediate connect() to a socket by path: through one, a
// host daemon that talks to the network would be a way out past the proxy.
var hostSocketDirs = []string{"/run", "/var/run", "/var/lib/sss/pipes", "/tmp/.X11-unix"}

// hostSocketFiles are sockets outside those directories: syslog's, which
// may forward what it is sent to another host. An empty file takes each
// one's place.
var hostSocketFiles = []string{"/dev/log"}

// resolverSockets are the host resolvers' directories: hidden with /run,
// and never passed through (a path the sandbox names under one stays out
// of reach, and the sandbox does not start).
var resolverSockets = []string{"/run/nscd", "/run/systemd/resolve", "/run/avahi-daemon", "/run/dbus"}

// hideHostServices makes the proxy the sandbox's only resolver (none at all
// with no network), in its private mount namespace: resolv.conf names its
// own loopback (where the redirect's answerer is; the redirect catches port
// 53 of any address anyway), nsswitch.conf's hosts line is "files dns" (no
// module that asks a host daemon), and the host's socket directories are
// hidden (hostSocketDirs), but for the paths the sandbox names under them
// (Config.RO, RW, Exec), which are mounted back. On the host network the
// host's resolvers and daemons are the sandbox's.
func hideHostServices(c *Config) error {
	if c.Net == NetHost {
		return nil
	}
	// resolv.conf is often a link into a resolver's directory
	// (systemd-resolved's stub-resolv.conf), which is hidden below: the
	// sandbox's goes where the link leads.
	conf, err := filepath.EvalSymlinks("/etc/resolv.conf")
	if errors.Is(err, os.ErrNotExist) {
		conf = ""
	} else if err != nil {
		return err
	}
	if raw, err := os.ReadFile("/etc/nsswitch.conf"); err == nil {
		if err := bindFile("/etc/nsswitch.conf", filesDNSHosts(string(raw))); err != nil {
			return err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// The paths the sandbox names, resolved once, but resolv.conf's: the
	// sandbox has its own there, readable (c.RO below).
	named := slices.DeleteFunc(namedPaths(c, slices.Concat(c.RO, c.RW, c.Exec)), func(n namedPath) bool {
		return conf != "" && n.real == conf
	})
	hostConf := conf // conf is cleared once the sandbox's own is placed
	dirs, err := existingDirs(hostSocketDirs)
	if err != nil {
		return err
	}
	for _, real := range dirs {
		var files map[string]string
		if rel, err := filepath.Rel(real, conf); conf != "" && err == nil && filepath.IsLocal(rel) {
			// Readable where it is, as /etc's own would be: Landlock
			// checks the file the link leads to.
			files, c.RO, conf = map[string]string{rel: resolvConf[c.Net]}, append(c.RO, conf), ""
		}
		keep, links, err := under(real, named, hostConf)
		if err != nil {
			return err
		}
		if err := hideDir(real, files, keep, links); err != nil {
			return err
		}
	}
	for _, f := range hostSocketFiles {
		if st, err := os.Lstat(f); err == nil && st.Mode()&os.ModeSocket != 0 {
			if err := bindFile(f, ""); err != nil {
				return err
			}
		}
	}
	if conf == "" {
		return nil
	}
	return bindFile(conf, resolvConf[c.Net])
}

// namedPath is a path the sandbox names, and where it leads ("" when it
// does not: missing, or refused, when root may not open it, below a FUSE
// mount without allow_other).
type namedPath struct {
	path, real string
	refused    bool
}

// namedPaths is paths ("" left out) with where each leads: where
// resolveGiven found it for a path the sandbox names, else (the devices of
// its /dev, the host's resolv.conf: root's) resolved now.
func namedPaths(c *Config, paths []string) []namedPath {
	var out []namedPath
	for _, p := range paths {
		if p == "" {
			continue
		}
		if n, ok := c.found[filepath.Clean(p)]; ok {
			out = append(out, n)
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if errors.Is(err, unix.EACCES) {
			// The root of a mount that refuses root (FUSE without
			// allow_other): no link, or its lstat would not have been
			// refused; where it is, is where its directory is.
			if dir, derr := filepath.EvalSymlinks(filepath.Dir(p)); derr == nil {
				real, err = filepath.Join(dir, filepath.Base(p)), nil
			}
		}
		if err != nil {
			real = "" // missing: Landlock's open names it
		}
		out = append(out, namedPath{filepath.Clean(p), real, errors.Is(err, unix.EACCES)})
	}
	return out
}

// within says whether p is parent or below it.
func within(p, parent string) bool {
	rel, err := filepath.Rel(parent, p)
	return err == nil && filepath.IsLocal(rel)
}

// below says whether p lies under dir, not dir itself.
func below(p, dir string) bool { return p != dir && within(p, dir) }

// under is those of paths below dir, as dir sees them (their links
// resolved), to mount back, and the links on the way to them below dir
// (name → target), to make again. One that is, holds or lies in a host
// resolver's directory is refused: mounted back, it would show the
// resolver's socket; so is one that holds conf, the host's resolv.conf,
// which the sandbox has its own of.
func under(dir string, paths []namedPath, conf string) (keep []string, links map[string]string, err error) {
	links = map[string]string{}
	for _, n := range paths {
		// A link named below dir (/run/app → app-1.2), or on the way to
		// what is named, is made again on the tmpfs: hidden, the path
		// would not resolve. Each where it really is (the directories
		// above it resolved): /run/a/b through the link /run/a → c is
		// the link /run/c/b.
		for q := n.path; below(q, dir); q = filepath.Dir(q) {
			target, err := os.Readlink(q)
			if err != nil {
				continue
			}
			parent, err := filepath.EvalSymlinks(filepath.Dir(q))
			if loc := filepath.Join(parent, filepath.Base(q)); err == nil && below(loc, dir) {
				links[loc] = target
			}
		}
		real := n.real
		if real == "" || !within(real, dir) {
			continue // missing, or elsewhere
		}
		for _, r := range resolverSockets {
			if within(real, r) || within(r, real) {
				return nil, nil, fmt.Errorf("path %s: it would show the host resolver's sockets in %s to the sandbox", n.path, r)
			}
		}
		if real == dir {
			return nil, nil, fmt.Errorf("path %s: the host's sockets in %s are hidden from the sandbox; name the paths in it the sandbox needs", n.path, dir)
		}
		if conf != "" && within(conf, real) {
			return nil, nil, fmt.Errorf("path %s: it holds the host's resolv.conf (%s), which the sandbox has its own of; name the files in it the sandbox needs", n.path, conf)
		}
		keep = append(keep, real)
	}
	return keep, links, nil
}

// tmpDirs are the host's shared scratch directories, where any user's
// programs listen on Unix sockets (tmux's server, ssh-agent, an editor's):
// one the sandbox's uid may write would run its commands outside the
// sandbox, and Landlock does not mediate connect(2) to a socket by path.
var tmpDirs = []string{"/tmp", "/var/tmp"}

// privateTmp gives the sandbox /tmp and /var/tmp of its own, on any
// network: each an empty tmpfs, writable by whom Landlock lets write it
// (--rw /tmp), holding the host's paths the sandbox names below it
// (Config.RO, RW, Exec) and its working directory, each mounted back. What
// it writes there itself goes with it.
func privateTmp(c *Config) error {
	named := namedPaths(c, slices.Concat(c.RO, c.RW, c.Exec, []string{c.Dir}))
	dirs, err := existingDirs(tmpDirs)
	if err != nil {
		return err
	}
	for _, real := range dirs {
		if err := coverKeeping(real, true, named); err != nil {
			return err
		}
	}
	return nil
}

// coverKeeping covers real (coverDir) with the named paths below it
// mounted back; real itself, named, is the sandbox's own: covered.
func coverKeeping(real string, writable bool, named []namedPath) error {
	below := slices.DeleteFunc(slices.Clone(named), func(n namedPath) bool { return n.real == real })
	keep, links, err := under(real, below, "")
	if err != nil {
		return err
	}
	return coverDir(real, writable, nil, keep, links)
}

// hideDirs covers each of Config.Hidden with an empty read-only tmpfs
// holding the paths the sandbox names below it and its working directory,
// mounted back; one given itself (RO, RW, Exec), or below a path given, is
// given whole and left alone. Started in it, the sandbox starts in the
// covered directory.
func hideDirs(c *Config) error {
	given := namedPaths(c, slices.Concat(c.RO, c.RW, c.Exec))
	named := slices.Concat(given, namedPaths(c, []string{c.Dir}))
	for _, d := range c.Hidden {
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			// Missing, nothing there to reach; refused to root (a
			// root-squashed NFS home), nothing root could mount back.
			continue
		}
		if real == "/" {
			// Covered, the root would be out of every lookup's reach,
			// and its remount read-only the host's.
			return fmt.Errorf("hidden directory %s is /", d)
		}
		if slices.ContainsFunc(given, func(n namedPath) bool { return n.real != "" && within(real, n.real) }) {
			continue
		}
		// What root may not open below it (a FUSE mount without
		// allow_other there) could not be mounted back: the directory is
		// left as it is rather than the launch refused. Only that: a path
		// missing when it was looked at (or gone since) is missing in the
		// sandbox too, its directory covered; left as it is, a sandbox of
		// the same uid removing it at the right moment, and making it
		// again, would show this one the uid's whole home, its agents'
		// and editors' sockets.
		if slices.ContainsFunc(named, func(n namedPath) bool { return n.refused && within(n.path, real) }) {
			continue
		}
		if err := coverKeeping(real, false, named); err != nil && !(errors.Is(err, errUnkept) && errors.Is(err, unix.EACCES)) {
			return err
		}
	}
	return nil
}

// privateSharedMemory mounts an empty tmpfs of the sandbox's own on
// /dev/shm: writable (as the host's is, sticky) when the sandbox is given
// /dev/shm to write, read-only otherwise.
func privateSharedMemory(c *Config) error {
	const dir = "/dev/shm"
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil // none to hide
	}
	writable := slices.ContainsFunc(c.RW, func(p string) bool { return within(dir, filepath.Clean(p)) })
	if !writable {
		return hideDir(dir, nil, nil, nil)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return &os.SyscallError{Syscall: "mount(tmpfs, " + dir + ")", Err: err}
	}
	return nil
}

// devDevices are the host's devices every sandbox has: the data sources
// and sinks, its controlling terminal, its own ptys (ownPTYs) and shared
// memory (privateSharedMemory).
var devDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
	"/dev/ptmx", "/dev/pts", "/dev/shm", mqueueDir}

// devLinks are /dev's links to the process's own descriptors.
var devLinks = map[string]string{"/dev/fd": "/proc/self/fd", "/dev/stdin": "/proc/self/fd/0",
	"/dev/stdout": "/proc/self/fd/1", "/dev/stderr": "/proc/self/fd/2"}

// privateDev replaces /dev with a read-only tmpfs holding only devDevices,
// devLinks and the paths below /dev the config names.
func privateDev(c *Config) error {
	const dir = "/dev"
	// A link among them (/dev/ptmx → pts/ptmx in some containers) is
	// made again, and what it leads to kept, as below /tmp.
	named := slices.DeleteFunc(namedPaths(c, slices.Concat(devDevices, c.RO, c.RW, c.Exec)), func(n namedPath) bool {
		return n.path == dir
	})
	keep, links, err := under(dir, named, "")
	if err != nil {
		return err
	}
	maps.Copy(links, devLinks)
	if err := hideDir(dir, nil, keep, links); err != nil {
		return err
	}
	// An mqueue mount shows the queues of the IPC namespace it was made
	// in: the host's, bound back above. The sandbox's own goes on top.
	if slices.Contains(keep, mqueueDir) {
		if err := unix.Mount("mqueue", mqueueDir, "mqueue", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return &os.SyscallError{Syscall: "mount(mqueue, " + mqueueDir + ")", Err: err}
		}
	}
	return nil
}

const mqueueDir = "/dev/mqueue"

// hideDir mounts an empty read-only tmpfs on dir, holding only files
// (names relative to dir, and their content), links (name → target, made
// again) and the host's paths keep (below dir), each mounted back where it
// was, last: nothing is written through them.
func hideDir(dir string, files map[string]string, keep []string, links map[string]string) error {
	return coverDir(dir, false, files, keep, links)
}

// errUnkept is coverDir's failure to open a path to mount back, before
// anything is mounted.
var errUnkept = errors.New("a path to mount back could not be opened")

// coverDir is hideDir, but for writable: then the tmpfs is left writable
// and sticky (mode 1777, as /tmp is), for Landlock to say who writes it;
// what is written there counts against the writer's memory cgroup.
func coverDir(dir string, writable bool, files map[string]string, keep []string, links map[string]string) error {
	// A path inside another kept one is shown by its (recursive) bind
	// already: mounted again, its mount point would be made in the host's
	// directory.
	// A path named twice (a device in devDevices and Config.RW) is
	// mounted back once: twice, the second would stack on the first.
	keep = outermost(keep)
	// A path kept was resolved: a link now on or above it, or above a
	// file to write, was made since (a directory swapped for a link and
	// back). Made again on the tmpfs, it would lead the mount point's
	// mkdir, and the bind, to wherever it points on the host.
	made := slices.Clone(keep)
	for name := range files {
		made = append(made, filepath.Join(dir, name))
	}
	swapped := func(p, link string) error {
		return fmt.Errorf("path %s: %s on its way is a link now, made while the sandbox was set up", p, link)
	}
	for name := range links {
		if i := slices.IndexFunc(made, func(p string) bool { return within(p, name) }); i >= 0 {
			return swapped(made[i], name)
		}
		// Or another link below it: read as a directory, then as a link.
		for other := range links {
			if below(other, name) {
				return swapped(other, name)
			}
		}
	}
	// Opened before the tmpfs covers them.
	kept := make([]*os.File, 0, len(keep))
	defer func() {
		for _, f := range kept {
			f.Close()
		}
	}()
	for _, p := range keep {
		f, err := openResolved(p)
		if err != nil {
			return err
		}
		kept = append(kept, f)
	}
	flags, data, ro := uintptr(unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC), "size=1m,mode=0555", uintptr(0)
	if writable {
		// Executable or not as the host's is (a noexec /tmp stays so);
		// where it is, Landlock's --exec says what runs.
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return &os.PathError{Op: "statfs", Path: dir, Err: err}
		}
		flags, data = unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"
		if st.Flags&unix.ST_NOEXEC != 0 {
			flags |= unix.MS_NOEXEC
		}
	} else if len(files) == 0 && len(keep) == 0 && len(links) == 0 {
		ro = unix.MS_RDONLY // nothing to write first: read-only from the start
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags|ro, data); err != nil {
		return &os.SyscallError{Syscall: "mount(tmpfs, " + dir + ")", Err: err}
	}
	if ro != 0 {
		return nil
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o555); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o444); err != nil {
			return err
		}
	}
	// None is on the way to another (refused above): any order.
	for name, target := range links {
		if err := os.MkdirAll(filepath.Dir(name), 0o555); err != nil {
			return err
		}
		if err := os.Symlink(target, name); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	for i, p := range keep {
		if err := mountBack(kept[i], p); err != nil {
			return err
		}
	}
	if writable {
		return nil
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY|flags, ""); err != nil {
		return &os.SyscallError{Syscall: "mount(" + dir + ", MS_REMOUNT|MS_RDONLY)", Err: err}
	}
	return nil
}

// openResolved opens p, a path whose links were resolved, to mount back,
// following none: a component made a link since, by a user who owns the
// directory above it, would lead the bind anywhere, past the checks made
// on the resolved path (under: the whole host /tmp, a resolver's
// sockets). Then the launch is refused. One that cannot be opened
// otherwise is errUnkept.
func openResolved(p string) (*os.File, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("path %s: a link on its way appeared while the sandbox was set up", p)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUnkept, &os.PathError{Op: "open", Path: p, Err: err})
	}
	return os.NewFile(uintptr(fd), p), nil
}

// mountBack mounts the host's path p, open as f, at p again on the tmpfs
// that hides it: a directory or a file made there to mount it on.
func mountBack(f *os.File, p string) error {
	dir, err := isDir(int(f.Fd()))
	if err != nil {
		return &os.PathError{Op: "stat", Path: p, Err: err}
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o555); err != nil {
		return err
	}
	if dir {
		err = os.Mkdir(p, 0o555)
	} else {
		// Made, and never opened to write if it is there: a path kept
		// before this one may show the host's own file here.
		var fd int
		if fd, err = unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_RDONLY|unix.O_CLOEXEC, 0o444); err == nil {
			unix.Close(fd)
		}
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return &os.PathError{Op: "make a mount point", Path: p, Err: err}
	}
	src := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	if err := unix.Mount(src, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return &os.SyscallError{Syscall: "mount(" + p + ", MS_BIND)", Err: err}
	}
	return nil
}

// filesDNSHosts is nsswitch.conf with its hosts line "hosts: files dns".
func filesDNSHosts(conf string) string {
	// No comment on the line: glibc would read its words as sources.
	const hosts = "hosts: files dns"
	lines := strings.Split(conf, "\n")
	found := false
	for i, l := range lines {
		if f := strings.Fields(l); len(f) > 0 && strings.TrimSuffix(f[0], ":") == "hosts" {
			lines[i], found = hosts, true
		}
	}
	if !found {
		lines = append(lines, hosts+"\n")
	}
	return strings.Join(lines, "\n")
}

// bindFile bind-mounts a file holding content over target, read-only, in
// the sandbox's private mount namespace. The file is made and unlinked
// here: the mount keeps it, and nothing is left behind on the host. A
// target that does not exist is left so.
func bindFile(target, content string) error {
	if _, err := os.Stat(target); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	f, err := os.CreateTemp("", "airlock-etc-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(content)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := unix.Mount(f.Name(), target, "", unix.MS_BIND, ""); err != nil {
		return &os.SyscallError{Syscall: "mount(" + f.Name() + ", " + target + ", MS_BIND)", Err: err}
	}
	// Read-only, as the host's is to the sandbox: a bind mount takes its
	// flags only on a remount.
	if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return &os.SyscallError{Syscall: "mount(" + target + ", MS_REMOUNT|MS_RDONLY)", Err: err}
	}
	return nil
}

// startCommandStage re-executes this binary as the command stage, which
// runs the per-process restrictions and execs the command. It is started
// from this locked thread (in the sandbox's network namespace) and given
// the config on a fresh pipe, the status pipe (status) and the standard
// streams: nothing else.
func startCommandStage(c *Config, status *os.File) (int, error) {
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer cfgR.Close()
	attr := &os.ProcAttr{
		Env:   stageEnv(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, cfgR, status},
	}
	args := []string{"airlock", Stage2Arg, modeCommand}
	var p *os.Process
	if dir, fd := openV2Leaf(c.Cgroups); fd >= 0 {
		// Born in its v2 leaf (clone3's CLONE_INTO_CGROUP): moving a
		// running process in costs the kernel an RCU grace period
		// (cgroup_threadgroup_rwsem taken for writing), ~8 ms of
		// each launch; a fork into the group only reads it.
		attr.Sys = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		p, err = os.StartProcess("/proc/self/exe", args, attr)
		unix.Close(fd)
		if err == nil {
			c.Cgroups = slices.DeleteFunc(c.Cgroups, func(d string) bool { return d == dir })
		}
		// A kernel before 5.7 (no clone3) refuses: the command stage
		// then joins by writing cgroup.procs (joinCgroup).
		attr.Sys = nil
	}
	if p == nil {
		p, err = os.StartProcess("/proc/self/exe", args, attr)
	}
	if err != nil {
		cfgW.Close()
		return 0, err
	}
	// Ignored only now, the command stage started: it would inherit
	// SIG_IGN, and so would the command. And before its config is
	// sent: it runs nothing of the sandbox's until then.
	ignoreSignals()
	err = json.NewEncoder(cfgW).Encode(c)
	cfgW.Close()
	if err != nil {
		syscall.Kill(p.Pid, syscall.SIGKILL)
		return 0, fmt.Errorf("send the config to the command stage: %w", err)
	}
	return p.Pid, nil
}

// ignoreSignals makes the init take no orders from signals. What reaches
// it directly came to the command too (a terminal's ^C goes to the whole
// foreground group), or came from inside the sandbox, which must not be
// able to make the init crash or dump (SIGABRT, SIGSEGV) where Landlock
// cannot scope signals. The launcher's signals for the command arrive on
// the life pipe instead, so each reaches the command once. Ignored, not
// caught (signal.Notify): catching all of them costs ~2 ms of round trips
// with the runtime's signal thread, each sandbox start; a synchronous
// signal (SIGSEGV) sent by kill(2) is dropped by the runtime's handler
// once ignored. SIGCHLD stays: ignoring it would reap the command behind
// the init's back; SIGURG is the runtime's preemption.
func ignoreSignals() {
	var sigs []os.Signal
	for s := syscall.Signal(1); s <= 64; s++ {
		switch s {
		case syscall.SIGCHLD, syscall.SIGURG, syscall.SIGKILL, syscall.SIGSTOP:
			continue
		}
		sigs = append(sigs, s)
	}
	signal.Ignore(sigs...)
}

// openV2Leaf opens the first of dirs that is a cgroup v2 directory, for
// CLONE_INTO_CGROUP; fd is -1 when there is none.
func openV2Leaf(dirs []string) (dir string, fd int) {
	for _, d := range dirs {
		fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var st unix.Statfs_t
		if unix.Fstatfs(fd, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return d, fd
		}
		unix.Close(fd)
	}
	return "", -1
}

// dropInitPrivileges makes the init as unprivileged as the command: the
// sandbox's uid and gid (which clears every capability), the parent-death
// signal again (a uid change resets it), no_new_privs and the seccomp
// filter. It never execs, so Landlock and the bounding set add nothing.
func dropInitPrivileges(c *Config) error {
	if err := switchIDs(c); err != nil {
		return err
	}
	// Not dumpable whatever the host's fs.suid_dumpable: the sandbox's
	// processes run as its uid too, and a dumpable init would be theirs to
	// read (/proc/1/mem, its environment) and take descriptors from,
	// where Landlock does not keep them off (--landlock off).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return &os.SyscallError{Syscall: "prctl(PR_SET_DUMPABLE)", Err: err}
	}
	if c.DieWithParent {
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
			return &os.SyscallError{Syscall: "prctl(PR_SET_PDEATHSIG)", Err: err}
		}
		if err := launcherAlive(c); err != nil {
			return err
		}
	}
	if err := noNewPrivs(c); err != nil {
		return err
	}
	if !c.Seccomp {
		return nil
	}
	return loadSeccomp(true)
}

// reap waits for every child the namespace hands the init, and returns the
// command's status once the command exits: its exit code, or 128+N for
// signal N.
func reap(child int) int {
	for {
		var ws syscall.WaitStatus
		pid, err := eintr.Retry(func() (int, error) { return syscall.Wait4(-1, &ws, 0, nil) })
		if err != nil {
			fmt.Fprintf(os.Stderr, "airlock: sandbox init: wait: %v\n", err)
			return 125
		}
		if pid != child {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}
