package supervisor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/adminclient"
	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/trusted"
	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/airlock-sandbox/airlock/proxy/identity"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// A one-off sandbox runs one command in the pod, beside its services: in
// the pod's network namespace, in its own leaf under the pod's cgroup, its
// connections decided by the pod's proxy with the preset its launcher
// named (a sub-agent's kind's), and its audit lines copied to its
// launcher's file. It is not restarted; it ends when its command exits,
// when it is stopped, when its launcher's connection closes, or with the
// pod.

// oneOffs are the pod's one-off sandboxes, and the pod's route and DNS
// reachability, which learn each one's leaf and preset while it runs.
type oneOffs struct {
	pod *Pod
	// services are the services' leaves and presets, fixed at boot.
	services map[string]proxy.Service
	presets  []string

	mu     sync.RWMutex
	closed bool // the pod is stopping: no more launches
	byID   map[string]*oneOff
	wg     sync.WaitGroup

	route atomic.Pointer[func(*identity.Process) (proxy.Service, error)]
	reach atomic.Pointer[func(string) bool]
}

// oneOff is one running one-off sandbox.
type oneOff struct {
	spec  adminclient.SandboxSpec
	cg    string // its leaf, as the route keys it
	sb    *Sandbox
	files []*os.File // stdout, stderr, audit, and the directories they were made in
	audit *os.File

	// launched is closed once sb is set, or its launch failed (sb nil):
	// a stop (the pod's, an operator's) may find it in between, and ends
	// the launch (abort) if it outlasts the stop's grace.
	launched chan struct{}
	abort    context.CancelCauseFunc
	done     chan struct{} // closed once it has ended and is forgotten
	exit     adminclient.SandboxExit
}

func newOneOffs(p *Pod) *oneOffs {
	return &oneOffs{pod: p, byID: map[string]*oneOff{}}
}

// serve fixes the services' routes and publishes the first route.
func (o *oneOffs) serve(services map[string]proxy.Service, presets []string) {
	o.services, o.presets = services, presets
	o.mu.Lock()
	o.publish()
	o.mu.Unlock()
}

// publish rebuilds the route and reachability from the services and the
// one-offs running now (o.mu held).
func (o *oneOffs) publish() {
	members := make(map[string]proxy.Service, len(o.services)+len(o.byID))
	for k, v := range o.services {
		members[k] = v
	}
	presets := append([]string(nil), o.presets...)
	for _, x := range o.byID {
		members[x.cg] = proxy.Service{ID: x.spec.ID, Kind: cmp.Or(x.spec.Kind, x.spec.Preset), Preset: x.spec.Preset}
		presets = append(presets, x.spec.Preset)
	}
	// Each DNS query scans every listed preset's rules: one-offs of one
	// kind share theirs.
	slices.Sort(presets)
	presets = slices.Compact(presets)
	route := proxy.ByCgroup(members)
	reach := o.pod.engine.Reachable(presets...)
	o.route.Store(&route)
	o.reach.Store(&reach)
}

// Route places a process of the pod: in a service, or in a one-off.
func (o *oneOffs) Route(p *identity.Process) (proxy.Service, error) { return (*o.route.Load())(p) }

// Reachable is the DNS answerer's: a name any service's or running
// one-off's preset could reach resolves.
func (o *oneOffs) Reachable(host string) bool { return (*o.reach.Load())(host) }

// tee copies a decision line of a one-off to its launcher's audit file.
func (o *oneOffs) tee(id string, line []byte) error {
	// Held while writing: forget, and the file's close after it, wait.
	o.mu.RLock()
	defer o.mu.RUnlock()
	x, ok := o.byID[id]
	if !ok || x.audit == nil {
		return nil
	}
	if _, err := x.audit.Write(line); err != nil {
		return fmt.Errorf("sandbox %s's audit file %s: %w", id, x.spec.Audit, err)
	}
	return nil
}

// SandboxIDRule says what ValidSandboxID takes, for a refusal to say.
const SandboxIDRule = "letters, digits, '.', '_', '-' (at most 100, not starting with a punctuation)"

// ValidSandboxID says whether id may be a sandbox's ID (a one-off's, a
// launch's: its cgroup's name and a field of every audit line): 1 to 100 letters, digits, '.', '_',
// '-', the first a letter or digit. Checked by hand: the equivalent
// regexp's {0,99} cost every airlock command about a millisecond to
// compile at start, in every process of the binary.
func ValidSandboxID(id string) bool {
	if len(id) == 0 || len(id) > 100 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// refusal is a launch refused before anything ran: Status and the
// message naming the field.
type refusal struct {
	status int
	msg    string
}

func (r *refusal) Error() string { return r.msg }

func refuse(status int, format string, args ...any) error {
	return &refusal{status, fmt.Sprintf(format, args...)}
}

// options checks spec and makes its sandbox's options; a refusal names
// the field.
func (o *oneOffs) options(spec adminclient.SandboxSpec) (SandboxOptions, error) {
	p := o.pod
	if !ValidSandboxID(spec.ID) {
		return SandboxOptions{}, refuse(400, "id %q: want "+SandboxIDRule, spec.ID)
	}
	preset, ok := p.engine.Preset(spec.Preset)
	if !ok {
		return SandboxOptions{}, refuse(400, "preset %q: not in the pod's policy %s; it has %v", spec.Preset, p.engine.Hash(), p.engine.Presets())
	}
	if spec.Policy != "" && spec.Policy != p.engine.Hash() {
		return SandboxOptions{}, refuse(412, "policy %s: the pod's proxy decides with policy %s, not the bundle its launcher verified", spec.Policy, p.engine.Hash())
	}
	for _, kv := range spec.Env {
		if name, _, _ := strings.Cut(kv, "="); sandbox.IsReservedEnv(name) {
			return SandboxOptions{}, refuse(400, "env %s: the sandbox's (its proxy and CA), which the pod sets", name)
		}
	}
	if len(spec.Command) == 0 || !filepath.IsAbs(spec.Command[0]) {
		// Its program alone: an argument may be what the check below
		// refuses to quote.
		return SandboxOptions{}, refuse(400, "command %q: want an absolute binary first (the pod does not search a PATH for it)", spec.Command[:min(len(spec.Command), 1)])
	}
	// The pod's proxy reads them from the pod's environment or files,
	// which its launcher need not share.
	if err := proxy.HandedSecret(preset, proxy.Gives("env", spec.Env, spec.Command[1:])); err != nil {
		return SandboxOptions{}, refuse(400, "%v", err)
	}
	memoryMax, err := oneOffLimit("memory_max", spec.MemoryMax, p.m.Sandboxes.MemoryMax)
	if err != nil {
		return SandboxOptions{}, err
	}
	pidsMax, err := oneOffLimit("pids_max", spec.PidsMax, p.m.Sandboxes.PidsMax)
	if err != nil {
		return SandboxOptions{}, err
	}
	type field struct {
		name  string
		paths []string
	}
	fields := []field{{"dir", []string{spec.Dir}}, {"rw", spec.RW}, {"ro", spec.RO}}
	if spec.Stdio {
		// The launcher's own streams: no file of the pod's to name.
		if spec.Stdout != "" || spec.Stderr != "" {
			return SandboxOptions{}, refuse(400, "stdout %q, stderr %q: want none with stdio (the launcher passes its own)", spec.Stdout, spec.Stderr)
		}
		if spec.Audit != "" {
			fields = append(fields, field{"audit", []string{spec.Audit}})
		}
	} else {
		fields = append(fields, field{"stdout", []string{spec.Stdout}}, field{"stderr", []string{spec.Stderr}}, field{"audit", []string{spec.Audit}})
	}
	for _, f := range fields {
		for _, path := range f.paths {
			if !filepath.IsAbs(path) {
				return SandboxOptions{}, refuse(400, "%s %q: want an absolute path", f.name, path)
			}
		}
	}
	c := sandbox.Defaults()
	c.Command = append([]string(nil), spec.Command...)
	c.CommandSHA256 = spec.SHA256
	c.UID, c.GID, c.Dir = spec.UID, spec.GID, spec.Dir
	c.Net, c.ProxyPort = sandbox.NetProxy, p.m.Proxy.Port
	// The services' namespace: a one-off binds no port of theirs, nor
	// any other but one the kernel picks.
	c.SharedNetwork = true
	c.RO = append(c.RO, spec.RO...)
	c.RW = append(c.RW, spec.RW...)
	c.Exec = append(c.Exec, spec.Command[0])
	if err := c.Validate(); err != nil {
		return SandboxOptions{}, refuse(400, "sandbox: %v", err)
	}
	return SandboxOptions{
		ID: spec.ID, Config: c, Env: sandbox.EnvOptions{Set: spec.Env}, CgroupParent: p.group, ParentReaped: true,
		MemoryMax: memoryMax, PidsMax: pidsMax, Network: p.network, DenyPeers: true, CABundle: p.caBundle, Logger: p.log,
	}, nil
}

// oneOffLimit is the limit field of a one-off's leaf: the pod's, which
// keeps a fork bomb or an allocation in it from the supervisor and the
// host, or a lower one its launcher asked for.
func oneOffLimit(field string, asked, pods int64) (int64, error) {
	switch {
	case asked < 0:
		return 0, refuse(400, "%s %d: want a positive limit, or none for the pod's (%d)", field, asked, pods)
	case asked > pods:
		return 0, refuse(400, "%s %d: above the pod's limit for a one-off sandbox, %d (its manifest's sandboxes.%s)", field, asked, pods, field)
	case asked > 0:
		return asked, nil
	}
	return pods, nil
}

// add registers x: from now on its leaf routes to its preset. A second
// one of the same ID, one whose leaf would be a service's, one past the
// manifest's sandboxes.max, or any while the pod stops, is refused.
func (o *oneOffs) add(x *oneOff) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return refuse(503, "pod %s is stopping: no sandbox is launched", o.pod.m.Name)
	}
	if _, ok := o.byID[x.spec.ID]; ok {
		return refuse(409, "id %q: a sandbox of that id is running in pod %s", x.spec.ID, o.pod.m.Name)
	}
	if _, ok := o.services[x.cg]; ok {
		return refuse(409, "id %q: its cgroup is a service's of pod %s", x.spec.ID, o.pod.m.Name)
	}
	// Decision lines, their copy to a one-off's file (tee) and the
	// metrics' series are keyed by id: a one-off named as a service
	// would be given the service's lines, and take its series away when
	// it ends.
	if x.spec.ID == o.pod.m.Name {
		return refuse(409, "id %q: it is pod %s's own name", x.spec.ID, o.pod.m.Name)
	}
	// A service's exec probe runs in a leaf of that name: taken, the
	// probe could not be made (the service failing its health checks),
	// or would be decided by the one-off's preset.
	if strings.HasSuffix(x.spec.ID, probeSuffix) {
		return refuse(409, "id %q: ids ending %q are the services' probes'", x.spec.ID, probeSuffix)
	}
	for _, svc := range o.services {
		if svc.ID == x.spec.ID {
			return refuse(409, "id %q: a service of pod %s has that id", x.spec.ID, o.pod.m.Name)
		}
	}
	if err := o.full(); err != nil {
		return err
	}
	o.byID[x.spec.ID] = x
	o.wg.Add(1)
	o.publish()
	o.pod.proxy.Metrics().Keep(x.spec.ID) // its predecessor's Forget may be waiting on a tunnel
	return nil
}

// forget removes x, once every process of it is gone, and its series
// from the proxy's metrics: a pod runs one-offs for its whole life.
func (o *oneOffs) forget(x *oneOff) {
	o.mu.Lock()
	delete(o.byID, x.spec.ID)
	o.publish()
	o.mu.Unlock()
	o.pod.proxy.Metrics().Forget(x.spec.ID)
	o.wg.Done()
}

// full refuses a launch once the pod runs sandboxes.max one-offs (o.mu
// held): each one's limits bound it alone, so N launches would hold N
// times them. One still being set up counts, and one ended counts until
// forget, before its launcher hears its exit: a launcher that relaunches
// on its exit always finds its slot free.
func (o *oneOffs) full() error {
	if n, most := len(o.byID), o.pod.m.Sandboxes.Max; n >= most {
		return refuse(429, "pod %s runs %d one-off sandboxes, its most (its manifest's sandboxes.max): launch again once one has ended", o.pod.m.Name, n)
	}
	return nil
}

// fullNow is full, o.mu taken.
func (o *oneOffs) fullNow() error {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.full()
}

func (o *oneOffs) get(id string) (*oneOff, bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	x, ok := o.byID[id]
	return x, ok
}

// launch starts spec's sandbox; stdio, with spec.Stdio, are the
// launcher's stdin, stdout and stderr, closed here (after the sandbox's
// end once it started). Its end (wait) is the caller's to await. added,
// when given, is called once the sandbox is known, before its setup: a
// stop from its launcher must reach a setup that hangs.
func (o *oneOffs) launch(spec adminclient.SandboxSpec, stdio []*os.File, added func(*oneOff)) (*oneOff, error) {
	p := o.pod
	opts, err := o.options(spec)
	c := &opts.Config
	if err == nil && spec.Stdio != (len(stdio) == 3) {
		err = fmt.Errorf("sandbox %s: stdio %v with %d descriptors: want 3 exactly with stdio", spec.ID, spec.Stdio, len(stdio))
	}
	var cg string
	if err == nil {
		cg, err = cgroup2.Path(filepath.Join(p.group, sandbox.LeafName(spec.ID)))
	}
	if err != nil {
		for _, f := range stdio {
			f.Close()
		}
		return nil, err
	}
	launch, abort := context.WithCancelCause(p.ctx)
	defer abort(nil)
	x := &oneOff{spec: spec, cg: cg, launched: make(chan struct{}), abort: abort, done: make(chan struct{})}
	named := []struct{ name, path string }{{"stdout", spec.Stdout}, {"stderr", spec.Stderr}, {"audit", spec.Audit}}
	if spec.Stdio {
		x.files = append(x.files, stdio...)
		c.Stdin, c.Stdout, c.Stderr = stdio[0], stdio[1], stdio[2]
		named = named[2:]
		if spec.Audit == "" {
			named = nil
		}
	}
	// The files are opened before the route learns the leaf: the tee
	// has its file from the first decision on. A launch refused removes
	// those it made (O_EXCL: made by it, and nothing ran to write them),
	// so that it can be asked again, from the directories it made them
	// in (dirs).
	var made, dirs []*os.File
	discard := func() {
		for i, f := range made {
			unix.Unlinkat(int(dirs[i].Fd()), filepath.Base(f.Name()), 0)
		}
		x.closeFiles()
	}
	for i, f := range named {
		for _, g := range named[:i] {
			if filepath.Clean(g.path) == filepath.Clean(f.path) {
				discard()
				return nil, refuse(400, "%s and %s name the same file, %s: each must be a file of its own", g.name, f.name, f.path)
			}
		}
		fh, dir, err := createOutput(f.path)
		if err != nil {
			discard()
			return nil, refuse(400, "%s: %v", f.name, err)
		}
		x.files = append(x.files, fh, dir)
		made, dirs = append(made, fh), append(dirs, dir)
	}
	if !spec.Stdio {
		c.Stdout, c.Stderr = made[0], made[1]
	}
	if len(made) > 0 {
		x.audit = made[len(made)-1]
	}
	if err := o.add(x); err != nil {
		discard()
		return nil, err
	}
	if added != nil {
		added(x)
	}
	x.sb, err = Launch(launch, opts)
	if err != nil {
		// On record before launched closes: a stop waiting for the
		// launch answers it.
		x.exit = adminclient.SandboxExit{Exit: 125, Error: err.Error()}
	}
	close(x.launched)
	if err != nil {
		p.event("sandbox_failed", events.Warning, spec.ID, "one-off sandbox not launched: "+err.Error())
		o.forget(x)
		discard()
		close(x.done)
		return nil, fmt.Errorf("sandbox %s: %w", spec.ID, err)
	}
	p.event("sandbox_started", events.Info, spec.ID, fmt.Sprintf("one-off sandbox, preset %s, pid %d: %q", spec.Preset, x.sb.Pid(), spec.Command))
	go o.wait(x)
	return x, nil
}

// createOutput makes path, a file of a one-off's (its output, its audit
// lines), as root and often in a directory a sandbox writes (its job's):
// through no symbolic link another user could have pointed elsewhere
// ($JOB/out → /etc, where a file of root's is read as configuration), as
// `airlock launch` opens its status file (trusted.OpenDir: checked as it
// is walked, so no link swapped in after a check is followed), and neither
// through a link nor over a file already there as its last component
// (O_EXCL, O_NOFOLLOW). dir is the directory it was made in, held open: a
// refused launch removes the file from there, not from wherever its path
// leads by then.
func createOutput(path string) (f, dir *os.File, err error) {
	dirPath, name := trusted.SplitLast(path)
	dir, err = trusted.OpenDir(dirPath)
	if errors.Is(err, trusted.ErrUntrusted) {
		return nil, nil, fmt.Errorf("%s: not made through a link another user may point elsewhere: %w", path, err)
	} else if err != nil {
		return nil, nil, err
	}
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_APPEND|unix.O_CLOEXEC, 0o600)
	if err != nil {
		dir.Close()
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), dir, nil
}

// wait waits for x's end, then forgets it: its route, its files.
func (o *oneOffs) wait(x *oneOff) {
	out, err := x.sb.Wait()
	x.exit.Exit = out.ExitCode
	detail := exitDetail(out.ExitCode)
	if err != nil {
		x.exit.Error = fmt.Sprintf("sandbox %s: wait: %v", x.spec.ID, err)
		detail = x.exit.Error
	}
	// On record before forget lets the pod's stop go on to close the
	// events log.
	o.pod.event("sandbox_exit", events.Info, x.spec.ID, detail)
	// Its files close once forget has taken it out of the tee: a line of
	// it decided meanwhile (a connection's close) would otherwise meet a
	// closed file, and fail as an audit write.
	o.forget(x)
	x.closeFiles()
	close(x.done)
}

func (x *oneOff) closeFiles() {
	for _, f := range x.files {
		f.Close()
	}
}

// errStoppedInSetup is why a launch ends when its stop's grace has passed
// while it is still being set up.
var errStoppedInSetup = errors.New("stopped while it was being set up, and its stop's grace has passed")

// stop ends x: SIGTERM to its command, then, when ctx ends, every process
// of it killed; it returns once x has ended. Of several stops (an
// operator's with a long grace, then the pod's), the earliest deadline
// rules.
func (x *oneOff) stop(ctx context.Context) {
	select {
	case <-x.launched:
	case <-ctx.Done():
		// Its setup hangs (a path it was given on a hung FUSE or NFS
		// mount): the stop's grace is its too.
		x.abort(errStoppedInSetup)
		<-x.launched
	}
	if x.sb == nil {
		return // its launch failed: nothing runs
	}
	select {
	case <-x.done:
		return
	default:
	}
	if err := x.sb.Shutdown(ctx); err != nil && !errors.Is(err, os.ErrProcessDone) {
		x.sb.log.Error("stop one-off sandbox", "sandbox", x.spec.ID, "err", err)
	}
	<-x.done
}

// stopGrace is stop with grace from now.
func (x *oneOff) stopGrace(grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	x.stop(ctx)
}

// close refuses further launches and stops the running ones, each within
// ctx (the pod's stop deadline); it returns once all have ended.
func (o *oneOffs) close(ctx context.Context) {
	o.mu.Lock()
	o.closed = true
	running := make([]*oneOff, 0, len(o.byID))
	for _, x := range o.byID {
		running = append(running, x)
	}
	o.mu.Unlock()
	for _, x := range running {
		go x.stop(ctx)
	}
	o.wg.Wait()
}
