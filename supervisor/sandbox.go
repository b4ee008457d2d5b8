package supervisor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/trusted"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/airlock-sandbox/airlock/proxy/identity"
	"github.com/airlock-sandbox/airlock/proxy/identity/connhook"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// SandboxOptions are one sandboxed command and what contains it: its
// cgroups, its network, and, for a sandbox of its own, its proxy.
type SandboxOptions struct {
	// ID names the sandbox in decisions, audit lines and its cgroup
	// (airlock-<ID>).
	ID string
	// Config is the command and its restrictions, standard streams
	// included; Cgroups and Env are filled in here.
	Config sandbox.Config
	// Env is the command's environment; ProxyURL and CABundle are set
	// here when the sandbox has a proxy.
	Env sandbox.EnvOptions
	// CgroupParent is the cgroup v2 directory the sandbox's leaf goes
	// under ("" for the root); MemoryMax and PidsMax its limits (0: none).
	CgroupParent       string
	MemoryMax, PidsMax int64
	// ParentReaped says a reaper already covers CgroupParent's whole tree
	// (sandbox.StartTreeReaper, a pod's): the leaf gets no reaper of its
	// own unless a limit needs a group outside the tree (a v1 group on a
	// hybrid host), one process less per launch.
	ParentReaped bool
	// Network, when set, is shared (a pod's): the sandbox joins it and
	// leaves it open. Otherwise one is made for the sandbox alone.
	Network *sandbox.Network
	// DenyPeers keeps the sandbox from the shared network's peer ports
	// (a pod's services') and its local UDP (sandbox.Network.DenyPeers),
	// which its table opens to every process in it:
	// a one-off, decided by a preset of its own, is not one of the
	// services. It needs the sandbox's cgroup v2 leaf, by which the
	// table tells its sockets; without one the launch is refused.
	DenyPeers bool
	// Proxy, when set, serves this sandbox's own proxy in-process on the
	// proxy port of its network (Config.Net must be proxy).
	Proxy *OwnProxy
	// CABundle, for a sandbox behind a proxy it does not own (a pod's),
	// is the bundle its clients trust: the system roots and the proxy's
	// CA (sandbox.WriteCABundle). Its directory is made readable.
	CABundle string
	// ProxyDrain is how long the proxy's tunnels may finish once the
	// command has exited; 5s when 0.
	ProxyDrain time.Duration
	Logger     *slog.Logger
}

// OwnProxy is the proxy of a lone sandbox (`airlock launch --preset`).
type OwnProxy struct {
	Proxy *proxy.Proxy
	// Engine is the Proxy's policy: the DNS answerer asks it which names
	// Preset's rules could reach.
	Engine *policies.Engine
	Preset string
	// Kind is what the audit lines call the sandbox (a sub-agent's
	// kind); the preset when empty.
	Kind string
}

// Sandbox is a running sandboxed command: runc's libcontainer Process, with
// the cgroups and proxy that go with it.
type Sandbox struct {
	ID      string
	log     *slog.Logger
	leaf    *sandbox.Leaf
	proc    *sandbox.Process
	network *sandbox.Network // owned; nil when shared
	proxy   *proxy.Proxy
	served  <-chan error
	closers []func()
	drain   time.Duration
	started time.Time

	waitOnce   sync.Once
	termOnce   sync.Once // Shutdown's SIGTERM
	outcome    Outcome
	waitErr    error
	cleanupErr error
}

// Outcome is how a sandbox ended.
type Outcome struct {
	Pid      int
	ExitCode int // the command's status, or 128+N when killed by signal N
	Duration time.Duration
	// OOMKills counts processes the kernel's OOM killer killed in the
	// sandbox's groups.
	OOMKills int64
	// CleanupErr is a cgroup that could not be removed.
	CleanupErr error
}

// Launch starts o's command. On error nothing it made is left behind; a
// failed setup step of the sandbox is a *sandbox.SetupError.
func Launch(ctx context.Context, o SandboxOptions) (_ *Sandbox, err error) {
	s := &Sandbox{ID: o.ID, log: o.Logger, drain: o.ProxyDrain}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.drain == 0 {
		s.drain = 5 * time.Second
	}
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	c := o.Config
	if o.Proxy != nil && c.Net != sandbox.NetProxy {
		return nil, errors.New("a sandbox's own proxy needs its proxy network")
	}
	// The stage binary is written while the network namespace is made.
	sandbox.PrepareStage()
	network := o.Network
	if network == nil && c.Net != sandbox.NetHost {
		port := 0
		if c.Net == sandbox.NetProxy {
			port = c.ProxyPort
		}
		// Its peers' ports (ConnectPorts): on the proxy network the
		// redirect's filter enforces them, not Landlock.
		if network, err = sandbox.NewNetwork(sandbox.NetworkConfig{ProxyPort: port, LocalPorts: c.ConnectPorts}); err != nil {
			return nil, err
		}
		s.network = network
	}
	// The CA bundle the command's clients trust (its own proxy's), in a
	// directory of its own that the sandbox's uid can read (added to
	// Config.RO). Made before the groups, whose reaper removes it too
	// when the launcher dies without doing so (SIGKILL).
	var caDir string
	var remove []string
	if o.Proxy != nil {
		if caDir, err = caBundleDir(); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, func() { os.RemoveAll(caDir) })
		remove = append(remove, caDir)
	}
	// The groups exist before the process, which joins them before it
	// runs anything.
	s.leaf, err = sandbox.NewLeaf(sandbox.LeafConfig{
		Parent: o.CgroupParent, ID: o.ID, MemoryMax: o.MemoryMax, PidsMax: o.PidsMax,
		Reap: c.DieWithParent, Remove: remove, ParentReaped: o.ParentReaped, Logger: s.log,
	})
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.destroyLeaf)
	c.Cgroups = s.leaf.Joined
	if o.DenyPeers {
		if s.leaf.V2 == "" || network == nil {
			return nil, errors.New("a sandbox kept from the services' ports needs a cgroup v2 leaf in a shared network")
		}
		undo, err := network.DenyPeers(s.leaf.V2)
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, func() {
			if err := undo(); err != nil {
				s.log.Error("the sandbox's rule keeping it from the services' ports could not be removed", "sandbox", s.ID, "err", err)
			}
		})
	}

	env := o.Env
	if c.Net == sandbox.NetProxy {
		env.ProxyURL = fmt.Sprintf("http://127.0.0.1:%d", c.ProxyPort)
	}
	var hook *connhook.Hook
	bundle := o.CABundle
	if o.Proxy != nil {
		if err := os.Chmod(caDir, 0o755); err != nil {
			return nil, err
		}
		if bundle, err = sandbox.WriteCABundle(caDir, o.Proxy.Proxy.CACert()); err != nil {
			return nil, err
		}
		if s.leaf.V2 != "" {
			hook = AttachHook(s.leaf.V2, s.log)
		}
	} else if c.Net == sandbox.NetProxy && o.Network == nil {
		s.log.Warn("a proxy network without a proxy: nothing serves the proxy inside the sandbox, so its connections and DNS queries wait unanswered")
	}
	if bundle != "" {
		c.RO = append(c.RO, filepath.Dir(bundle))
		env.CABundle = bundle
	}
	if c.Env, err = sandbox.Environment(env); err != nil {
		return nil, err
	}
	s.started = time.Now()
	if s.proc, err = sandbox.Start(ctx, c, network); err != nil {
		if hook != nil {
			hook.Close()
		}
		return nil, err
	}
	if o.Proxy != nil {
		s.proxy = o.Proxy.Proxy
		sb := proxy.Sandbox{ID: o.ID, Kind: cmp.Or(o.Proxy.Kind, o.Proxy.Preset), Preset: o.Proxy.Preset, Candidates: identity.Tree(s.proc.Pid), NetNS: network.NS,
			Reachable: o.Proxy.Engine.Reachable(o.Proxy.Preset)}
		if s.leaf.V2 != "" {
			sb.Candidates = identity.Cgroup(s.leaf.V2)
		}
		if hook != nil {
			sb.Hook = hook
			s.closers = append(s.closers, func() { hook.Close() })
		}
		eg, oerr := OpenEgress(s.proxy, network, sb)
		if oerr != nil {
			// The command, started already, would have no way out:
			// it is killed.
			s.Kill()
			s.proc.Wait()
			return nil, oerr
		}
		s.served = eg.Go(func(err error) {
			s.log.Error("the sandbox's proxy stopped serving: the command has no way out", "sandbox", s.ID, "err", err)
		})
	}
	return s, nil
}

// caBundleDir makes the directory of a launch's CA bundle, in the
// temporary directory (TMPDIR) where no other user could put another
// file in its place or in a directory above it (trusted.Path), else in
// /tmp: root removes it by its path (its reaper after a SIGKILL), and a
// path through another user's directory (sudo -E, TMPDIR in a home) is
// theirs to point at what root would then remove.
func caBundleDir() (string, error) {
	base := os.TempDir()
	if !filepath.IsAbs(base) || trusted.Path(base) != nil {
		base = "/tmp"
		if err := trusted.Path(base); err != nil {
			return "", fmt.Errorf("the CA bundle's directory: %w", err)
		}
	}
	return os.MkdirTemp(base, "airlock-ca-")
}

// DetachAfterExit hands the connect hook's tracepoints, attached once per
// process and kept for its life, to a process that holds them until this
// one has exited (sandbox.CloseAfterExit): their detaching, ~470 ms in the
// kernel on the 2-vCPU VM, is then no part of this process's exit, which a
// shell or a spawner waits for. Call it last.
func DetachAfterExit() error {
	files, err := connhook.Tracepoints()
	if err != nil {
		return err
	}
	return sandbox.CloseAfterExit(files)
}

// AttachHook attaches the cgroup connect hook to dir. Without it (no
// cgroup BPF) attribution scans the cgroup's processes: slower, blind to a
// copy of a socket hidden in flight while it looks, and said in the log. A
// nil hook is returned then.
func AttachHook(dir string, log *slog.Logger) *connhook.Hook {
	h, err := connhook.Attach(dir)
	if err != nil {
		log.Warn("cgroup connect hook unavailable; each new connection scans the sandbox's processes (slower, and blind to a socket's copy hidden in flight while it looks)", "cgroup", dir, "err", err)
		return nil
	}
	if h.FDs != nil {
		fdsOnce.Do(func() {
			log.Warn("the connect hook records no descriptors; each new connection reads its connector's whole fd table (slower, same decisions)", "err", h.FDs)
		})
	}
	if h.Execs != nil {
		execsOnce.Do(func() {
			log.Warn("the connect hook does not see programs executed: a process that connects, sends, then executes a program the policy allows is decided as that program", "err", h.Execs)
		})
	}
	if h.Execs == nil && h.GroupDead != nil {
		groupDeadOnce.Do(func() {
			log.Warn("the connect hook cannot tell when a process's last thread exits (sched_process_exit has no group_dead): a process's record of programs executed goes when its main thread exits with no exec running, and one kept after its process is told from a later process of its pid by start time", "err", h.GroupDead)
		})
	}
	return h
}

// fdsOnce, execsOnce and groupDeadOnce say once per process what the hook
// cannot see.
var fdsOnce, execsOnce, groupDeadOnce sync.Once

// Pid is the host pid of the sandbox's init.
func (s *Sandbox) Pid() int { return s.proc.Pid }

// Done is closed when the command has exited.
func (s *Sandbox) Done() <-chan struct{} { return s.proc.Done() }

// OOMKills is how many processes the kernel's OOM killer has killed in the
// sandbox's groups so far; Outcome.OOMKills is the count at the end.
func (s *Sandbox) OOMKills() int64 { return s.leaf.OOMKills() }

// Signal sends sig to the command (SIGKILL: to the whole sandbox).
func (s *Sandbox) Signal(sig syscall.Signal) error { return s.proc.Signal(sig) }

// Kill kills every process of the sandbox now: its cgroups, then its init,
// whose death empties the PID namespace.
func (s *Sandbox) Kill() error {
	err := s.leaf.Kill()
	if serr := s.proc.Signal(syscall.SIGKILL); serr != nil && !errors.Is(serr, os.ErrProcessDone) {
		err = errors.Join(err, serr)
	}
	return err
}

// Shutdown asks the command to stop (SIGTERM, once however often it is
// called) and kills the sandbox if it has not exited when ctx ends; it
// returns once the command has exited. Of concurrent calls, the earliest
// deadline rules.
func (s *Sandbox) Shutdown(ctx context.Context) error {
	var err error
	s.termOnce.Do(func() { err = s.Signal(syscall.SIGTERM) })
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.log.Warn("stop signal not delivered; killing the sandbox", "sandbox", s.ID, "err", err)
		return s.Kill()
	}
	select {
	case <-s.Done():
		return nil
	case <-ctx.Done():
	}
	s.log.Warn("the sandbox did not stop within its grace period: killing it", "sandbox", s.ID)
	err = s.Kill()
	<-s.Done()
	return err
}

// Wait waits for the command, then stops the sandbox's own proxy (letting
// its tunnels drain) and removes its cgroups. Every process is gone when it
// returns; it may be called more than once.
func (s *Sandbox) Wait() (Outcome, error) {
	s.waitOnce.Do(func() {
		code, err := s.proc.Wait()
		s.outcome = Outcome{Pid: s.proc.Pid, ExitCode: code, Duration: time.Since(s.started)}
		if s.proxy != nil {
			ctx, cancel := context.WithTimeout(context.Background(), s.drain)
			s.proxy.Shutdown(ctx)
			cancel()
			if err := <-s.served; err != nil {
				s.log.Error("the sandbox's proxy stopped with an error", "sandbox", s.ID, "err", err)
			}
		}
		// Read before the groups go.
		s.outcome.OOMKills = s.leaf.OOMKills()
		s.release()
		s.outcome.CleanupErr = s.cleanupErr
		s.waitErr = err
	})
	return s.outcome, s.waitErr
}

// release closes what Launch made, in reverse.
func (s *Sandbox) release() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
	if s.network != nil {
		s.network.Close()
		s.network = nil
	}
}

func (s *Sandbox) destroyLeaf() {
	if err := s.leaf.Destroy(); err != nil {
		s.cleanupErr = err
		s.log.Error("the sandbox's cgroups could not be removed", "sandbox", s.ID, "err", err)
	}
}
