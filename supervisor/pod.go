package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/clip"
	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/trusted"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/airlock-sandbox/airlock/proxy/identity"
	"github.com/airlock-sandbox/airlock/proxy/identity/connhook"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/supervisor/ingress"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
)

// Options are what `airlock up` hands the supervisor besides the manifest.
type Options struct {
	Logger *slog.Logger
	// Output receives the services' stdout and stderr, each line
	// prefixed with its service's name; os.Stderr when nil.
	Output io.Writer
	// StopNow, when it ends, has a boot that stopped or failed kill what
	// it started at once (a second stop signal) rather than give each
	// service its stop_grace; nil waits for the grace.
	StopNow context.Context
}

// Pod is a booted pod: its services share one network namespace whose only
// way out is the proxy, each in its own cgroup under its own preset.
type Pod struct {
	m   *manifest.Pod
	log *slog.Logger
	out io.Writer
	// stopNow ends when a stop must kill at once (Options.StopNow).
	stopNow context.Context
	events  *events.Log
	// eventsFailed counts the events the events file did not take (a
	// directory in its place, a full disk): said in the log alone, they
	// would leave the pod looking healthy with its inbox silent.
	eventsFailed atomic.Int64

	engine  *policies.Engine
	proxy   *proxy.Proxy
	network *sandbox.Network
	group   string // the pod's cgroup v2 directory
	hook    *connhook.Hook
	served  <-chan error
	// caBundle is the trust bundle of the services' clients.
	caBundle string

	services []*service // in dependency order
	byName   map[string]*service
	ingress  []*ingress.Server
	admin    *admin
	metrics  *podMetrics
	// sandboxes are the one-off sandboxes launched in the pod (oneoff.go).
	sandboxes *oneOffs

	ctx       context.Context // ends at Stop
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	ready     atomic.Bool
	proxyDown atomic.Bool
	stopping  atomic.Bool
	booted    time.Time
	bootMu    sync.Mutex
	boot      []BootStep
	// stateCh is closed and replaced at each service state change.
	stateMu sync.Mutex
	stateCh chan struct{}
	// failed is closed, with failure said, when the pod can no longer do
	// its job by itself.
	failOnce sync.Once
	failed   chan struct{}
	failure  string
	// lifeMu orders services parking against operators' restarts (park.go).
	lifeMu sync.Mutex
	// cleanup undoes boot, in reverse.
	cleanup []func()
}

// ErrStopped: the pod was told to stop (its context ended) before it was
// up.
var ErrStopped = errors.New("stopped")

// BootStep is one step of the boot and how long it took.
type BootStep struct {
	Name     string        `json:"step"`
	Duration time.Duration `json:"duration_ns"`
}

// Up boots the pod m describes, step by step, each logged with its
// duration and written as a boot_step event, and returns once every service
// is healthy (READY) or boot failed. A failed boot leaves nothing behind.
// A bundle that fails its pin is policies.ErrIntegrity.
func Up(ctx context.Context, m *manifest.Pod, o Options) (_ *Pod, err error) {
	p := &Pod{m: m, log: o.Logger, out: o.Output, stopNow: o.StopNow, byName: map[string]*service{}, booted: time.Now()}
	if p.stopNow == nil {
		p.stopNow = context.Background()
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.out == nil {
		p.out = os.Stderr
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.sandboxes = newOneOffs(p)
	p.stateCh = make(chan struct{})
	p.failed = make(chan struct{})
	// A stop during boot is the services' stop at once: a loop that would
	// launch (its dependencies just up) finds the pod stopping, rather
	// than launching until the boot notices at its next step.
	defer context.AfterFunc(ctx, p.beginStop)()
	defer func() {
		switch {
		case err != nil && ctx.Err() != nil:
			// Asked to stop while booting: a stop, not a failure. Marked
			// stopping before the stop is on record: nothing is launched
			// after it.
			p.beginStop()
			p.event("stop", events.Info, "", "stopped during boot: "+err.Error())
			p.teardown()
			err = fmt.Errorf("%w: %w", ErrStopped, err)
		case err != nil:
			p.event("boot_failed", events.Critical, "", err.Error())
			p.teardown()
		}
	}()
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"lock", func(context.Context) error { return p.lockPod() }},
		{"state", p.openState},
		{"policy", p.openPolicy},
		{"proxy", p.buildProxy},
		{"network", p.openNetwork},
		{"cgroups", p.openGroup},
		{"serve", p.serveProxy},
		{"ingress", p.openIngress},
		{"admin", p.openAdmin},
		{"services", p.startServices},
		{"health", p.awaitHealthy},
	}
	for _, s := range steps {
		// A stop signal ends the boot before the next step: a step run
		// after it (the services' launch above all: a migration job)
		// would act on a stop already asked for.
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("boot step %s: %w", s.name, err)
		}
		start := time.Now()
		if err := s.run(ctx); err != nil {
			return nil, fmt.Errorf("boot step %s: %w", s.name, err)
		}
		d := time.Since(start)
		p.bootMu.Lock()
		p.boot = append(p.boot, BootStep{Name: s.name, Duration: d})
		p.bootMu.Unlock()
		p.log.Info("boot step done", "step", s.name, "duration_ms", float64(d.Microseconds())/1000)
		p.event("boot_step", events.Info, "", fmt.Sprintf("%s done in %v", s.name, d.Round(time.Microsecond)))
	}
	// The boot's garbage (the policies' compile, above all: tens of MiB)
	// goes back to the system before READY, not at the first collection
	// of a pod that may then idle for minutes.
	debug.FreeOSMemory()
	p.ready.Store(true)
	p.event("ready", events.Info, "", fmt.Sprintf("every service is healthy, %v after boot began", time.Since(p.booted).Round(time.Millisecond)))
	notifyReady(p)
	return p, nil
}

// stateDir makes dir, 0711, or checks the one there: the pod's root
// writes its lock, events, audit log and CA there, so it must be a
// directory no other user may write (nor any above it, nor a link on the
// way: trusted.Path), not a shared one such as /tmp, and its mode is only
// ever widened to let the services' uids through to the CA bundle inside
// (a manifest naming /etc once stripped it to 0711). It is the boot's
// first step: nothing is written there before it.
func stateDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return err
		}
		if err := os.Chmod(dir, 0o711); err != nil {
			return err
		}
		fi, err = os.Stat(dir)
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("state_dir %s: not a directory (%s)", dir, fi.Mode().Type())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("state_dir %s: mode %04o lets another user write in it; give the pod a directory of its own", dir, fi.Mode().Perm())
	}
	if err := trusted.Path(dir); err != nil {
		return fmt.Errorf("state_dir: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o011 != 0o011 {
		return os.Chmod(dir, perm|0o011)
	}
	return nil
}

// openState makes the state directory and opens the events file first, so
// that every later step, a pin mismatch included, is on record. The
// directory is traversable but not listable by the services' uids: the
// files they need (the CA bundle) sit in a readable directory inside.
func (p *Pod) openState(context.Context) error {
	ev, err := events.Open(p.m.Events.File, events.Options{MaxBytes: p.m.Events.MaxBytes, Keep: p.m.Events.Keep})
	if err != nil {
		return err
	}
	p.events = ev
	p.cleanup = append(p.cleanup, func() { ev.Close() })
	return nil
}

// openPolicy verifies the bundle against its pin before anything can
// connect: a mismatch refuses to boot (ErrIntegrity, exit 10).
func (p *Pod) openPolicy(ctx context.Context) error {
	// Read while the policy compiles: the proxy's step needs them next.
	proxy.PrepareRoots()
	o, err := PolicyFrom(p.m.Policy, p.log)
	if err != nil {
		return fmt.Errorf("policy.public_key: %w", err)
	}
	o.OnReload = func(hash string, err error) {
		if err != nil {
			p.policyEvent("policy_reject", events.Warning, "the edited policy was rejected, the last good one keeps serving: "+err.Error())
			return
		}
		p.policyEvent("policy_reload", events.Info, "policy "+hash+" now decides new connections")
	}
	var names []string
	for _, s := range p.m.Services {
		names = append(names, s.Preset)
	}
	watchEnded := func(err error) {
		p.policyEvent("policy_watch_failed", events.Critical, "the policy bundle is no longer watched: edits will not reload until the pod restarts: "+err.Error())
	}
	engine, err := OpenEngine(p.ctx, PolicyOptions{Options: o, Presets: names, Watch: p.m.Policy.Watch, WatchEnded: watchEnded}, p.log)
	if errors.Is(err, policies.ErrIntegrity) {
		p.policyEvent("pin_mismatch", events.Critical, err.Error())
	}
	if err != nil {
		return err
	}
	p.engine = engine
	return nil
}

func (p *Pod) buildProxy(context.Context) error {
	x := p.m.Proxy
	px, err := proxy.Build(p.engine, proxy.Options{
		CADir: x.CADir, CACert: x.CACert, CAKey: x.CAKey, UpstreamCAs: x.UpstreamCA,
		Resolve: x.Resolve, AllowRanges: x.AllowRange, AuditLog: x.AuditLog, AuditFailOpen: x.AuditFailure == "warn",
		Limits:      x.Limits.Limits,
		DialTimeout: x.Limits.DialTimeout, Logger: p.log, AuditTee: p.sandboxes.tee,
	})
	if err != nil {
		return err
	}
	p.proxy = px
	p.cleanup = append(p.cleanup, func() { px.Close() })
	// What the services' clients trust: the system roots and the proxy's
	// CA, in a directory their uids may read.
	dir := filepath.Join(p.m.StateDir, "trust")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if p.caBundle, err = sandbox.WriteCABundle(dir, px.CACert()); err != nil {
		return err
	}
	if p.metrics, err = newPodMetrics(p); err != nil {
		return err
	}
	return px.Metrics().Register(p.metrics.collectors()...)
}

// openNetwork makes the pod's network namespace, with the proxy's listener
// already inside: from the first instant a service runs, its only way out
// is the proxy.
func (p *Pod) openNetwork(context.Context) error {
	// The services' ports: they reach each other on the pod's loopback,
	// as in a Kubernetes pod, and the supervisor's health checks and
	// ingress reach them there.
	var ports []int
	for _, s := range p.m.Services {
		ports = append(ports, s.Ports...)
	}
	n, err := sandbox.NewNetwork(sandbox.NetworkConfig{ProxyPort: p.m.Proxy.Port, LocalPorts: ports})
	if err != nil {
		return err
	}
	p.network = n
	p.cleanup = append(p.cleanup, n.Close)
	return nil
}

// PodGroupName is the name of pod name's cgroup, at the root of the
// hierarchy (a standalone launch may not take it: its leaf goes there).
func PodGroupName(name string) string { return "airlock-pod-" + name }

// openGroup makes the pod's cgroup, under which each service gets its
// leaf. A group left by a pod that was killed (SIGKILL leaves no chance to
// clean up) is killed and removed first, and so are the v1 groups of that
// name (a hybrid host's: its services' memory and pids limits), which
// would otherwise refuse every service's launch.
func (p *Pod) openGroup(context.Context) error {
	mnt, err := cgroup2.Mount()
	if err != nil {
		return fmt.Errorf("the pod needs cgroup v2: %w", err)
	}
	name := PodGroupName(p.m.Name)
	dir := filepath.Join(mnt, name)
	if _, err := os.Stat(dir); err == nil {
		p.log.Warn("removing the cgroup of a previous run of this pod", "cgroup", dir)
		if err := sandbox.RemoveTree(dir); err != nil {
			return err
		}
	}
	if found, err := sandbox.RemoveV1Tree(name); err != nil {
		return err
	} else if found {
		p.log.Warn("removed the v1 cgroups of a previous run of this pod", "cgroup", name)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("create the pod's cgroup: %w", err)
	}
	p.group = dir
	// One reaper for the whole tree, should the pod be killed: the
	// leaves of its services, probes and one-offs need none of their own
	// (SandboxOptions.ParentReaped).
	reaper, err := sandbox.StartTreeReaper(dir)
	if err != nil {
		return errors.Join(err, sandbox.RemoveTree(dir))
	}
	p.cleanup = append(p.cleanup, func() {
		_, v1err := sandbox.RemoveV1Tree(name)
		if err := errors.Join(sandbox.RemoveTree(dir), v1err); err != nil {
			p.log.Error("the pod's cgroup could not be removed", "err", err)
		}
		reaper.Release()
	})
	// The services' limits are enforced in their leaves: the controllers
	// must be enabled below the pod's group.
	if err := cgroup2.EnableControllers(dir, "memory", "pids"); err != nil {
		p.log.Debug("cgroup v2 controllers not enabled below the pod; the services' limits are enforced in cgroup v1 groups, or refused", "err", err)
	}
	for _, s := range p.m.Services {
		svc, err := newService(p, s)
		if err != nil {
			return err
		}
		p.byName[s.Name] = svc
	}
	order, err := dependencyOrder(p.m.Services)
	if err != nil {
		return err
	}
	for _, name := range order {
		p.services = append(p.services, p.byName[name])
	}
	return nil
}

// serveProxy serves the pod's listener: a connection is decided by the
// preset of the service whose cgroup the connecting process is in, and a
// process in no service's cgroup gets nothing.
func (p *Pod) serveProxy(context.Context) error {
	members := map[string]proxy.Service{}
	var presets []string
	for _, s := range p.services {
		presets = append(presets, s.spec.Preset)
		path, err := cgroup2.Path(s.leafDir())
		if err != nil {
			return err
		}
		members[path] = proxy.Service{ID: s.name, Kind: s.spec.Preset, Preset: s.spec.Preset}
	}
	p.hook = AttachHook(p.group, p.log)
	// The route and the reachability learn each one-off sandbox while it
	// runs (oneoff.go).
	p.sandboxes.serve(members, presets)
	sb := proxy.Sandbox{ID: p.m.Name, Kind: "pod", Candidates: identity.Cgroup(p.group), NetNS: p.network.NS, Route: p.sandboxes.Route,
		// The services share one DNS answerer, which cannot tell which of
		// them asks: a name any of their presets could reach resolves, and
		// the connection is decided by the asking service's own preset.
		Reachable: p.sandboxes.Reachable}
	if p.hook != nil {
		sb.Hook = p.hook
	}
	// Opened here, a failure fails the boot: the pod is not READY with a
	// way out nothing serves.
	eg, err := OpenEgress(p.proxy, p.network, sb)
	if err != nil {
		return err
	}
	p.served = eg.Go(func(err error) {
		if p.ctx.Err() != nil {
			return
		}
		// Nothing else leads out of the pod: its services have no
		// egress, and it is not ready; `airlock up` stops it and exits
		// non-zero, for its unit to restart it.
		p.proxyDown.Store(true)
		msg := fmt.Sprintf("the proxy stopped serving (%v): the services have no way out", err)
		p.event("proxy_failed", events.Critical, "", msg)
		p.fail(msg)
	})
	return nil
}

func (p *Pod) openIngress(context.Context) error {
	for _, r := range p.m.Ingress {
		keys, err := ingress.LoadKeys(r.Keys)
		if err != nil {
			return fmt.Errorf("ingress %s: %w", r.Name, err)
		}
		keysChanged := func(n int, err error) {
			if err != nil {
				p.event("ingress_keys_refused", events.Critical, r.Service, fmt.Sprintf("ingress %s: the key file changed and cannot be used; every request is refused until it is mended: %v", r.Name, err))
				return
			}
			p.event("ingress_keys_reload", events.Info, r.Service, fmt.Sprintf("ingress %s: the key file changed; %d keys now admit", r.Name, n))
		}
		srv, err := ingress.Listen(ingress.Route{Name: r.Name, Listen: r.Listen, Service: r.Service, Port: r.Port, Keys: keys},
			ingress.Options{Dial: p.network.DialFrom(sandbox.IngressSource), Audit: p.proxy.AuditWriter(), AuditFailOpen: p.m.Proxy.AuditFailure == "warn", Logger: p.log, KeysChanged: keysChanged})
		if err != nil {
			return err
		}
		p.ingress = append(p.ingress, srv)
		if host, _, _ := net.SplitHostPort(r.Listen); !loopbackHost(host) {
			// Plain HTTP: an operator's key crosses the network as
			// it is, and whoever sees it may use it.
			p.event("ingress_exposed", events.Warning, r.Service, fmt.Sprintf("ingress %s listens on %s, beyond this host's loopback, over plain HTTP: operators' keys cross the network in the clear; put a TLS terminator in front, or listen on 127.0.0.1", r.Name, r.Listen))
		}
		go func() {
			if err := srv.Serve(); err != nil {
				p.log.Error("ingress stopped", "route", r.Name, "err", err)
			}
		}()
	}
	return nil
}

func (p *Pod) openAdmin(context.Context) error {
	a, err := newAdmin(p)
	if err != nil {
		return err
	}
	p.admin = a
	return nil
}

// startServices starts every service's supervision loop; each waits for
// the services it comes after to be healthy before it launches. When every
// service is parked (given up on, or exited for good) at once the pod has
// failed (park.go).
func (p *Pod) startServices(context.Context) error {
	for _, s := range p.services {
		p.wg.Add(1)
		s.running = true
		go func() {
			defer p.wg.Done()
			s.run()
		}()
	}
	return nil
}

// awaitHealthy waits until every service is healthy at once, a job that
// ran (finished) counting as healthy; a service given up on, or exited for
// good otherwise (a failure, or before it was ever up), during boot fails
// it.
func (p *Pod) awaitHealthy(ctx context.Context) error {
	for {
		ch := p.changes()
		healthy := 0
		for _, s := range p.services {
			if s.finished() {
				healthy++
				continue
			}
			switch st := s.status(); st.State {
			case stateHealthy:
				healthy++
			case stateGivenUp, stateExited:
				return fmt.Errorf("service %s is %s: %s", s.name, st.State, st.Detail)
			}
		}
		if healthy == len(p.services) {
			return nil
		}
		// A pod failed meanwhile (its proxy stopped serving) is not
		// ready, whatever its services say.
		select {
		case <-ch:
		case <-p.failed:
			return errors.New(p.failure)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// changed wakes whoever waits on the services' states, and tells systemd.
func (p *Pod) changed() {
	p.stateMu.Lock()
	close(p.stateCh)
	p.stateCh = make(chan struct{})
	p.stateMu.Unlock()
	notifyStatus(p)
}

func (p *Pod) changes() <-chan struct{} {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	return p.stateCh
}

// Failed is closed when the pod can no longer do its job by itself: its
// proxy stopped serving, or every service has ended. Failure says why.
func (p *Pod) Failed() <-chan struct{} { return p.failed }

// Failure is why the pod failed.
func (p *Pod) Failure() string {
	<-p.failed
	return p.failure
}

func (p *Pod) fail(why string) {
	p.failOnce.Do(func() {
		p.failure = why
		close(p.failed)
	})
}

// Ready reports whether every service is healthy, or a job that ran
// (finished): as the boot counted it, lest a pod READY with a job done
// stop its watchdog's pings, and be restarted by its unit (and the job
// run again) for it.
func (p *Pod) Ready() bool {
	if !p.ready.Load() || p.proxyDown.Load() {
		return false
	}
	for _, s := range p.services {
		if !s.healthy() && !s.finished() {
			return false
		}
	}
	return true
}

// Stop stops the pod: its services (stopServices), then the ingress, the
// admin socket, the proxy, the network and the cgroups. Nothing the pod
// made is left. When ctx ends (a second stop signal) the services still
// running are killed at once.
func (p *Pod) Stop(ctx context.Context) {
	p.beginStop()
	p.event("stop", events.Info, "", "stopping the pod")
	p.ready.Store(false)
	notifyStopping()
	p.stopServices(ctx)
	p.teardown()
	p.log.Info("pod stopped", "pod", p.m.Name)
}

// beginStop marks the pod stopping, under lifeMu: an operator's restart
// is either refused (restartable) or wholly accepted before it.
func (p *Pod) beginStop() {
	p.lifeMu.Lock()
	p.stopping.Store(true)
	p.lifeMu.Unlock()
}

// stopServices stops the services in reverse dependency order, those of
// one tier at once, all within one stop_grace from now: each gets SIGTERM,
// and what is still running at the deadline is killed with its cgroup. A
// grace per service, one after another, would add up past what the
// operator (and systemd's TimeoutStopSec) allowed. The one-off sandboxes
// stop alongside, within the same deadline, and are waited for last.
func (p *Pod) stopServices(ctx context.Context) {
	p.beginStop()
	ctx, cancel := context.WithTimeout(ctx, p.m.StopGrace)
	defer cancel()
	// Not before the services: a one-off runs model-written code, and one
	// that ignores SIGTERM would spend the whole grace, every service then
	// killed without a graceful stop. Neither needs the other meanwhile
	// (a one-off cannot reach the services' ports), and none is launched
	// from now on.
	oneOffsDone := make(chan struct{})
	go func() {
		defer close(oneOffsDone)
		p.sandboxes.close(ctx)
	}()
	tiers := dependencyTiers(p.services)
	for i := len(tiers) - 1; i >= 0; i-- {
		var wg sync.WaitGroup
		for _, s := range tiers[i] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.stop(ctx)
			}()
		}
		wg.Wait()
	}
	<-oneOffsDone
}

// dependencyTiers groups services (in dependency order) by depth: a
// service is one tier above the deepest service it comes after.
func dependencyTiers(svcs []*service) [][]*service {
	depth := map[string]int{}
	var tiers [][]*service
	for _, s := range svcs {
		d := 0
		for _, dep := range s.spec.After {
			d = max(d, depth[dep]+1)
		}
		depth[s.name] = d
		for len(tiers) <= d {
			tiers = append(tiers, nil)
		}
		tiers[d] = append(tiers[d], s)
	}
	return tiers
}

// teardown undoes what boot made, in reverse, stopping the services first
// if they run.
func (p *Pod) teardown() {
	p.stopServices(p.stopNow)
	p.cancel()
	p.wg.Wait()
	for _, srv := range p.ingress {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		srv.Shutdown(ctx)
		cancel()
	}
	if p.admin != nil {
		p.admin.close()
	}
	if p.served != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		p.proxy.Shutdown(ctx)
		cancel()
		<-p.served
	}
	if p.hook != nil {
		p.hook.Close()
	}
	for i := len(p.cleanup) - 1; i >= 0; i-- {
		p.cleanup[i]()
	}
	p.cleanup = nil
}

// event records a lifecycle change: one line in the events file, and the
// same in the log.
func (p *Pod) event(kind string, sev events.Severity, service, detail string) {
	p.emit(events.Event{Source: "supervisor", Kind: kind, Severity: sev, Service: service, Detail: detail})
}

// policyEvent is an event of the policy's: its pin, its reloads.
func (p *Pod) policyEvent(kind string, sev events.Severity, detail string) {
	p.emit(events.Event{Source: "policy", Kind: kind, Severity: sev, Detail: detail})
}

// maxDetail bounds an event's detail: a service writes much of what goes
// there (its health answer's status line, its last output), and a line
// of megabytes would rotate the earlier events out of the log, and past
// what a reader's line buffer holds.
const maxDetail = 4 << 10

// emit records e, whose source its caller knows.
func (p *Pod) emit(e events.Event) {
	e.Detail = clip.String(e.Detail, maxDetail)
	level := slog.LevelInfo
	switch e.Severity {
	case events.Warning:
		level = slog.LevelWarn
	case events.Critical:
		level = slog.LevelError
	}
	p.log.Log(context.Background(), level, e.Detail, "event", e.Kind, "service", e.Service, "recovered", e.Recovered)
	if p.events == nil {
		return
	}
	if err := p.events.Append(e); err != nil {
		p.eventsFailed.Add(1)
		p.log.Error("event not recorded", "err", err)
	}
}

// loopbackHost says whether host (an ingress's listen host) is a loopback
// address or localhost.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
