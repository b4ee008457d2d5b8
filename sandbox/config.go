package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"
)

// Net is how the sandbox reaches the network.
type Net string

const (
	// NetNone: a new network namespace with only a loopback, and nothing
	// listening on it.
	NetNone Net = "none"
	// NetProxy: a new network namespace whose only way out is the proxy:
	// its explicit listener on the loopback, and the redirect of every
	// other TCP connection and of DNS to it (NewNetwork, InstallEgress).
	NetProxy Net = "proxy"
	// NetHost: the host's network (no isolation; for trusted tools only).
	NetHost Net = "host"
)

// LandlockMode says what to do when the kernel cannot enforce the Landlock
// rules asked for.
type LandlockMode string

const (
	LandlockHard       LandlockMode = "hard"        // refuse to start
	LandlockBestEffort LandlockMode = "best-effort" // enforce what the kernel can, say what was skipped
	LandlockOff        LandlockMode = "off"
)

// Config is one sandbox. The CLI flags of `airlock launch` map onto it one
// to one; the supervisor and orchestrator fill it directly.
type Config struct {
	Command []string `json:"command"`
	Dir     string   `json:"dir,omitempty"`

	// CommandSHA256 pins Command[0]'s content (64 lower-case hex digits;
	// Command[0] must then be absolute): the command stage hashes the
	// file it execs and refuses another (execpin.go). "" is unpinned.
	CommandSHA256 string `json:"command_sha256,omitempty"`

	UID      int      `json:"uid"`
	GID      int      `json:"gid"`
	KeepCaps []string `json:"keep_caps,omitempty"` // e.g. CAP_NET_BIND_SERVICE

	Net       Net `json:"net"`
	ProxyPort int `json:"proxy_port,omitempty"`
	// ConnectPorts are further TCP ports the sandbox may connect to,
	// besides ProxyPort: its pod's other services on the namespace's
	// loopback. With --net none Landlock network rules enforce them, per
	// port; with --net proxy the namespace's nft table does (they are
	// NetworkConfig.LocalPorts), and Landlock leaves connect alone.
	ConnectPorts []int `json:"connect_ports,omitempty"`
	// SharedNetwork says the network namespace is shared with other
	// sandboxes (a pod's): Landlock then handles TCP bind too, and the
	// sandbox binds only BindPorts (the ports a service declares) and port
	// 0 (one the kernel picks), never another's port, which it could take
	// while that service restarts and answer in its place.
	SharedNetwork bool  `json:"shared_network,omitempty"`
	BindPorts     []int `json:"bind_ports,omitempty"`

	// Landlock paths: read-only, read-write, read-and-execute.
	RO       []string     `json:"ro,omitempty"`
	RW       []string     `json:"rw,omitempty"`
	Exec     []string     `json:"exec,omitempty"`
	Landlock LandlockMode `json:"landlock"`
	// Hidden are directories where the sandbox's uid may own Unix
	// sockets, which Landlock does not keep it from connecting to: each
	// is covered, read-only and empty but for the paths named below it
	// (RO, RW, Exec) and Dir, mounted back, unless RO, RW or Exec names
	// it or a directory above it (hideDirs). Start adds the home of the
	// host account the uid is, when it lies under /home (homeOf).
	Hidden []string `json:"hidden,omitempty"`
	// LandlockABI, when non-zero, pretends the kernel offers this Landlock
	// ABI (tests simulate an old kernel with it; 0 means ask the kernel,
	// -1 pretends Landlock is missing).
	LandlockABI int `json:"landlock_abi,omitempty"`

	Seccomp bool `json:"seccomp"`

	Rlimits map[string]uint64 `json:"rlimits,omitempty"`
	Env     []string          `json:"env"` // the complete environment, KEY=VAL

	// Cgroups are the directories the sandbox joins (see Leaf,
	// joinCgroup).
	Cgroups []string `json:"cgroups,omitempty"`

	DieWithParent bool `json:"die_with_parent"`

	// found is where each path the sandbox names leads, resolved once by
	// the init (resolveGiven). The init's own.
	found map[string]namedPath

	// The command's standard streams; nil is /dev/null. They are the
	// launcher's to give (a terminal, a log pipe), never sent to stage 2.
	Stdin  io.Reader `json:"-"`
	Stdout io.Writer `json:"-"`
	Stderr io.Writer `json:"-"`

	// Terminal gives the sandbox a terminal of its own, a pty relayed to
	// the launcher's controlling terminal, in place of each standard stream
	// that is that terminal: for a launch in a terminal's foreground.
	// However the sandbox runs, it leads a session of its own and holds no
	// descriptor of the user's terminal (terminal, offTerminal): in the
	// launcher's session or with the terminal's descriptor, a process of it
	// that left the terminal's job control (setsid, or tcsetpgrp with
	// SIGTTOU ignored) could read what the user types after ^Z.
	Terminal bool `json:"-"`
}

// Defaults are what `airlock launch` starts from.
func Defaults() Config {
	return Config{
		UID: 998, GID: 998,
		Net:           NetProxy,
		Landlock:      LandlockHard,
		Seccomp:       true,
		DieWithParent: true,
		Exec:          existing("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"),
		RO:            existing("/etc", "/proc", "/dev"),
		// /dev/ptmx and /dev/pts are the sandbox's own (ownPTYs).
		RW: existing("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts"),
	}
}

// dotDot says whether p has a ".." component.
func dotDot(p string) bool { return slices.Contains(strings.Split(p, "/"), "..") }

func existing(paths ...string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// rlimitNames maps --rlimit names to resources.
var rlimitNames = map[string]int{
	"as": unix.RLIMIT_AS, "cpu": unix.RLIMIT_CPU, "data": unix.RLIMIT_DATA,
	"fsize": unix.RLIMIT_FSIZE, "memlock": unix.RLIMIT_MEMLOCK, "nofile": unix.RLIMIT_NOFILE,
	"nproc": unix.RLIMIT_NPROC, "stack": unix.RLIMIT_STACK,
}

// maxID is the largest uid or gid a process can hold; 4294967295 is
// (uid_t)-1.
const maxID = 1<<32 - 2

// Validate runs every check before anything is created, and reports all
// problems at once.
func (c *Config) Validate() error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Command) == 0 {
		fail("no command to run")
	}
	if c.CommandSHA256 != "" {
		if !isSHA256Hex(c.CommandSHA256) {
			fail("command sha256 %q: want 64 lower-case hex digits", c.CommandSHA256)
		}
		if len(c.Command) > 0 && !filepath.IsAbs(c.Command[0]) {
			fail("pinned command %q must be an absolute path", c.Command[0])
		}
	}
	if c.UID == 0 || c.GID == 0 {
		fail("refusing to run the sandbox as uid/gid 0; use --user")
	}
	for _, id := range []struct {
		name string
		v    int
	}{{"uid", c.UID}, {"gid", c.GID}} {
		// (uid_t)-1 is "leave unchanged" to setresuid and chown: a
		// sandbox asked to run as it would keep the launcher's root.
		if id.v < 0 || id.v > maxID {
			fail("%s %d is out of range: want 1 to %d", id.name, id.v, maxID)
		}
	}
	if _, err := keptCaps(c.KeepCaps); err != nil {
		fail("%v", err)
	}
	switch c.Net {
	case NetNone, NetHost:
	case NetProxy:
		if c.ProxyPort < 1 || c.ProxyPort > 65535 {
			fail("--net proxy needs --proxy-port")
		}
	default:
		fail("--net %q: want none, proxy or host", c.Net)
	}
	for _, port := range c.ConnectPorts {
		if port < 1 || port > 65535 {
			fail("connect port %d is out of range: want 1 to 65535", port)
		}
	}
	for _, port := range c.BindPorts {
		if port < 1 || port > 65535 {
			fail("bind port %d is out of range: want 1 to 65535", port)
		}
	}
	if len(c.BindPorts) > 0 && !c.SharedNetwork {
		// Only a shared namespace limits binds: the ports would read
		// as a limit that is not there.
		fail("bind ports %v apply only in a shared network (a pod's)", c.BindPorts)
	}
	if len(c.ConnectPorts) > 0 && c.Net == NetHost {
		// On the host's network neither Landlock's connect rules nor
		// the nft table apply: the ports would read as a limit that is
		// not there.
		fail("connect ports %v need the sandbox's own network (--net proxy or none), not --net host", c.ConnectPorts)
	}
	switch c.Landlock {
	case LandlockHard, LandlockBestEffort, LandlockOff:
	default:
		fail("--landlock %q: want hard, best-effort or off", c.Landlock)
	}
	// No "..": after a link it is the parent of where the link leads, as
	// the kernel reads it (and Landlock's open, and the init's walk), not
	// the link's own directory, where the path's text says it is.
	for _, group := range [][]string{c.RO, c.RW, c.Exec} {
		for _, p := range group {
			if !filepath.IsAbs(p) || dotDot(p) {
				fail("Landlock path %q must be absolute, without ..", p)
			}
		}
	}
	if c.Dir != "" && (!filepath.IsAbs(c.Dir) || dotDot(c.Dir)) {
		fail("working directory %q must be absolute, without ..", c.Dir)
	}
	for _, d := range c.Hidden {
		if !filepath.IsAbs(d) || filepath.Clean(d) == "/" {
			fail("hidden directory %q must be absolute, and not /", d)
		}
	}
	for name := range c.Rlimits {
		switch _, ok := rlimitNames[name]; {
		case name == "core":
			// noDumps set it to 0 for good.
			fail("--rlimit core: the sandbox makes no core dumps (one would hold what its memory held: credentials among it)")
		case !ok:
			fail("--rlimit %s: unknown (want one of as, cpu, data, fsize, memlock, nofile, nproc, stack)", name)
		}
	}
	for _, kv := range c.Env {
		if !strings.Contains(kv, "=") {
			fail("environment entry %q is not KEY=VAL", kv)
		}
	}
	return errors.Join(errs...)
}

// keepable are the capabilities a sandbox may keep: none reaches past its
// own processes and memory. Any other undoes one of its boundaries:
// CAP_NET_ADMIN rewrites the egress table, CAP_SYS_ADMIN mounts and makes
// namespaces, CAP_DAC_READ_SEARCH opens files by handle past Landlock's
// paths, CAP_SETUID becomes another uid, CAP_SYS_RESOURCE lifts the
// rlimits, CAP_SYS_PTRACE reaches into the init, and so on.
var keepable = []capability.Cap{capability.CAP_NET_BIND_SERVICE, capability.CAP_KILL, capability.CAP_IPC_LOCK}

// CheckKeepCap says why name (CAP_NET_BIND_SERVICE, net_bind_service) may
// not be kept, or nil.
func CheckKeepCap(name string) error {
	_, err := keepCap(name)
	return err
}

func keepCap(name string) (capability.Cap, error) {
	k := strings.ToLower(strings.TrimPrefix(strings.ToUpper(name), "CAP_"))
	for _, c := range capability.ListKnown() {
		if c.String() != k {
			continue
		}
		if !slices.Contains(keepable, c) {
			return 0, fmt.Errorf("capability %q would undo the sandbox's boundaries; those a sandbox may keep: %s", name, keepableNames())
		}
		return c, nil
	}
	return 0, fmt.Errorf("unknown capability %q", name)
}

func keepableNames() string {
	names := make([]string, len(keepable))
	for i, c := range keepable {
		names[i] = "CAP_" + strings.ToUpper(c.String())
	}
	return strings.Join(names, ", ")
}

// keptCaps reads --keep-caps.
func keptCaps(names []string) ([]capability.Cap, error) {
	var out []capability.Cap
	for _, n := range names {
		c, err := keepCap(n)
		if err != nil {
			return nil, fmt.Errorf("--keep-caps: %w", err)
		}
		out = append(out, c)
	}
	return out, nil
}
