package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/adminclient"
	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
)

// lifePod is a pod of a test's, booted in this process (up).
type lifePod struct {
	*Pod
	t      *testing.T
	m      *manifest.Pod
	out    string // a directory the services' uid may write (OUT)
	events string
	output *testutil.Buffer
	stop   func() // stops the booted pod once; the test's end does, if not before
}

// The exec probes of these pods allow 3 s: run by the test binary, a
// probe's sandbox is the race-built binary's when `make test` runs (-race),
// whose end takes over a second; airlock's own stage is a small binary.

// newLifePod is a pod of the embedded presets whose services are services
// (a manifest's services: block; OUT in it is the directory the services'
// uid may write), stopping within grace; its files in a fresh directory.
func newLifePod(t *testing.T, name, grace, services string) *lifePod {
	t.Helper()
	testutil.RequireRoot(t, "a pod (network namespace, cgroups, uid switch)")
	testutil.RequireCgroup2(t)
	// Traversable by the services' uid, as newPodEnv's in the integration
	// tests: t.TempDir's parents are not.
	dir, err := os.MkdirTemp("", "airlock-podtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(out, 0o777)
	// Unique on the host: pods of one name remove each other's groups.
	name = fmt.Sprintf("t%d-%s", os.Getpid(), name)
	// The pod leaves its lock's file (a name's, for its next run): not
	// this test's, whose names are used once.
	t.Cleanup(func() { os.Remove(filepath.Join(lockDir, "pod-"+name+".lock")) })
	m, err := manifest.Parse(name, []byte(fmt.Sprintf(`name: %s
state_dir: %s
stop_grace: %s
proxy: {port: 3128, ca_dir: %s}
services:
%s`, name, filepath.Join(dir, "state"), grace, filepath.Join(dir, "ca"), strings.ReplaceAll(services, "OUT", out))), dir)
	if err != nil {
		t.Fatal(err)
	}
	p := &lifePod{t: t, m: m, out: out, events: m.Events.File, output: &testutil.Buffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the services' output:\n%s", p.output.String())
			for _, ev := range p.eventsOf() {
				t.Logf("event: %+v", ev)
			}
		}
	})
	return p
}

// up boots the pod under ctx with o's logger (discarding by default),
// and returns the boot's error: a boot that failed or stopped has
// nothing left to stop.
func (p *lifePod) up(ctx context.Context, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Output = p.output
	pod, err := Up(ctx, p.m, o)
	if err != nil {
		return err
	}
	p.Pod = pod
	p.stop = sync.OnceFunc(func() { pod.Stop(context.Background()) })
	p.t.Cleanup(p.stop)
	return nil
}

// eventsOf reads the pod's events file: none while it is not there yet.
func (p *lifePod) eventsOf() []events.Event {
	evs, _ := events.Read(p.events, time.Time{})
	return evs
}

// started counts the launches of service on record.
func (p *lifePod) started(service string) int {
	n := 0
	for _, ev := range p.eventsOf() {
		if ev.Kind == "started" && ev.Service == service {
			n++
		}
	}
	return n
}

// touched says whether a service has made file name in the pod's out.
func (p *lifePod) touched(name string) bool {
	_, err := os.Stat(filepath.Join(p.out, name))
	return err == nil
}

// stepHook is a log handler calling its func, in the boot's goroutine, as
// each boot step is logged done: a test acts between two steps.
type stepHook func(step string)

func (h stepHook) Enabled(context.Context, slog.Level) bool { return true }
func (h stepHook) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h stepHook) WithGroup(string) slog.Handler            { return h }
func (h stepHook) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "boot step done" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "step" {
				h(a.Value.String())
			}
			return true
		})
	}
	return nil
}

// bootSteps are Up's steps, in order.
var bootSteps = []string{"lock", "state", "policy", "proxy", "network", "cgroups", "serve", "ingress", "admin", "services", "health"}

// A stop signal during boot ends it before its next step: no service is
// launched once the stop came (a migration job started after the
// operator asked to stop), and the boot says it stopped.
func TestPodStopDuringBootLaunchesNothing(t *testing.T) {
	for _, after := range []string{"state", "policy", "admin"} {
		t.Run(after, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pod := newLifePod(t, "stopboot-"+after, "2s", `  - name: job
    command: [/bin/sh, -c, "touch OUT/ran; exec sleep 3600"]
    user: "61000"
    preset: strict
    landlock: {rw: [OUT]}
`)
			hook := stepHook(func(step string) {
				switch step {
				case after:
					cancel() // the stop signal, between two steps
				case "services":
					// Reached only when the stop was not acted on: the
					// boot is held until the launch shows, so that the
					// test sees it, rather than racing the teardown.
					deadline := time.Now().Add(20 * time.Second)
					for !pod.touched("ran") && time.Now().Before(deadline) {
						time.Sleep(10 * time.Millisecond)
					}
				}
			})
			if err := pod.up(ctx, Options{Logger: slog.New(hook)}); !errors.Is(err, ErrStopped) {
				t.Errorf("Up = %v; want ErrStopped", err)
			}
			for _, ev := range pod.eventsOf() {
				switch {
				case ev.Kind == "started":
					t.Errorf("a service was launched after the stop: %+v", ev)
				case ev.Kind == "boot_step" && slices.Index(bootSteps, strings.Fields(ev.Detail)[0]) > slices.Index(bootSteps, after):
					t.Errorf("a boot step ran after the stop: %s", ev.Detail)
				}
			}
			if pod.touched("ran") {
				t.Errorf("the service's command ran after the stop")
			}
		})
	}
}

// The pod's stop gives its services their stop_grace whatever its one-offs
// do: a one-off (model-written code) that ignores SIGTERM stops alongside
// them, not before them, so it cannot spend their grace. The service's
// TERM trap, a graceful stop that takes a moment, runs to its end; the
// one-off is killed at the deadline.
func TestPodStopOneOffIgnoringTERMLeavesTheServicesTheirGrace(t *testing.T) {
	pod := newLifePod(t, "oneoffstop", "2s", `  - name: svc
    command: [/bin/sh, -c, "trap 'sleep 0.3; touch OUT/stopped; exit 0' TERM; touch OUT/svc-ready; while :; do sleep 0.1; done"]
    user: "61000"
    preset: strict
    landlock: {rw: [OUT]}
`)
	if err := pod.up(context.Background(), Options{}); err != nil {
		t.Fatal(err)
	}
	job := filepath.Join(filepath.Dir(pod.out), "job") // root's: the pod makes the files there
	if err := os.Mkdir(job, 0o755); err != nil {
		t.Fatal(err)
	}
	x, err := pod.sandboxes.launch(adminclient.SandboxSpec{ID: "stubborn", Preset: "strict",
		Command: []string{"/bin/sh", "-c", "trap '' TERM; touch " + pod.out + "/oneoff-ready; while :; do sleep 0.1; done"},
		Dir:     "/", RW: []string{pod.out}, UID: 61000, GID: 61000,
		Stdout: job + "/stdout", Stderr: job + "/stderr", Audit: job + "/audit"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Both traps are set before the stop.
	testutil.WaitFor(t, "the service and the one-off to be running", func() bool {
		return pod.touched("svc-ready") && pod.touched("oneoff-ready")
	})
	start := time.Now()
	pod.stop()
	took := time.Since(start)
	if !pod.touched("stopped") {
		t.Errorf("the service's TERM trap did not finish: the one-off ignoring SIGTERM took its grace (the stop took %v)", took)
	}
	select {
	case <-x.done:
	default:
		t.Errorf("the one-off outlived the pod's stop")
	}
	if took < 2*time.Second {
		t.Errorf("the stop took %v: the one-off ignoring SIGTERM was not given the grace, 2s", took)
	}
}

// A job (restart: never, no health check) is healthy once launched, and
// may end before the other services are healthy: one that exited 0 has
// run, and the boot counts it done (READY, and ready since: the
// watchdog's pings go on); one that failed fails the boot, naming it.
func TestPodBootJobThatEndsFirst(t *testing.T) {
	for _, tc := range []struct {
		code   int
		failed string // the boot's error, "" when READY
	}{
		{0, ""},
		{3, "service job is exited: exit code 3"},
	} {
		t.Run(fmt.Sprint("exit ", tc.code), func(t *testing.T) {
			pod := newLifePod(t, fmt.Sprint("job", tc.code), "2s", fmt.Sprintf(`  - name: job
    command: [/bin/sh, -c, "exit %d"]
    user: "61000"
    preset: strict
    restart: {policy: never}
  - name: web
    command: [/bin/sleep, "3600"]
    user: "61000"
    preset: strict
    landlock: {ro: [OUT]}
    health: {exec: [/bin/sh, -c, "test -e OUT/gate"], interval: 3s, timeout: 3s, start_period: 60s}
`, tc.code))
			booted := make(chan error, 1)
			go func() { booted <- pod.up(context.Background(), Options{}) }()
			// web is healthy only once the job has exited: its exit is
			// seen by a boot still waiting.
			testutil.WaitFor(t, "the job's exit", func() bool {
				for _, ev := range pod.eventsOf() {
					if ev.Kind == "exited" && ev.Service == "job" {
						return true
					}
				}
				return false
			})
			if err := os.WriteFile(filepath.Join(pod.out, "gate"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			var err error
			select {
			case err = <-booted:
			case <-time.After(60 * time.Second):
				t.Fatal("no end to the boot within 60s")
			}
			switch {
			case tc.failed == "" && err != nil:
				t.Fatalf("Up = %v; want READY with the job done", err)
			case tc.failed == "":
				if !pod.Ready() {
					t.Errorf("not ready with the job done: %+v", pod.Status().Services)
				}
				if st := pod.byName["job"].status(); st.State != stateExited {
					t.Errorf("the job is %s (%s); want exited", st.State, st.Detail)
				}
			case err == nil || !strings.Contains(err.Error(), tc.failed):
				t.Errorf("Up = %v; want a failed boot saying %q", err, tc.failed)
			}
		})
	}
}

// A service restarting after a crash waits for the services it comes
// after; when one of them comes up while the pod stops (the stop not yet
// at this service: a later tier ignores SIGTERM and holds it), the
// service is not launched again: it was stopping.
func TestPodNoRelaunchAfterTheStopBegan(t *testing.T) {
	pod := newLifePod(t, "relaunch", "3s", `  - name: base
    command: [/bin/sleep, "3600"]
    user: "61000"
    preset: strict
    landlock: {ro: [OUT]}
    health: {exec: [/bin/sh, -c, "test -e OUT/gate"], interval: 3s, timeout: 3s, threshold: 100, start_period: 60s}
    restart: {policy: always}
  - name: dependent
    command: [/bin/sh, -c, "while [ ! -e OUT/crash ]; do sleep 0.05; done; exit 1"]
    user: "61000"
    preset: strict
    landlock: {ro: [OUT]}
    after: [base]
    restart: {policy: always, backoff: {initial: 20ms, max: 50ms}}
  - name: stubborn
    command: [/bin/sh, -c, "trap '' TERM; touch OUT/stubborn-ready; while :; do sleep 0.1; done"]
    user: "61000"
    preset: strict
    landlock: {rw: [OUT]}
    after: [dependent]
`)
	gate := filepath.Join(pod.out, "gate")
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := pod.up(context.Background(), Options{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "stubborn's trap", func() bool { return pod.touched("stubborn-ready") })
	// base restarted, and not healthy again until the gate opens.
	os.Remove(gate)
	base, dependent := pod.byName["base"], pod.byName["dependent"]
	if err := base.restart(restartChange{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "base's second instance", func() bool { return pod.started("base") == 2 })
	// dependent crashes, and waits for base.
	if err := os.WriteFile(filepath.Join(pod.out, "crash"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "dependent waiting for base", func() bool { return dependent.status().State == statePending })
	stopped := make(chan struct{})
	go func() { defer close(stopped); pod.stop() }()
	testutil.WaitFor(t, "the stop to begin", pod.stopping.Load)
	// base comes up during the stop; stubborn holds dependent's.
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "base healthy", base.healthy)
	<-stopped
	stop := -1
	for i, ev := range pod.eventsOf() {
		switch {
		case ev.Kind == "stop":
			stop = i
		case stop >= 0 && ev.Kind == "started":
			t.Errorf("%s was launched during the stop: %+v", ev.Service, ev)
		}
	}
	if stop < 0 {
		t.Errorf("no stop event")
	}
}
