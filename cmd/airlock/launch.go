package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/airlock-sandbox/airlock/proxy/identity"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/spf13/cobra"
)

// ExitLaunch is the exit code when the sandbox could not be set up (the
// command never ran), as env(1) and container runtimes use 125.
const ExitLaunch = 125

func newLaunchCmd() *cobra.Command {
	var pf policyFlags
	var xf proxyFlags
	var (
		userSpec, netMode, landlock, seccompMode, jsonStatus, preset, sandboxID, cwd, cgroupParent string
		keepCaps, ro, rw, execPaths, rlimits, envs, keepEnv                                        []string
		proxyPort                                                                                  int
		memoryMax, pidsMax                                                                         int64
		dieWithParent, noDefaultPaths                                                              bool
	)
	cmd := &cobra.Command{
		Use:   "launch [flags] -- CMD [ARGS...]",
		Short: "Run CMD in a sandbox: unprivileged uid, no capabilities, Landlock, seccomp, and a network whose only way out is the proxy",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log := slog.Default()
			c := sandbox.Defaults()
			if noDefaultPaths {
				c.RO, c.RW, c.Exec = nil, nil, nil
			}
			c.Command, c.Dir = args, cwd
			var err error
			if c.UID, c.GID, err = parseUser(userSpec); err != nil {
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
			if sandboxID == "" {
				sandboxID = fmt.Sprintf("%d", os.Getpid())
			}

			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()

			// The sandbox's groups, before the process exists.
			leaf, err := sandbox.NewLeaf(cgroupParent, sandboxID, memoryMax, pidsMax, func(msg string) { log.Warn(msg) })
			if err != nil {
				return &exitError{ExitLaunch, err}
			}
			defer leaf.Remove()
			c.Cgroups = leaf.Joined

			envOpts := sandbox.EnvOptions{Set: envs, Keep: keepEnv}
			var network *sandbox.Network
			var served chan error
			var p *proxy.Proxy
			if c.Net != sandbox.NetHost {
				port := 0
				if c.Net == sandbox.NetProxy {
					port = proxyPort
				}
				if network, err = sandbox.NewNetwork(port); err != nil {
					return &exitError{ExitLaunch, err}
				}
				defer network.Close()
			}
			if c.Net == sandbox.NetProxy && preset != "" {
				// One command: the proxy for this sandbox, in-process,
				// serving the listener inside its namespace.
				engine, err := servingEngine(ctx, &pf, &xf, preset, log)
				if err != nil {
					return err
				}
				var closeAudit func()
				if p, _, closeAudit, err = xf.build(engine, log); err != nil {
					return err
				}
				defer closeAudit()
				dir, err := os.MkdirTemp("", "airlock-launch-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				os.Chmod(dir, 0o755)
				bundle, err := sandbox.WriteCABundle(dir, p.CACert())
				if err != nil {
					return err
				}
				c.RO = append(c.RO, dir)
				envOpts.ProxyURL = fmt.Sprintf("http://127.0.0.1:%d", proxyPort)
				envOpts.CABundle = bundle
			} else if c.Net == sandbox.NetProxy {
				envOpts.ProxyURL = fmt.Sprintf("http://127.0.0.1:%d", proxyPort)
				log.Warn("--net proxy without --preset: nothing serves the proxy port inside the sandbox; pass the listener to a proxy or use --preset")
			}
			if c.Env, err = sandbox.Environment(envOpts); err != nil {
				return &exitError{ExitUsage, err}
			}

			var hook identity.ConnHook
			if p != nil && leaf.V2 != "" {
				var closeHook func()
				hook, closeHook = attachHook(leaf.V2, log)
				defer closeHook()
			}
			start := time.Now()
			proc, err := sandbox.Start(c, network)
			if err != nil {
				var se *sandbox.SetupError
				if errors.As(err, &se) {
					writeStatus(jsonStatus, map[string]any{"started": false, "step": se.Step, "error": se.Err, "exit_code": ExitLaunch})
					return &exitError{ExitLaunch, err}
				}
				return &exitError{ExitLaunch, err}
			}
			if p != nil {
				var cands identity.Candidates = identity.Tree(proc.Pid)
				if leaf.V2 != "" {
					cands = identity.Cgroup(leaf.V2)
				}
				served = make(chan error, 1)
				go func() {
					served <- p.Serve(network.Listener, proxy.Sandbox{ID: sandboxID, Kind: preset, Preset: preset, Candidates: cands, NetNS: network.NS, Hook: hook})
				}()
			}
			go func() {
				// Pass SIGINT/SIGTERM on, but never signal a pid the
				// command no longer holds.
				select {
				case <-ctx.Done():
					syscall.Kill(proc.Pid, syscall.SIGTERM)
				case <-proc.Done():
				}
			}()
			code, werr := proc.Wait()
			if p != nil {
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				p.Shutdown(sctx)
				cancel()
				if err := <-served; err != nil {
					log.Error("the sandbox's proxy stopped with an error", "err", err)
				}
			}
			writeStatus(jsonStatus, map[string]any{"started": true, "pid": proc.Pid, "exit_code": code, "duration_ms": time.Since(start).Milliseconds()})
			if werr != nil {
				return &exitError{ExitLaunch, werr}
			}
			if code != 0 {
				return &exitError{code, errSilent}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&userSpec, "user", "998:998", "run as UID[:GID] or a user name")
	fl.StringSliceVar(&keepCaps, "keep-caps", nil, "capabilities to keep (e.g. CAP_NET_BIND_SERVICE); default none")
	fl.StringVar(&netMode, "net", "proxy", "network: none (loopback only), proxy (only the proxy port on loopback), host (no isolation)")
	fl.IntVar(&proxyPort, "proxy-port", 3128, "port of the proxy listener inside the sandbox")
	fl.StringArrayVar(&ro, "ro", nil, "read-only path (Landlock; repeatable)")
	fl.StringArrayVar(&rw, "rw", nil, "read-write path (Landlock; repeatable)")
	fl.StringArrayVar(&execPaths, "exec", nil, "read-and-execute path (Landlock; repeatable)")
	fl.BoolVar(&noDefaultPaths, "no-default-paths", false, "start from no paths instead of the system directories (/usr, /etc, /dev, ...)")
	fl.StringVar(&landlock, "landlock", "hard", "hard (refuse to start without it), best-effort (say what is skipped), off")
	fl.StringVar(&seccompMode, "seccomp", "default", "default (deny list) or off")
	fl.StringArrayVar(&rlimits, "rlimit", nil, "NAME=N resource limit (as, core, cpu, data, fsize, memlock, nofile, nproc, stack)")
	fl.StringArrayVar(&envs, "env", nil, "KEY=VAL for the command (repeatable)")
	fl.StringArrayVar(&keepEnv, "keep-env", nil, "copy this variable from the launcher's environment (repeatable)")
	fl.StringVar(&cgroupParent, "cgroup", "", "cgroup v2 directory under which the sandbox's leaf airlock-<id> is made (default: the v2 root)")
	fl.Int64Var(&memoryMax, "memory-max", 0, "memory.max of the sandbox's cgroup, in bytes")
	fl.Int64Var(&pidsMax, "pids-max", 0, "pids.max of the sandbox's cgroup")
	fl.BoolVar(&dieWithParent, "die-with-parent", true, "kill the command when the launcher dies")
	fl.StringVar(&jsonStatus, "json-status", "", "write the outcome (started, pid, exit_code, failed step) as JSON to FILE")
	fl.StringVar(&cwd, "cwd", "", "working directory of the command")
	fl.StringVar(&preset, "preset", "", "with --net proxy: serve the proxy for this sandbox in-process, deciding with this preset")
	fl.StringVar(&sandboxID, "sandbox-id", "", "sandbox id in decisions, audit lines and the cgroup name (default: the launcher's pid)")
	pf.register(cmd, true)
	xf.register(cmd)
	// The command owns stdout; decisions go to stderr unless redirected.
	fl.Lookup("audit-log").DefValue = "stderr"
	fl.Set("audit-log", "stderr")
	fl.Lookup("audit-log").Changed = false
	return cmd
}

func parseUser(spec string) (uid, gid int, err error) {
	name, group, hasGroup := strings.Cut(spec, ":")
	if uid, err = strconv.Atoi(name); err != nil {
		u, lerr := user.Lookup(name)
		if lerr != nil {
			return 0, 0, fmt.Errorf("--user %q: %w", spec, lerr)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	} else {
		gid = uid
	}
	if hasGroup {
		if gid, err = strconv.Atoi(group); err != nil {
			g, lerr := user.LookupGroup(group)
			if lerr != nil {
				return 0, 0, fmt.Errorf("--user %q: %w", spec, lerr)
			}
			gid, _ = strconv.Atoi(g.Gid)
		}
	}
	return uid, gid, nil
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

func writeStatus(file string, v map[string]any) {
	if file == "" {
		return
	}
	raw, _ := json.Marshal(v)
	os.WriteFile(file, append(raw, '\n'), 0o644)
}
