package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/airlock-sandbox/airlock/proxy/egress"
	"github.com/airlock-sandbox/airlock/proxy/identity"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/supervisor"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/vishvananda/netns"
)

// proxyFlags configure the proxy; `airlock launch` and `airlock up` reuse
// them.
type proxyFlags struct {
	caDir, caCert, caKey string
	upstreamCAs          []string
	resolve, allowRanges []string
	auditLog             string
	auditFailure         auditFailure
	metrics              string
	watch                bool
	limits               proxy.Limits
	dialTimeout          time.Duration
}

// proxyFlagNames are the flags proxyFlags registers: the proxy's own,
// which a pod's proxy decides instead.
var proxyFlagNames = func() map[string]bool {
	cmd := &cobra.Command{}
	new(proxyFlags).register(cmd)
	names := map[string]bool{}
	cmd.Flags().VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
	return names
}()

// policyFlagNames are the flags policyFlags registers (with the bundle's).
var policyFlagNames = func() map[string]bool {
	cmd := &cobra.Command{}
	new(policyFlags).register(cmd, true)
	names := map[string]bool{}
	cmd.Flags().VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
	return names
}()

func (f *proxyFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	inGroup(fl, "Proxy", func() {
		fl.StringVar(&f.caDir, "ca-dir", proxy.DefaultCADir(), "`DIR` of the airlock CA (ca.pem, ca-key.pem); generated on first start")
		fl.StringVar(&f.caCert, "ca-cert", "", "operator-supplied CA certificate `FILE` (with --ca-key) instead of --ca-dir")
		fl.StringVar(&f.caKey, "ca-key", "", "operator-supplied CA key `FILE` (mode 0600)")
		fl.StringArrayVar(&f.upstreamCAs, "upstream-ca", nil, "extra PEM CA `FILE` trusted for upstream TLS, besides the system roots (repeatable)")
		fl.StringArrayVar(&f.resolve, "resolve", nil, "pin `HOST:PORT:ADDR[,ADDR]` like curl (addresses are still SSRF-checked; repeatable)")
		fl.StringArrayVar(&f.allowRanges, "allow-range", nil, "UNSAFE: allow upstream addresses in this `CIDR` despite the SSRF guard (repeatable)")
		fl.StringVar(&f.auditLog, "audit-log", "-", "audit log `FILE` (JSON decision and close lines), - for stdout, stderr for stderr")
		f.auditFailure = "closed"
		fl.Var(&f.auditFailure, "audit-failure", "when a decision cannot be written to the audit log: closed (refuse it, 503 audit_unavailable) or warn (UNSAFE: serve it, log the failure)")
		fl.StringVar(&f.metrics, "metrics", "", "serve Prometheus /metrics on this `ADDR`")
		d := proxy.DefaultLimits
		fl.IntVar(&f.limits.MaxConns, "max-conns", d.MaxConns, "at most `N` connections one sandbox may hold through the proxy; more are answered 503 connection_limit")
		fl.IntVar(&f.limits.MaxHeaderBytes, "max-header-bytes", d.MaxHeaderBytes, "largest request header in `BYTES`, plain or inside an inspected tunnel")
		fl.DurationVar(&f.limits.ReadHeaderTimeout, "read-header-timeout", d.ReadHeaderTimeout, "time a client has to send a whole request header")
		fl.DurationVar(&f.limits.IdleTimeout, "idle-timeout", d.IdleTimeout, "keep-alive connections, plain or inspected, waiting this long for a request are closed, and a request whose body stops arriving for this long is refused")
		fl.DurationVar(&f.limits.HandshakeTimeout, "handshake-timeout", d.HandshakeTimeout, "TLS handshakes with clients (inspected tunnels) and upstreams")
		fl.DurationVar(&f.limits.TunnelIdleTimeout, "tunnel-idle-timeout", d.TunnelIdleTimeout, "opaque tunnels and WebSockets moving no data either way this long are closed")
		fl.DurationVar(&f.limits.WriteTimeout, "write-timeout", d.WriteTimeout, "a client (plain or inspected) that accepts none of a response this long is cut")
		fl.DurationVar(&f.limits.UpstreamHeaderTimeout, "upstream-header-timeout", d.UpstreamHeaderTimeout, "time an upstream has to start its answer once a request is sent")
		fl.DurationVar(&f.dialTimeout, "dial-timeout", egress.DefaultDialTimeout, "upstream TCP connect")
	})
	inGroup(fl, "Policy", func() {
		fl.BoolVar(&f.watch, "policy-watch", true, "reload the policy bundle directory when it changes")
	})
}

// auditFailure is --audit-failure, checked as it is parsed: a value that is
// neither is a usage error before anything is set up.
type auditFailure string

func (a *auditFailure) String() string { return string(*a) }
func (a *auditFailure) Type() string   { return "closed|warn" }
func (a *auditFailure) Set(s string) error {
	if s != "closed" && s != "warn" {
		return errors.New("want closed or warn")
	}
	*a = auditFailure(s)
	return nil
}

// options are the proxy's options from the flags.
func (f *proxyFlags) options(log *slog.Logger) proxy.Options {
	return proxy.Options{
		CADir: f.caDir, CACert: f.caCert, CAKey: f.caKey, UpstreamCAs: f.upstreamCAs,
		Resolve: f.resolve, AllowRanges: f.allowRanges, AuditLog: f.auditLog, AuditFailOpen: f.auditFailure == "warn",
		Limits: f.limits, DialTimeout: f.dialTimeout, Logger: log,
	}
}

// buildProxy is the engine serving preset and a proxy deciding with it.
// Limits are checked as typed, before anything is set up: a zero or
// negative value is a mistake, not a way to turn a guard off. The other
// proxy flags are its callers' to check first (proxy.CheckFlags), before
// they create anything.
func buildProxy(ctx context.Context, pf *policyFlags, xf *proxyFlags, preset string, log *slog.Logger) (*policies.Engine, *proxy.Proxy, error) {
	var le *proxy.LimitError
	if err := proxy.CheckLimits(xf.limits, xf.dialTimeout); errors.As(err, &le) {
		return nil, nil, &exitError{ExitUsage, fmt.Errorf("--%s must be positive", le.Name)}
	}
	o, err := pf.options()
	if err != nil {
		return nil, nil, err
	}
	engine, err := supervisor.OpenEngine(ctx, supervisor.PolicyOptions{Options: o, Presets: []string{preset}, Watch: pf.bundle != "" && xf.watch}, log)
	if errors.Is(err, policies.ErrNoPreset) {
		return nil, nil, &exitError{ExitUsage, fmt.Errorf("--preset: %w", err)}
	}
	if err != nil {
		return nil, nil, err
	}
	p, err := proxy.Build(engine, xf.options(log))
	if err != nil {
		return nil, nil, err
	}
	return engine, p, nil
}

func newProxyCmd() *cobra.Command {
	var pf policyFlags
	var xf proxyFlags
	var listen, preset, sandboxID, kind, cgroup string
	var transparent, dnsAddrs []string
	var pid int
	cmd := &cobra.Command{
		Use:         "proxy --listen ADDR --preset NAME",
		Short:       "Run the L7 egress proxy for one sandbox (standalone form)",
		Annotations: serviceLogs,
		Example: `  # the proxy for the processes of one cgroup, deciding with the coder preset
  airlock proxy --listen 127.0.0.1:3128 --preset coder --cgroup /sys/fs/cgroup/agents/a1
  # a policy bundle of your own, pinned by its lock file, with Prometheus metrics
  airlock proxy --preset mine --policy ./policy --policy-lock ./policy/airlock.lock --metrics 127.0.0.1:9090`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			log := slog.Default()
			if preset == "" {
				return &exitError{ExitUsage, errors.New("--preset is required")}
			}
			// /metrics has no authentication: loopback only, as the
			// watchdog's and a pod's admin HTTP are.
			if why := manifest.CheckLoopbackHost(xf.metrics); xf.metrics != "" && why != "" {
				return &exitError{ExitUsage, fmt.Errorf("--metrics %q: %s", xf.metrics, why)}
			}
			if err := proxy.CheckFlags(xf.options(log)); err != nil {
				return &exitError{ExitUsage, err}
			}
			families := map[string]string{}
			for _, addr := range append(slices.Clone(transparent), dnsAddrs...) {
				f, err := oneFamily(addr)
				if err != nil {
					return &exitError{ExitUsage, fmt.Errorf("--transparent/--dns %s: %w", addr, err)}
				}
				families[addr] = f
			}
			engine, p, err := buildProxy(ctx, &pf, &xf, preset, log)
			if err != nil {
				return err
			}
			defer p.Close()
			// A daemon's SIGHUP: reload. (`airlock launch` passes its
			// SIGHUP, a terminal's hangup, to the sandbox instead.)
			reloadOnHUP(ctx, engine, log)
			var cands identity.Candidates = identity.AllProcesses{}
			var hook identity.ConnHook
			switch {
			case cgroup != "":
				cands = identity.Cgroup(cgroup)
				if h := supervisor.AttachHook(cgroup, log); h != nil {
					hook = h
					defer h.Close()
				}
			case pid != 0:
				cands = identity.Tree(pid)
			default:
				log.Warn("no --cgroup or --pid: connections are attributed by scanning every process on the host")
			}
			// Clients are local processes: keepalive probes would find
			// nothing the kernel does not report, and cost four
			// setsockopt calls on every accept.
			lc := net.ListenConfig{KeepAlive: -1}
			ln, err := lc.Listen(ctx, "tcp", listen)
			if err != nil {
				return err
			}
			// The sidecar shape: the workload's namespace (this one)
			// redirects its connections and DNS queries here (README,
			// "Transparent egress beside a workload").
			n := &sandbox.Network{NS: netns.None(), Listener: ln}
			for _, addr := range transparent {
				tl, err := lc.Listen(ctx, "tcp"+families[addr], addr)
				if err != nil {
					return fmt.Errorf("--transparent: %w", err)
				}
				n.Transparent = append(n.Transparent, tl)
			}
			for _, addr := range dnsAddrs {
				family := families[addr]
				pc, err := lc.ListenPacket(ctx, "udp"+family, addr)
				if err != nil {
					return fmt.Errorf("--dns: %w", err)
				}
				tl, err := lc.Listen(ctx, "tcp"+family, addr)
				if err != nil {
					return fmt.Errorf("--dns: %w", err)
				}
				n.DNSPackets, n.DNSStreams = append(n.DNSPackets, pc), append(n.DNSStreams, tl)
			}
			if xf.metrics != "" {
				bound, stop, err := serveMetrics(xf.metrics, p.Metrics().Handler())
				if err != nil {
					return err
				}
				defer stop()
				// Its own line, before the listening one: with port 0
				// (the kernel's pick, never a port taken meanwhile) this
				// is where the metrics are.
				fmt.Fprintf(cmd.ErrOrStderr(), "airlock proxy serving metrics on %s\n", bound)
			}
			if sandboxID == "" {
				sandboxID = preset
			}
			if kind == "" {
				kind = preset
			}
			sb := proxy.Sandbox{ID: sandboxID, Kind: kind, Preset: preset, Candidates: cands, NetNS: netns.None(), Hook: hook,
				Reachable: engine.Reachable(preset)}
			eg, err := supervisor.OpenEgress(p, n, sb)
			if err != nil {
				return err
			}
			failed := make(chan error, 1)
			served := eg.Go(func(err error) { failed <- err })
			fmt.Fprintf(cmd.ErrOrStderr(), "airlock proxy listening on %s (preset %s, policy %s)\n", ln.Addr(), preset, engine.Hash())
			select {
			case err := <-failed:
				log.Error("a listener stopped: shutting down", "err", err)
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			log.Info("shutting down: draining tunnels", "grace", "10s")
			// Shutdown first: the listeners end with it.
			return errors.Join(p.Shutdown(sctx), <-served)
		},
	}
	fl := cmd.Flags()
	inGroup(fl, "Proxy", func() {
		fl.StringVar(&listen, "listen", "127.0.0.1:3128", "`ADDR` to listen on")
		fl.StringArrayVar(&transparent, "transparent", nil, "also accept connections redirected to `ADDR` (nft redirect; the sidecar shape); repeatable, e.g. 127.0.0.1:15001 and [::1]:15001")
		fl.StringArrayVar(&dnsAddrs, "dns", nil, "answer DNS redirected to `ADDR` (UDP and TCP) with synthetic addresses for --transparent; repeatable")
		xf.register(cmd)
	})
	inGroup(fl, "Sandbox", func() {
		fl.StringVar(&sandboxID, "sandbox-id", "", "sandbox `ID` in decisions and audit lines (default: the preset)")
		fl.StringVar(&kind, "kind", "", "sub-agent `KIND` (default: the preset)")
		fl.StringVar(&cgroup, "cgroup", "", "cgroup v2 `DIR` whose processes are the sandbox")
		fl.IntVar(&pid, "pid", 0, "root `PID` of the sandbox's process tree")
	})
	inGroup(fl, "Policy", func() {
		fl.StringVar(&preset, "preset", "", "preset `NAME` deciding this sandbox's traffic")
		pf.register(cmd, true)
	})
	groupedHelp(cmd, "Proxy", "Sandbox", "Policy")
	return cmd
}

// reloadOnHUP reloads the policy on SIGHUP, as nginx and OPA do: the
// bundle is read, verified and compiled again (the embedded one too) and
// swapped in whole, or rejected with the last good generation serving
// (Engine.Reload); nothing in flight is cut. The signal stays caught after
// ctx ends, so a SIGHUP during the shutdown drain cannot kill the proxy.
func reloadOnHUP(ctx context.Context, engine *policies.Engine, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reloading the policy")
				engine.Reload(ctx) // logs the new generation, or why it was rejected
			}
		}
	}()
}

// serveMetrics serves h on GET /metrics at addr until stop, and returns
// the address it listens on. It listens before it returns, so a taken
// port fails the command at its start instead of leaving it running
// without the metrics it was asked for.
func serveMetrics(addr string, h http.Handler) (bound net.Addr, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return ln.Addr(), func() { srv.Close() }, nil
}

// oneFamily is "4" or "6", the family of addr's IP address. A redirect
// listener is one family's: a dual-stack socket (a wildcard or a name)
// keeps an IPv4 client's conntrack entry where the IPv6 query for its
// original destination does not look, and every such connection would be
// refused.
func oneFamily(addr string) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return "", errors.New("want an IP address and port, such as 127.0.0.1:15001 or [::1]:15001, one per family")
	}
	if ip.Is4() {
		return "4", nil
	}
	return "6", nil
}
