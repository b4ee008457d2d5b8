package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/trusted"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/supervisor"
	"github.com/spf13/cobra"
)

// ExitLaunch is the exit code when the sandbox could not be set up (the
// command never ran), as env(1) and container runtimes use 125.
const ExitLaunch = 125

func newLaunchCmd() *cobra.Command {
	var pf policyFlags
	var xf proxyFlags
	var (
		userSpec, netMode, landlock, seccompMode, jsonStatus, preset, kind, sandboxID, cwd, cgroupParent, podSocket string
		keepCaps, ro, rw, execPaths, rlimits, envs, keepEnv                                                         []string
		proxyPort                                                                                                   int
		memoryMax, pidsMax                                                                                          int64
		dieWithParent, noDefaultPaths                                                                               bool
		stopTimeout                                                                                                 time.Duration
	)
	cmd := &cobra.Command{
		Use:   "launch [flags] -- CMD [ARGS...]",
		Short: "Run CMD in a sandbox: unprivileged uid, no capabilities, Landlock, seccomp, and a network whose only way out is the proxy",
		Example: `  # curl with only the reviewer preset's egress, through a proxy served in-process
  airlock launch --preset reviewer -- curl -sS https://api.github.com/zen
  # no network at all, the working directory writable
  airlock launch --net none --rw "$PWD" -- make test
  # a uid no host account has, at most 512 MiB and 256 processes, the outcome as JSON
  airlock launch --user 61000 --memory-max 536870912 --pids-max 256 --json-status status.json --preset coder -- python3 agent.py
  # a policy bundle of your own (its airlock.lock, when there is one, is enforced)
  airlock launch --policy ./policy --preset mine -- node agent.js`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &exitError{ExitUsage, errors.New("no command to run: airlock launch [flags] -- CMD [ARGS...]")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			log := slog.Default()
			if podSocket != "" {
				return launchInPod(cmd, podLaunch{
					socket: podSocket, preset: preset, kind: kind, id: sandboxID, user: userSpec, cwd: cwd,
					auditLog: xf.auditLog, jsonStatus: jsonStatus, ro: ro, rw: rw, envs: envs, keepEnv: keepEnv,
					pin: string(pf.sha256), stopTimeout: stopTimeout, memoryMax: memoryMax, pidsMax: pidsMax,
				}, args, log)
			}
			// Everything past validation that fails is a setup failure:
			// the command never ran.
			defer func() {
				var ee *exitError
				if err != nil && !errors.As(err, &ee) && !errors.Is(err, policies.ErrIntegrity) {
					err = &exitError{ExitLaunch, err}
				}
			}()
			c := sandbox.Defaults()
			if noDefaultPaths {
				c.RO, c.RW, c.Exec = nil, nil, nil
			}
			c.Command = args
			if cwd != "" {
				// As --pod-socket has it: relative to where airlock runs.
				if c.Dir, err = filepath.Abs(cwd); err != nil {
					return &exitError{ExitUsage, fmt.Errorf("--cwd %s: %w", cwd, err)}
				}
			}
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
			if c.UID, c.GID, err = sandbox.ParseUser(userSpec); err != nil {
				return &exitError{ExitUsage, err}
			}
			c.KeepCaps = keepCaps
			c.Net, c.ProxyPort = sandbox.Net(netMode), proxyPort
			c.RO, c.RW, c.Exec = append(c.RO, ro...), append(c.RW, rw...), append(c.Exec, execPaths...)
			c.Landlock = sandbox.LandlockMode(landlock)
			switch seccompMode {
			case "default":
				c.Seccomp = true
			case "off":
				c.Seccomp = false
			default:
				return &exitError{ExitUsage, fmt.Errorf("--seccomp %q: want default or off", seccompMode)}
			}
			if c.Rlimits, err = parseRlimits(rlimits); err != nil {
				return &exitError{ExitUsage, err}
			}
			c.DieWithParent = dieWithParent
			// In a terminal's foreground, the sandbox gets a terminal of
			// its own, relayed to this one.
			c.Terminal = sandbox.TerminalForeground()
			// Validation before anything is created: a usage error
			// leaves nothing behind.
			if err := checkLimitFlags(cmd, memoryMax, pidsMax); err != nil {
				return &exitError{ExitUsage, err}
			}
			if stopTimeout <= 0 {
				return &exitError{ExitUsage, fmt.Errorf("--stop-timeout %v: want a positive duration", stopTimeout)}
			}
			if err := c.Validate(); err != nil {
				return &exitError{ExitUsage, err}
			}
			// No proxy of its own serves the sandbox without --net proxy
			// and --preset: a preset, a policy pin or a proxy flag given
			// then would be ignored, and the command run unchecked.
			if c.Net != sandbox.NetProxy || preset == "" {
				why := fmt.Sprintf("--net %s serves no proxy, so no policy or proxy setting applies; use --net proxy --preset NAME, or drop it", c.Net)
				if c.Net == sandbox.NetProxy {
					why = "without --preset no proxy serves the sandbox, so no policy or proxy setting applies; give --preset NAME, or drop it"
				}
				refused := func(name string) bool {
					env := knobOf(cmd.Flags().Lookup(name))
					switch {
					case !proxyFlagNames[name] && !policyFlagNames[name] && name != "kind" && (name != "preset" || c.Net == sandbox.NetProxy):
						return false
					case c.Net == sandbox.NetNone && env != "":
						// With --net none nothing can leave: a knob
						// exported for other commands (AIRLOCK_POLICY)
						// is moot, said and left; one typed here is
						// still a mistake.
						log.Warn("an environment knob does not apply: --net none serves no proxy", "env", env, "flag", "--"+name)
						return false
					}
					return true
				}
				if err := refuseSetFlags(cmd.Flags(), func(name string) bool { return !refused(name) }, why); err != nil {
					return &exitError{ExitUsage, err}
				}
			}
			if sandboxID != "" && !supervisor.ValidSandboxID(sandboxID) {
				// It names the sandbox's cgroup: x/../.. would leave
				// its parent.
				return &exitError{ExitUsage, fmt.Errorf("--sandbox-id %q: want "+supervisor.SandboxIDRule, sandboxID)}
			}
			if podSocket == "" && strings.HasPrefix(sandbox.LeafName(sandboxID), supervisor.PodGroupName("")) {
				// Its leaf (at the hierarchy's root) or its v1 limit
				// groups (at theirs, whatever --cgroup) would be a pod's
				// groups, which that pod's boot kills as its own left
				// over.
				return &exitError{ExitUsage, fmt.Errorf("--sandbox-id %q: ids beginning pod- name pods' cgroups; choose another", sandboxID)}
			}
			if c.Net == sandbox.NetProxy && preset != "" {
				if err := proxy.CheckFlags(xf.options(log)); err != nil {
					return &exitError{ExitUsage, err}
				}
			}
			if cmd.Flags().Changed("metrics") {
				return &exitError{ExitUsage, errors.New("--metrics: a launch's proxy serves no metrics (airlock proxy and airlock up do)")}
			}
			status, err := openStatus(jsonStatus)
			if err != nil {
				return &exitError{ExitUsage, err}
			}
			defer status.Close()
			warnHostAccount(c.UID, c.GID, log)
			if sandboxID == "" {
				sandboxID = fmt.Sprintf("%d", os.Getpid())
			}

			// Signals are kept from here on and passed to the sandbox
			// once it runs: a ^C during setup still reaches the command.
			sigs := make(chan os.Signal, 8)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
			defer signal.Stop(sigs)
			ctx, cancel := context.WithCancelCause(cmd.Context())
			defer cancel(nil)

			o := supervisor.SandboxOptions{
				ID: sandboxID, Config: c, Env: sandbox.EnvOptions{Set: envs, Keep: keepEnv},
				CgroupParent: cgroupParent, MemoryMax: memoryMax, PidsMax: pidsMax, Logger: log,
			}
			if c.Net == sandbox.NetProxy && preset != "" {
				// One command: the proxy for this sandbox, in-process,
				// serving the listener inside its namespace.
				engine, p, err := buildProxy(ctx, &pf, &xf, preset, log)
				if err != nil {
					status.write(map[string]any{"started": false, "error": err.Error(), "exit_code": exitCode(err)}, log)
					return err
				}
				defer p.Close()
				if rules, ok := engine.Preset(preset); ok {
					if err := handedSecret(rules, envs, keepEnv, c.Command[1:]); err != nil {
						status.write(map[string]any{"started": false, "error": err.Error(), "exit_code": ExitUsage}, log)
						return &exitError{ExitUsage, err}
					}
				}
				o.Proxy = &supervisor.OwnProxy{Proxy: p, Engine: engine, Preset: preset, Kind: kind}
			} else if c.Net == sandbox.NetProxy {
				log.Warn("--net proxy without --preset: nothing serves the proxy inside the sandbox, so its connections and DNS queries wait unanswered; use --preset, or --net none")
			}
			launched := make(chan *supervisor.Sandbox, 1)
			go forwardSignals(sigs, launched, cancel, stopTimeout, log)
			sb, err := supervisor.Launch(ctx, o)
			launched <- sb
			if err != nil {
				failed := map[string]any{"started": false, "error": err.Error(), "exit_code": ExitLaunch}
				var se *sandbox.SetupError
				if errors.As(err, &se) {
					failed["step"], failed["error"] = se.Step, se.Err
				}
				status.write(failed, log)
				return &exitError{ExitLaunch, err}
			}
			out, werr := sb.Wait()
			code := out.ExitCode
			outcome := map[string]any{"started": true, "pid": out.Pid, "exit_code": code, "duration_ms": out.Duration.Milliseconds(), "oom_killed": out.OOMKills > 0}
			if out.OOMKills > 0 {
				outcome["oom_kills"] = out.OOMKills
			}
			if out.CleanupErr != nil {
				outcome["cleanup_error"] = out.CleanupErr.Error()
			}
			status.write(outcome, log)
			if werr != nil {
				return &exitError{ExitLaunch, werr}
			}
			if out.OOMKills > 0 {
				msg := fmt.Errorf("the kernel's OOM killer killed %d process(es) of the sandbox: it reached its memory limit (--memory-max %d)", out.OOMKills, memoryMax)
				if memoryMax == 0 {
					msg = fmt.Errorf("the kernel's OOM killer killed %d process(es) of the sandbox: the host ran out of memory (the sandbox has no --memory-max)", out.OOMKills)
				}
				if code == 128+int(syscall.SIGKILL) {
					return &exitError{code, fmt.Errorf("the command was killed: %w", msg)}
				}
				log.Warn(msg.Error())
			}
			if code != 0 {
				return &exitError{code, errSilent}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	inGroup(fl, "Sandbox", func() {
		fl.StringVar(&userSpec, "user", "998:998", "run as `UID[:GID]` or a user name")
		fl.StringSliceVar(&keepCaps, "keep-caps", nil, "capabilities to keep, `CAP[,CAP]` (e.g. CAP_NET_BIND_SERVICE); default none")
		fl.StringArrayVar(&ro, "ro", nil, "read-only `PATH` (Landlock; repeatable)")
		fl.StringArrayVar(&rw, "rw", nil, "read-write `PATH` (Landlock; repeatable)")
		fl.StringArrayVar(&execPaths, "exec", nil, "read-and-execute `PATH` (Landlock; repeatable)")
		fl.BoolVar(&noDefaultPaths, "no-default-paths", false, "start from no paths instead of the system directories (/usr, /etc, /dev, ...)")
		fl.StringVar(&landlock, "landlock", "hard", "Landlock `MODE`: hard (refuse to start without it), best-effort (say what is skipped), off")
		fl.StringVar(&seccompMode, "seccomp", "default", "seccomp `MODE`: default (deny list) or off")
		fl.StringArrayVar(&rlimits, "rlimit", nil, "`NAME=N` resource limit (as, cpu, data, fsize, memlock, nofile, nproc, stack; repeatable)")
		fl.StringArrayVar(&envs, "env", nil, "`KEY=VAL` for the command (repeatable)")
		fl.StringArrayVar(&keepEnv, "keep-env", nil, "copy variable `KEY` from the launcher's environment (repeatable)")
		fl.StringVar(&cwd, "cwd", "", "working `DIR` of the command")
		fl.StringVar(&cgroupParent, "cgroup", "", "cgroup v2 `DIR` under which the sandbox's leaf airlock-ID is made (default: the v2 root)")
		fl.Int64Var(&memoryMax, "memory-max", 0, "memory.max of the sandbox's cgroup, in `BYTES`")
		fl.Int64Var(&pidsMax, "pids-max", 0, "pids.max of the sandbox's cgroup: at most `N` processes")
		fl.DurationVar(&stopTimeout, "stop-timeout", 10*time.Second, "after SIGINT, SIGTERM or SIGHUP, how long the command may take to exit before the whole sandbox is killed")
		fl.BoolVar(&dieWithParent, "die-with-parent", true, "kill the command when the launcher dies")
		fl.StringVar(&jsonStatus, "json-status", "", "write the outcome (started, pid, exit_code, failed step) as JSON to `FILE`")
		fl.StringVar(&sandboxID, "sandbox-id", "", "sandbox `ID` in decisions, audit lines and the cgroup name (default: the launcher's pid; launch-PID with --pod-socket)")
	})
	inGroup(fl, "Network", func() {
		fl.StringVar(&netMode, "net", "proxy", "network `MODE`: none (loopback only), proxy (only the proxy port on loopback), host (no isolation)")
		fl.IntVar(&proxyPort, "proxy-port", 3128, "`PORT` of the proxy listener inside the sandbox")
	})
	xf.register(cmd)
	inGroup(fl, "Policy", func() {
		fl.StringVar(&preset, "preset", "", "with --net proxy: serve the proxy for this sandbox in-process, deciding with preset `NAME`")
		fl.StringVar(&kind, "kind", "", "what decisions and audit lines call the sandbox (a sub-agent's kind, `NAME`); default: the preset")
		fl.StringVar(&podSocket, "pod-socket", "", "run the command as a one-off sandbox of the running pod (airlock up) on this admin socket `PATH`, decided by the pod's proxy with --preset; no policy is loaded here, and flags the pod decides are refused")
		pf.register(cmd, true)
	})
	groupedHelp(cmd, "Sandbox", "Network", "Proxy", "Policy")
	fl.MarkHidden("metrics")
	// The command owns stdout; decisions go to stderr unless redirected.
	fl.Lookup("audit-log").DefValue = "stderr"
	fl.Set("audit-log", "stderr")
	fl.Lookup("audit-log").Changed = false
	return cmd
}

func parseRlimits(specs []string) (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, s := range specs {
		k, v, ok := strings.Cut(s, "=")
		n, err := strconv.ParseUint(v, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("--rlimit %q: want NAME=N", s)
		}
		out[strings.ToLower(k)] = n
	}
	return out, nil
}

// checkLimitFlags refuses cgroup limits that would enforce nothing, or
// everything: a limit the operator typed is applied as typed or not at all.
func checkLimitFlags(cmd *cobra.Command, memoryMax, pidsMax int64) error {
	if cmd.Flags().Changed("memory-max") && memoryMax <= 0 {
		return fmt.Errorf("--memory-max %d: want a positive number of bytes", memoryMax)
	}
	if cmd.Flags().Changed("pids-max") && pidsMax <= 0 {
		return fmt.Errorf("--pids-max %d: want a positive number of processes", pidsMax)
	}
	return nil
}

// warnHostAccount says when the sandbox's uid is a host account's or its
// gid a host group's (sandbox.HostIdentity), with the way out.
func warnHostAccount(uid, gid int, log *slog.Logger) {
	for _, w := range sandbox.HostIdentity(uid, gid) {
		log.Warn("the sandbox's " + w + "; choose an unused uid and gid with --user (e.g. --user 61000:61000)")
	}
}

// statusFile is --json-status, opened before anything is created so that
// an unwritable path is a usage error rather than an outcome lost at the
// end.
type statusFile struct{ f *os.File }

func openStatus(path string) (*statusFile, error) {
	if path == "" {
		return &statusFile{}, nil
	}
	f, err := openStatusFile(path)
	if err != nil {
		return nil, fmt.Errorf("--json-status: %w", err)
	}
	return &statusFile{f}, nil
}

// openStatusFile opens path for the status, as root, often in a directory
// a sandbox writes (its job's): by its descriptor when it names one of
// this process's (/dev/stdout, /dev/fd/3, a shell's >(jq)); else through
// no link a user other than root or this one could have pointed elsewhere
// ($JOB/out → /root; trusted.OpenDir, which checks as it walks, so that no
// link swapped in after a check is followed), not through a link as itself (status.json →
// /etc/shadow would be truncated and written), and not into a file with
// other names (a hard link to one); emptied only then.
func openStatusFile(path string) (*os.File, error) {
	if fd, ok := proxy.OwnDescriptor(path); ok {
		f, err := proxy.DupOwnDescriptor(fd, path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return f, nil
	}
	dir, name := trusted.SplitLast(path)
	d, err := trusted.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	f, err := trusted.OpenOutputIn(d, name, 0, 0o644)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link: give the file itself", path)
	}
	if err != nil {
		return nil, err
	}
	var st *syscall.Stat_t
	fi, err := f.Stat()
	if err == nil {
		st, _ = fi.Sys().(*syscall.Stat_t)
	}
	switch {
	case err != nil:
	case st != nil && st.Nlink > 1:
		// Where hard links to others' files are not refused
		// (fs.protected_hardlinks=0).
		err = fmt.Errorf("%s has %d names (hard links): give a file of its own", path, st.Nlink)
	case fi.Mode().IsRegular():
		err = f.Truncate(0)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (s *statusFile) write(v map[string]any, log *slog.Logger) {
	if s.f == nil {
		return
	}
	raw, _ := json.Marshal(v)
	if _, err := s.f.Write(append(raw, '\n')); err != nil {
		log.Error("--json-status could not be written", "path", s.f.Name(), "err", err)
	}
}

func (s *statusFile) Close() {
	if s.f != nil {
		s.f.Close()
	}
}

// forwardSignals passes the launcher's signals to the sandbox, launched
// once it runs (nil: it never will). Those that come while it is set up
// are passed on once the command runs. A stop signal (SIGINT, SIGTERM,
// SIGHUP) is the command's to act on for up to stopTimeout, as docker stop
// allows; after that, or at a second SIGINT or SIGTERM, the whole sandbox
// is killed: a command that ignores or defers it (a shell waiting on its
// foreground job defers SIGINT) cannot keep the sandbox alive after the
// launcher was told to stop. Before the command runs, the kill is abort,
// which ends a setup that would otherwise hold the launcher as long as a
// path given to the sandbox hangs (a FUSE or NFS mount whose server is
// gone). A terminal's ^C is none of these: on the sandbox's own terminal,
// it is the pty's to signal.
func forwardSignals(sigs <-chan os.Signal, launched <-chan *supervisor.Sandbox, abort context.CancelCauseFunc, stopTimeout time.Duration, log *slog.Logger) {
	var proc *supervisor.Sandbox
	var done <-chan struct{}
	var pending []syscall.Signal
	killed := false
	kill := func(why string) {
		killed = true
		if proc == nil {
			log.Warn("ending the sandbox's setup: "+why, "stop_timeout", stopTimeout.String())
			abort(errors.New(why))
			return
		}
		log.Warn("killing the sandbox: "+why, "stop_timeout", stopTimeout.String())
		if err := proc.Kill(); err != nil {
			log.Error("kill the sandbox", "err", err)
		}
	}
	var deadline <-chan time.Time
	stops := 0
	for {
		select {
		case sb := <-launched:
			if sb == nil {
				return
			}
			proc, done, launched = sb, sb.Done(), nil
			if killed {
				// Set up as the abort came: it runs, and is killed.
				kill("a stop during its setup")
				continue
			}
			for _, sig := range pending {
				proc.Signal(sig)
			}
			pending = nil
		case <-done:
			return
		case <-deadline:
			kill("not stopped within --stop-timeout")
			deadline = nil
		case s := <-sigs:
			sig := s.(syscall.Signal)
			if proc != nil {
				proc.Signal(sig)
			} else {
				pending = append(pending, sig)
			}
			if sig == syscall.SIGQUIT {
				continue
			}
			if stops++; stops == 1 {
				deadline = time.After(stopTimeout)
			} else if sig != syscall.SIGHUP {
				kill("a second stop signal")
			}
		}
	}
}

// handedSecret refuses to give the command, by --keep-env, --env or an
// argument, a value holding a credential p injects (proxy.HandedSecret):
// the proxy, in this process, reads it from this same environment (or its
// file).
func handedSecret(p policies.Preset, envs, keepEnv, args []string) error {
	var gives []proxy.Given
	for _, k := range keepEnv {
		if v, ok := os.LookupEnv(k); ok {
			gives = append(gives, proxy.Given{By: "--keep-env", Name: k, Value: v})
		}
	}
	return proxy.HandedSecret(p, append(gives, proxy.Gives("--env", envs, args)...))
}
