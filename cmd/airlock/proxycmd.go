package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/airlock-sandbox/airlock/proxy/certs"
	"github.com/airlock-sandbox/airlock/proxy/egress"
	"github.com/airlock-sandbox/airlock/proxy/identity"
	"github.com/airlock-sandbox/airlock/proxy/identity/connhook"
	"github.com/spf13/cobra"
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

func (f *proxyFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.caDir, "ca-dir", defaultCADir(), "directory of the airlock CA (ca.pem, ca-key.pem); generated on first start")
	fl.StringVar(&f.caCert, "ca-cert", "", "operator-supplied CA certificate (with --ca-key) instead of --ca-dir")
	fl.StringVar(&f.caKey, "ca-key", "", "operator-supplied CA key (mode 0600)")
	fl.StringArrayVar(&f.upstreamCAs, "upstream-ca", nil, "extra PEM CA file trusted for upstream TLS, besides the system roots (repeatable)")
	fl.StringArrayVar(&f.resolve, "resolve", nil, "pin HOST:PORT:ADDR[,ADDR] like curl (addresses are still SSRF-checked; repeatable)")
	fl.StringArrayVar(&f.allowRanges, "allow-range", nil, "UNSAFE: allow upstream addresses in this CIDR despite the SSRF guard (repeatable)")
	fl.StringVar(&f.auditLog, "audit-log", "-", "audit log file (JSON decision and close lines), - for stdout, stderr for stderr")
	f.auditFailure = "closed"
	fl.Var(&f.auditFailure, "audit-failure", "when a decision cannot be written to the audit log: closed (refuse it, 503 audit_unavailable) or warn (UNSAFE: serve it, log the failure)")
	fl.StringVar(&f.metrics, "metrics", "", "serve Prometheus /metrics on this address")
	fl.BoolVar(&f.watch, "policy-watch", true, "reload the policy bundle directory when it changes")
	d := proxy.DefaultLimits
	fl.IntVar(&f.limits.MaxConns, "max-conns", d.MaxConns, "connections one sandbox may hold through the proxy; more are answered 503 connection_limit")
	fl.IntVar(&f.limits.MaxHeaderBytes, "max-header-bytes", d.MaxHeaderBytes, "largest request header, plain or inside an inspected tunnel")
	fl.DurationVar(&f.limits.ReadHeaderTimeout, "read-header-timeout", d.ReadHeaderTimeout, "time a client has to send a whole request header")
	fl.DurationVar(&f.limits.IdleTimeout, "idle-timeout", d.IdleTimeout, "keep-alive connections, plain or inspected, waiting this long for a request are closed")
	fl.DurationVar(&f.limits.HandshakeTimeout, "handshake-timeout", d.HandshakeTimeout, "TLS handshakes with clients (inspected tunnels) and upstreams")
	fl.DurationVar(&f.limits.TunnelIdleTimeout, "tunnel-idle-timeout", d.TunnelIdleTimeout, "opaque tunnels and WebSockets moving no data either way this long are closed")
	fl.DurationVar(&f.limits.WriteTimeout, "write-timeout", d.WriteTimeout, "a client (plain or inspected) that accepts none of a response this long is cut")
	fl.DurationVar(&f.limits.UpstreamHeaderTimeout, "upstream-header-timeout", d.UpstreamHeaderTimeout, "time an upstream has to start its answer once a request is sent")
	fl.DurationVar(&f.dialTimeout, "dial-timeout", egress.DefaultDialTimeout, "upstream TCP connect")
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

// checkLimits refuses limits that would disable a guard: a zero or negative
// value is a mistake, not a way to turn the limit off.
func (f *proxyFlags) checkLimits() error {
	l := f.limits
	for name, v := range map[string]int64{
		"max-conns": int64(l.MaxConns), "max-header-bytes": int64(l.MaxHeaderBytes),
		"read-header-timeout": int64(l.ReadHeaderTimeout), "idle-timeout": int64(l.IdleTimeout),
		"handshake-timeout": int64(l.HandshakeTimeout), "tunnel-idle-timeout": int64(l.TunnelIdleTimeout),
		"write-timeout": int64(l.WriteTimeout), "upstream-header-timeout": int64(l.UpstreamHeaderTimeout),
		"dial-timeout": int64(f.dialTimeout),
	} {
		if v <= 0 {
			return fmt.Errorf("--%s must be positive", name)
		}
	}
	return nil
}

func defaultCADir() string {
	if d := os.Getenv("STATE_DIRECTORY"); d != "" { // systemd StateDirectory=
		return filepath.Join(d, "ca")
	}
	if os.Geteuid() == 0 {
		return "/var/lib/airlock/ca"
	}
	if d, err := os.UserConfigDir(); err == nil {
		return filepath.Join(d, "airlock", "ca")
	}
	return ".airlock-ca"
}

// build assembles a proxy from the flags. The returned closer flushes the
// audit log.
func (f *proxyFlags) build(decider *policies.Engine, log *slog.Logger) (*proxy.Proxy, *proxy.Metrics, func(), error) {
	if err := f.checkLimits(); err != nil {
		return nil, nil, nil, &exitError{ExitUsage, err}
	}
	var ca *certs.CA
	var err error
	switch {
	case f.caCert != "" || f.caKey != "":
		if f.caCert == "" || f.caKey == "" {
			return nil, nil, nil, errors.New("--ca-cert and --ca-key go together")
		}
		ca, err = certs.Load(f.caCert, f.caKey, 4096)
	default:
		ca, err = certs.LoadOrCreate(f.caDir, 4096)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("system roots: %w", err)
	}
	for _, file := range f.upstreamCAs {
		pem, err := os.ReadFile(file)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--upstream-ca: %w", err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, nil, nil, fmt.Errorf("--upstream-ca %s: no PEM certificates", file)
		}
	}
	var allow []netip.Prefix
	for _, r := range f.allowRanges {
		p, err := egress.ParseAllowRange(r)
		if err != nil {
			return nil, nil, nil, err
		}
		log.Warn("UNSAFE: SSRF guard relaxed by --allow-range", "range", p.String())
		allow = append(allow, p)
	}
	guard, err := egress.New(egress.Options{AllowRanges: allow, Resolve: f.resolve, Self: hostAddrs(), DialTimeout: f.dialTimeout})
	if err != nil {
		return nil, nil, nil, err
	}
	audit, closeAudit, err := openAudit(f.auditLog)
	if err != nil {
		return nil, nil, nil, err
	}
	failOpen := f.auditFailure == "warn"
	if failOpen {
		log.Warn("UNSAFE: --audit-failure=warn: a decision the audit log cannot take is served anyway, with only an error logged")
	}
	m := proxy.NewMetrics(ca)
	p, err := proxy.New(proxy.Config{Decider: decider, CA: ca, Guard: guard, UpstreamRoots: roots, Audit: audit, AuditFailOpen: failOpen,
		Metrics: m, Limits: f.limits, Logger: log})
	if err != nil {
		closeAudit()
		return nil, nil, nil, err
	}
	return p, m, closeAudit, nil
}

// openAudit opens the audit log. A write to a closed stdout or stderr pipe
// (--audit-log -, stderr) is made an EPIPE error like any other, on which
// the proxy refuses what it cannot record, instead of the death by SIGPIPE
// Go gives a program that does not ask for the signal. The signal is asked
// for, never ignored: an ignored SIGPIPE would be inherited by the command
// `airlock launch` runs, and a handled one is reset by its execve.
func openAudit(path string) (io.Writer, func(), error) {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	switch path {
	case "-", "":
		return os.Stdout, func() {}, nil
	case "stderr":
		return os.Stderr, func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("--audit-log: %w", err)
	}
	return f, func() { f.Close() }, nil
}

// hostAddrs are the proxy host's own interface addresses, which the SSRF
// guard refuses (loopback and private ones are refused anyway).
func hostAddrs() []netip.Addr {
	var out []netip.Addr
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}

func newProxyCmd() *cobra.Command {
	var pf policyFlags
	var xf proxyFlags
	var listen, preset, sandboxID, kind, cgroup string
	var pid int
	cmd := &cobra.Command{
		Use:   "proxy --listen ADDR --preset NAME",
		Short: "Run the L7 egress proxy for one sandbox (standalone form)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			log := slog.Default()
			if preset == "" {
				return &exitError{ExitUsage, errors.New("--preset is required")}
			}
			engine, err := servingEngine(ctx, &pf, &xf, preset, log)
			if err != nil {
				return err
			}
			// A daemon's SIGHUP: reload. (`airlock launch` passes its
			// SIGHUP, a terminal's hangup, to the sandbox instead.)
			reloadOnHUP(ctx, engine, log)
			p, m, closeAudit, err := xf.build(engine, log)
			if err != nil {
				return err
			}
			defer closeAudit()
			var cands identity.Candidates = identity.AllProcesses{}
			var hook identity.ConnHook
			switch {
			case cgroup != "":
				cands = identity.Cgroup(cgroup)
				var closeHook func()
				hook, closeHook = attachHook(cgroup, log)
				defer closeHook()
			case pid != 0:
				cands = identity.Tree(pid)
			default:
				log.Warn("no --cgroup or --pid: connections are attributed by scanning every process on the host")
			}
			// Clients are local processes: keepalive probes would find
			// nothing the kernel does not report, and cost four
			// setsockopt calls on every accept.
			ln, err := (&net.ListenConfig{KeepAlive: -1}).Listen(ctx, "tcp", listen)
			if err != nil {
				return err
			}
			if xf.metrics != "" {
				go serveMetrics(ctx, xf.metrics, m.Handler(), log)
			}
			if sandboxID == "" {
				sandboxID = preset
			}
			if kind == "" {
				kind = preset
			}
			errc := make(chan error, 1)
			go func() {
				errc <- p.Serve(ln, proxy.Sandbox{ID: sandboxID, Kind: kind, Preset: preset, Candidates: cands, NetNS: netns.None(), Hook: hook})
			}()
			fmt.Fprintf(cmd.ErrOrStderr(), "airlock proxy listening on %s (preset %s, policy %s)\n", ln.Addr(), preset, engine.Hash())
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			log.Info("shutting down: draining tunnels", "grace", "10s")
			return p.Shutdown(sctx)
		},
	}
	pf.register(cmd, true)
	xf.register(cmd)
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:3128", "address to listen on")
	cmd.Flags().StringVar(&preset, "preset", "", "preset deciding this sandbox's traffic")
	cmd.Flags().StringVar(&sandboxID, "sandbox-id", "", "sandbox id in decisions and audit lines (default: the preset)")
	cmd.Flags().StringVar(&kind, "kind", "", "sub-agent kind (default: the preset)")
	cmd.Flags().StringVar(&cgroup, "cgroup", "", "cgroup v2 directory whose processes are the sandbox")
	cmd.Flags().IntVar(&pid, "pid", 0, "root pid of the sandbox's process tree")
	return cmd
}

// servingEngine is the engine a proxy serves preset with: loaded and
// verified, the preset checked and kept through reloads, and the bundle directory watched for
// reloads. A secret the preset injects that the proxy's environment or
// files lack is reported when the generation is loaded, naming the rule,
// header and source, rather than found by the first request (which is
// still refused, secret_unavailable). It does not stop the proxy: a preset
// names every provider a kind may use (coder: Anthropic and NVIDIA), and
// an operator holding one key must still be able to run it.
func servingEngine(ctx context.Context, pf *policyFlags, xf *proxyFlags, preset string, log *slog.Logger) (*policies.Engine, error) {
	o, err := pf.options()
	if err != nil {
		return nil, err
	}
	o.Check = func(ps []policies.Preset) error {
		for _, p := range ps {
			if p.Name == preset {
				if err := proxy.CheckSecrets(proxy.EnvSecrets{}, p); err != nil {
					log.Warn("requests that need these secrets will be refused (secret_unavailable)", "err", err)
				}
			}
		}
		return nil
	}
	engine, err := policies.New(ctx, o)
	if err != nil {
		return nil, err
	}
	// Served from now on: a reload that drops it is rejected.
	if err := engine.RequirePreset(preset); err != nil {
		return nil, &exitError{ExitUsage, fmt.Errorf("--preset: %w", err)}
	}
	if pf.bundle != "" && xf.watch {
		go func() {
			if err := engine.Watch(ctx); err != nil {
				log.Error("policy watch stopped", "err", err)
			}
		}()
	}
	return engine, nil
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

// attachHook attaches the cgroup connect hook to dir. Without it (no root,
// no cgroup BPF) attribution scans the cgroup's processes: slower, the same
// decisions, and said in the log.
func attachHook(dir string, log *slog.Logger) (identity.ConnHook, func()) {
	h, err := connhook.Attach(dir)
	if err != nil {
		log.Warn("cgroup connect hook unavailable; each new connection scans the sandbox's processes (slower, same decisions)", "cgroup", dir, "err", err)
		return nil, func() {}
	}
	return h, func() { h.Close() }
}

func serveMetrics(ctx context.Context, addr string, h http.Handler, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("metrics server", "addr", addr, "err", err)
	}
}
