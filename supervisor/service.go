package supervisor

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
	"golang.org/x/sys/unix"
)

// Service states, as status and /readyz show them.
const (
	statePending   = "pending"   // waiting for the services it comes after
	stateStarting  = "starting"  // launched, not yet healthy
	stateHealthy   = "healthy"   // passing its health check (or running, without one)
	stateUnhealthy = "unhealthy" // failing its health check, about to be restarted
	stateBackoff   = "backoff"   // exited, waiting to be restarted
	stateExited    = "exited"    // exited and not to be restarted (policy)
	stateGivenUp   = "given_up"  // crash loop: no more restarts
	stateStopped   = "stopped"   // stopped with the pod
)

// service supervises one service of the pod: launch, health, restart.
type service struct {
	pod  *Pod
	spec manifest.Service
	name string
	cfg  sandbox.Config
	env  sandbox.EnvOptions

	backoff backoff
	loop    crashLoop
	check   checker
	out     *lineWriter

	restartReq chan struct{}
	stopReq    chan struct{}
	stopCtx    context.Context // the pod's stop deadline, set before stopReq closes
	running    bool            // its loop was started (set by boot, before the loop runs)
	parked     bool            // given up on or exited, waiting for an operator (the pod's lifeMu)
	stopOnce   sync.Once
	done       chan struct{}

	// launching is every launch's context: ended by a stop whose
	// deadline passed while a launch's setup hangs (abortLaunch).
	launching   context.Context
	abortLaunch context.CancelCauseFunc

	mu         sync.Mutex
	state      string
	since      time.Time
	pid        int
	restarts   int
	lastExit   *int
	detail     string
	healthFail int
	// The evidence of the last instance that exited, for a watchdog
	// polling now and then: how many have exited since boot, its OOM
	// kills, its last lines.
	exits      int
	launches   int
	oomKills   int64
	lastOutput []string
	// exitedClean: its last instance exited cleanly (exit 0, not stopped
	// for failing its health check); read with the state exited (finished).
	exitedClean bool
	// What its launches use, an operator's restart may change them: the
	// V8 heap limit in NODE_OPTIONS (0: as the manifest says) and the
	// memory limit.
	heapMB    int
	memoryMax int64
	up        chan struct{} // closed at the first healthy state
	upOnce    sync.Once
}

func newService(p *Pod, s manifest.Service) (*service, error) {
	svc := &service{
		pod: p, spec: s, name: s.Name,
		restartReq: make(chan struct{}, 1), stopReq: make(chan struct{}), done: make(chan struct{}),
		up:    make(chan struct{}),
		state: statePending, since: time.Now(), memoryMax: s.MemoryMax,
	}
	svc.launching, svc.abortLaunch = context.WithCancelCause(p.ctx)
	r := s.Restart
	svc.backoff = backoff{initial: r.Initial, max: r.Max, mult: r.Multiplier, jitter: r.Jitter}
	svc.loop = crashLoop{max: r.GiveUpAfter, window: r.GiveUpWindow}
	c := sandbox.Defaults()
	uid, gid, err := sandbox.ParseUser(s.User)
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", s.Name, err)
	}
	c.UID, c.GID, c.KeepCaps, c.Dir = uid, gid, s.KeepCaps, s.Dir
	// Said, as airlock launch says it.
	for _, w := range sandbox.HostIdentity(uid, gid) {
		p.event("host_account", events.Warning, s.Name, "the service's "+w+"; choose an unused uid and gid in user:")
	}
	c.Command = append([]string(nil), s.Command...)
	if !filepath.IsAbs(c.Command[0]) {
		path, err := exec.LookPath(c.Command[0])
		if err != nil {
			return nil, fmt.Errorf("service %s: command: %w", s.Name, err)
		}
		c.Command[0] = path
	}
	c.Net, c.ProxyPort = sandbox.NetProxy, p.m.Proxy.Port
	// Its peers' ports on the pod's loopback: services reach each other
	// as in a Kubernetes pod, and nothing else but the proxy.
	for _, other := range p.m.Services {
		c.ConnectPorts = append(c.ConnectPorts, other.Ports...)
	}
	// The namespace is every service's: each binds only its own ports.
	c.SharedNetwork, c.BindPorts = true, s.Ports
	c.RO = append(c.RO, s.Landlock.RO...)
	c.RW = append(c.RW, s.Landlock.RW...)
	c.Exec = append(c.Exec, s.Landlock.Exec...)
	if s.Landlock.Mode != "" {
		c.Landlock = sandbox.LandlockMode(s.Landlock.Mode)
	}
	svc.out = &lineWriter{prefix: s.Name, w: p.out, escape: isTerminal(p.out)}
	c.Stdout, c.Stderr = svc.out, svc.out
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("service %s: %w", s.Name, err)
	}
	svc.cfg = c
	svc.env = sandbox.EnvOptions{}
	for k, v := range s.Env {
		svc.env.Set = append(svc.env.Set, k+"="+v)
	}
	secrets, err := readSecrets(s.Secrets)
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", s.Name, err)
	}
	svc.env.Set = append(svc.env.Set, secrets...)
	sort.Strings(svc.env.Set)
	if s.Health != nil {
		svc.check = newChecker(p, svc, s.Health)
	}
	return svc, nil
}

// leafDir is the service's cgroup, made anew at each launch.
func (s *service) leafDir() string {
	return filepath.Join(s.pod.group, sandbox.LeafName(s.leafID()))
}

func (s *service) leafID() string { return s.pod.m.Name + "-" + s.name }

// enter writes what happened (record's events), then moves the service
// to state: whoever acts on the state (the boot's wait, which then writes
// READY or boot_failed; the status API; /readyz) finds those events on
// record before its own.
func (s *service) enter(state, detail string, record func()) {
	record()
	s.setState(state, detail)
}

func (s *service) setState(state, detail string) {
	s.mu.Lock()
	s.state, s.since, s.detail = state, time.Now(), detail
	if state == stateStarting {
		s.launches++
	}
	s.mu.Unlock()
	s.pod.metrics.setState(s.name, state)
	s.pod.changed()
	if state == stateHealthy {
		s.upOnce.Do(func() { close(s.up) })
	}
}

func (s *service) healthy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == stateHealthy
}

// run is the service's supervision loop: wait for its dependencies, then
// launch, watch, and restart per its policy until the pod stops. A service
// given up on, or exited for good, parks until an operator restarts it.
func (s *service) run() {
	defer close(s.done)
	if !s.awaitDependencies() {
		s.setState(stateStopped, "stopped before it started")
		return
	}
	for launched := false; ; launched = true {
		// Nothing is launched once the pod stops, whichever of a
		// restart and the stop a select woke for; an instance that
		// ended meanwhile is not restarted either (the pod is stopping
		// before any service's stop is asked for).
		if s.pod.stopping.Load() {
			s.setState(stateStopped, "stopped with the pod")
			return
		}
		// A restart waits for the services it comes after, as the first
		// launch did: launched while one is down, an instance that
		// cannot work without it would crash again and again, and be
		// given up on for an outage of its dependency's.
		if launched && !s.awaitDependencies() {
			s.setState(stateStopped, "stopped with the pod")
			return
		}
		// Again after that wait: a dependency coming up as the stop began
		// (before the stop reached this service: a later tier's) ends it
		// too, and an instance launched now would start during the stop.
		if launched && s.pod.stopping.Load() {
			s.setState(stateStopped, "stopped with the pod")
			return
		}
		why, failed := s.once()
		if s.pod.stopping.Load() {
			s.setState(stateStopped, "stopped with the pod")
			return
		}
		switch {
		case why == "restart":
			// An operator's restart: at once, and not a crash. Its
			// state says so before the count moves: a status read
			// meanwhile showing the count moved and "healthy" would
			// be the old instance's, gone.
			s.setState(stateBackoff, "restarting at an operator's request: "+s.detailNow())
		case s.spec.Restart.Policy == "never", s.spec.Restart.Policy == "on-failure" && !failed:
			sev := events.Info
			if failed {
				sev = events.Warning
			}
			s.mu.Lock()
			s.exitedClean = !failed
			s.mu.Unlock()
			s.enter(stateExited, s.detailNow(), func() {
				s.pod.event("exited", sev, s.name, "not restarted (restart policy "+s.spec.Restart.Policy+"): "+s.detailNow())
			})
			if !s.park() {
				s.setState(stateStopped, "stopped with the pod")
				return
			}
		default:
			if s.loop.restart(time.Now()) {
				msg := fmt.Sprintf("crash loop: more than %d restarts within %v; giving up (last: %s)", s.loop.max, s.loop.window, s.detailNow())
				s.enter(stateGivenUp, msg, func() {
					s.pod.event("give_up", events.Critical, s.name, msg)
					s.tellDependents("dependency_failed", events.Critical, s.name+" was given up on; this service keeps running but may fail")
				})
				if !s.park() {
					s.setState(stateStopped, "stopped with the pod")
					return
				}
				// Revived: its crash loop and backoff start over.
				s.loop.reset()
				s.backoff.reset()
				break
			}
			d := s.backoff.delay()
			s.setState(stateBackoff, fmt.Sprintf("restarting in %v: %s", d.Round(time.Millisecond), s.detailNow()))
			select {
			case <-time.After(d):
			case <-s.restartReq:
			case <-s.stopReq:
				s.setState(stateStopped, "stopped with the pod")
				return
			}
		}
		s.mu.Lock()
		s.restarts++
		s.mu.Unlock()
		s.pod.metrics.restarted(s.name)
		s.pod.event("restart", events.Warning, s.name, fmt.Sprintf("restart %d: %s", s.restarts, s.detailNow()))
		s.tellDependents("dependency_restarted", events.Info, s.name+" restarted; dependents are left running")
	}
}

// awaitDependencies waits until every service this one comes after is
// ready at once (ready); false when the pod stops first. When one is
// given up on, this one is too, and parks: an operator's restart has it
// wait for its dependencies to come up (an operator reviving them)
// instead.
func (s *service) awaitDependencies() bool {
	revived := false
	for {
		ch := s.pod.changes()
		waiting, gone := "", ""
		for _, dep := range s.spec.After {
			d := s.pod.byName[dep]
			// Given up on now: one revived since is waited for.
			if !revived && d.status().State == stateGivenUp {
				gone = dep
				break
			}
			if waiting == "" && !ready(d) {
				waiting = dep
			}
		}
		switch {
		case gone != "":
			s.enter(stateGivenUp, "the service it comes after, "+gone+", was given up on", func() {
				s.pod.event("dependency_failed", events.Critical, s.name, "not started: "+gone+" was given up on")
			})
			if !s.park() {
				return false
			}
			revived = true
			s.setState(statePending, "restarted by an operator: waiting for "+gone+" to be up")
			continue
		case waiting == "":
			return true
		}
		if st := s.status(); st.State != statePending {
			s.setState(statePending, "waiting for "+waiting+", which it comes after, to be up: "+st.Detail)
		}
		select {
		case <-ch:
		case <-s.stopReq:
			return false
		}
	}
}

// ready says whether d lets a service that comes after it start: healthy
// now, or, once up, exited for good by its policy (a job that ran). Up
// once is not enough: one that crashed since, and waits to be restarted,
// is not there for its dependents.
func ready(d *service) bool {
	if !isClosed(d.up) {
		return false
	}
	switch d.status().State {
	case stateHealthy, stateExited:
		return true
	}
	return false
}

// finished says whether s is a job that ran: up, then exited for good
// (its policy) cleanly. The boot and readiness count it as healthy: a
// pod with a migration job is READY once the job has run, not failed for
// it. A job that failed is not finished: it fails the boot.
func (s *service) finished() bool {
	if !isClosed(s.up) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == stateExited && s.exitedClean
}

// isClosed says whether ch is closed (it is never sent on).
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// once launches the service and watches it until it exits, fails its
// health check (then it is stopped), an operator restarts it, or the pod
// stops. failed tells a crash from a clean exit.
func (s *service) once() (why string, failed bool) {
	s.setState(stateStarting, "")
	s.out.reset()
	env, memoryMax := s.launchEnv(), s.memoryLimit()
	sb, err := Launch(s.launching, SandboxOptions{
		ID: s.leafID(), Config: s.cfg, Env: env, CgroupParent: s.pod.group, ParentReaped: true,
		MemoryMax: memoryMax, PidsMax: s.spec.PidsMax, Network: s.pod.network, CABundle: s.pod.caBundle, Logger: s.pod.log,
	})
	if err != nil {
		s.setDetail("launch failed: " + err.Error())
		s.pod.event("launch_failed", events.Critical, s.name, err.Error())
		return "launch", true
	}
	s.mu.Lock()
	s.pid = sb.Pid()
	s.mu.Unlock()
	s.pod.event("started", events.Info, s.name, fmt.Sprintf("pid %d", sb.Pid()))
	unhealthy := make(chan string, 1)
	hctx, hcancel := context.WithCancel(s.pod.ctx)
	// The probe goroutine is joined before the next instance: a late
	// success must not mark the next one healthy or reset its backoff.
	hdone := make(chan struct{})
	// The OOM watch, too, is joined before Wait removes the groups; what
	// it reported is not reported again at the exit.
	oomReported := make(chan int64, 1)
	go func() { oomReported <- s.watchOOM(hctx, sb, memoryMax) }()
	if s.check != nil {
		go func() { defer close(hdone); s.watchHealth(hctx, sb, unhealthy) }()
	} else {
		close(hdone)
		s.setState(stateHealthy, "running (no health check)")
	}
	var stopWhy string
	select {
	case <-sb.Done():
	case msg := <-unhealthy:
		stopWhy = "unhealthy"
		s.enter(stateUnhealthy, msg, func() {
			s.pod.event("health", events.Critical, s.name, "unhealthy, restarting: "+msg)
		})
		s.shutdownToRestart(sb)
	case <-s.restartReq:
		stopWhy = "restart" // restart wrote its restart_requested event
		s.shutdownToRestart(sb)
	case <-s.stopReq:
		stopWhy = "stop"
		s.shutdown(s.stopCtx, sb) // the pod's one deadline
	}
	hcancel()
	<-hdone
	reported := <-oomReported
	out, werr := sb.Wait()
	s.out.flush()
	s.mu.Lock()
	code := out.ExitCode
	s.lastExit, s.pid = &code, 0
	s.exits++
	s.oomKills, s.lastOutput = out.OOMKills, s.out.lastLines()
	s.mu.Unlock()
	detail := exitDetail(code)
	if stopWhy != "" {
		detail = "stopped by the supervisor (" + stopWhy + "): " + detail
	}
	if werr != nil {
		detail = "wait: " + werr.Error()
	}
	if out.OOMKills > 0 {
		detail += "; " + oomDetail(out.OOMKills, memoryMax)
	}
	if out.OOMKills > reported {
		s.pod.event("oom_kill", events.Critical, s.name, detail)
	}
	if out.CleanupErr != nil {
		s.pod.event("cleanup_failed", events.Critical, s.name, out.CleanupErr.Error())
	}
	if stopWhy == "" || stopWhy == "unhealthy" {
		sev := events.Warning
		if code == 0 && stopWhy == "" {
			sev = events.Info
		}
		s.pod.event("exit", sev, s.name, detail)
	}
	s.setDetail(detail)
	// An instance that ran longer than the longest backoff was a good
	// one: the next crash starts the backoff over (a service with a
	// health check starts it over once healthy).
	if out.Duration >= s.backoff.max {
		s.backoff.reset()
	}
	if stopWhy == "unhealthy" {
		return stopWhy, true
	}
	return stopWhy, code != 0
}

// oomPoll is how often a running instance's groups are read for OOM kills.
// Polling, not a change notification on memory.events: on a hybrid
// hierarchy the memory limit is a v1 group, whose memory.oom_control
// notifies no one that inotify can see; Leaf.OOMKills reads both.
const oomPoll = 500 * time.Millisecond

// watchOOM writes an oom_kill event whenever the OOM killer has killed more
// of the running instance's processes: a child past memory_max dies while
// the service keeps running, and its exit would never say so. It returns
// the count it reported, once the instance has exited or ctx ended.
func (s *service) watchOOM(ctx context.Context, sb *Sandbox, memoryMax int64) int64 {
	var reported int64
	t := time.NewTicker(oomPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return reported
		case <-sb.Done():
			return reported
		case <-t.C:
		}
		if n := sb.OOMKills(); n > reported {
			s.pod.event("oom_kill", events.Critical, s.name, oomDetail(n-reported, memoryMax))
			reported = n
		}
	}
}

// oomDetail says who killed n of the service's processes, and why: an
// instance launched with memoryMax (0: none).
func oomDetail(n, memoryMax int64) string {
	if memoryMax > 0 {
		return fmt.Sprintf("the OOM killer killed %d process(es) of the service at its memory_max (%d bytes)", n, memoryMax)
	}
	return fmt.Sprintf("the OOM killer killed %d process(es) of the service: the host ran out of memory (the service has no memory_max)", n)
}

// shutdownToRestart stops the instance for the service to start another.
// Should the pod's stop begin meanwhile, its deadline (stop_grace, or a
// second stop signal) ends this shutdown too, killing what the pod's stop
// would: without it, a service that ignores SIGTERM held the pod's stop,
// a second signal included, for a whole stop_grace of its own.
func (s *service) shutdownToRestart(sb *Sandbox) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stopReq:
			select {
			case <-s.stopCtx.Done(): // set before stopReq closed
				cancel()
			case <-ctx.Done():
			}
		case <-ctx.Done():
		}
	}()
	s.shutdown(ctx, sb)
}

// shutdown stops a running instance: SIGTERM, then, after the manifest's
// grace period or when ctx ends, SIGKILL of its whole cgroup.
func (s *service) shutdown(ctx context.Context, sb *Sandbox) {
	ctx, cancel := context.WithTimeout(ctx, s.pod.m.StopGrace)
	defer cancel()
	if err := sb.Shutdown(ctx); err != nil {
		s.pod.log.Error("stop service", "service", s.name, "err", err)
	}
}

// startupProbe is how often a service is probed until its first success:
// boot (and a crash's recovery) waits on that success, and a backoff
// schedule here was measured to cost ~50 ms per service waiting for the
// next probe of a service already up.
const startupProbe = 20 * time.Millisecond

// execStartupProbe is startupProbe for an exec probe, each of which
// launches a sandbox.
const execStartupProbe = 100 * time.Millisecond

// watchHealth probes the running instance: every startupProbe until its
// first success, then every interval. threshold consecutive failures past
// the start period make it unhealthy.
func (s *service) watchHealth(ctx context.Context, sb *Sandbox, unhealthy chan<- string) {
	h := s.spec.Health
	started := time.Now()
	fails := 0
	wasHealthy := false
	lastCounted := started
	delay := min(startupProbe, h.Interval)
	if h.Exec != nil {
		// Each exec probe is a sandbox launch: not back to back.
		delay = min(execStartupProbe, h.Interval)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-sb.Done():
			return
		case <-time.After(delay):
		}
		start := time.Now()
		err := s.check(ctx)
		s.pod.metrics.observeHealth(s.name, time.Since(start), err == nil)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			fails = 0
			if !wasHealthy {
				wasHealthy = true
				s.backoff.reset()
				s.mu.Lock()
				replacement := s.restarts > 0
				s.mu.Unlock()
				s.enter(stateHealthy, "", func() {
					s.pod.emit(events.Event{Source: "supervisor", Kind: "health", Severity: events.Info, Service: s.name, Detail: "healthy", Recovered: replacement})
				})
			}
			delay = h.Interval
			continue
		}
		if !wasHealthy {
			// Not up yet: count at most one failure per interval, so
			// that a service has threshold intervals (after its start
			// period) to come up, however often it is probed meanwhile.
			if time.Since(started) < h.StartPeriod || time.Since(lastCounted) < h.Interval {
				continue
			}
			lastCounted = time.Now()
		}
		fails++
		s.setDetail("health check failed: " + err.Error())
		if fails >= h.Threshold {
			unhealthy <- fmt.Sprintf("%d consecutive health checks failed, the last: %v", fails, err)
			return
		}
	}
}

// tellDependents writes an event for each service that comes after this
// one. They are not restarted: a dependency's restart is not theirs.
// Only a dependent that runs is told: one not started yet learns it
// itself (awaitDependencies), and "left running" is not said of it.
func (s *service) tellDependents(kind string, sev events.Severity, detail string) {
	for _, other := range s.pod.services {
		switch other.status().State {
		case statePending, stateGivenUp, stateExited, stateStopped:
			continue
		}
		for _, dep := range other.spec.After {
			if dep == s.name {
				s.pod.event(kind, sev, other.name, detail)
			}
		}
	}
}

// stop ends the loop, stopping the running instance (SIGTERM, then, when
// ctx ends, SIGKILL of its cgroup); it returns once the service has
// exited. A service whose loop never started (boot failed before) has
// nothing to wait for.
func (s *service) stop(ctx context.Context) {
	s.stopOnce.Do(func() {
		s.stopCtx = ctx // read by the loop once stopReq is closed
		close(s.stopReq)
	})
	if s.running {
		select {
		case <-s.done:
		case <-ctx.Done():
			// The loop may be held in a launch whose setup hangs (a
			// path given on a hung FUSE or NFS mount): the stop's
			// deadline ends that as it kills a running instance.
			s.abortLaunch(errStoppedInSetup)
			<-s.done
		}
	}
}

func (s *service) setDetail(d string) {
	s.mu.Lock()
	s.detail = d
	s.mu.Unlock()
}

func (s *service) detailNow() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.detail
}

func exitDetail(code int) string {
	if code > 128 && code < 128+65 {
		if name := unix.SignalName(syscall.Signal(code - 128)); name != "" {
			return fmt.Sprintf("killed by %s (exit %d)", name, code)
		}
	}
	return fmt.Sprintf("exit code %d", code)
}

// dependencyOrder orders services so that each comes after those it names
// in after: (the manifest has refused cycles and unknown names).
func dependencyOrder(svcs []manifest.Service) ([]string, error) {
	byName := map[string]manifest.Service{}
	for _, s := range svcs {
		byName[s.Name] = s
	}
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name string, path []string) error
	visit = func(name string, path []string) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("services depend on each other in a cycle: %s", strings.Join(append(path, name), " → "))
		case 2:
			return nil
		}
		state[name] = 1
		for _, dep := range byName[name].After {
			if _, ok := byName[dep]; !ok {
				return fmt.Errorf("service %s comes after %q, which is no service", name, dep)
			}
			if err := visit(dep, append(path, name)); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, name)
		return nil
	}
	for _, s := range svcs {
		if err := visit(s.Name, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}
