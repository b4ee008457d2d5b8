package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/adminclient"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
)

// TestRestartOfAParkedService: through the admin socket, a parked service's
// restart is accepted (and wakes its loop) while the pod runs, and refused,
// naming why, once the pod has failed or while it stops.
func TestRestartOfAParkedService(t *testing.T) {
	for _, c := range []struct {
		name  string
		ended func(p *Pod)
		want  string // "" accepted
	}{
		{"running pod", func(*Pod) {}, ""},
		{"failed pod", func(p *Pod) { p.fail("every service has ended: once exited (exit code 0)") }, "pod parked has failed (every service has ended: once exited (exit code 0)); restart the pod"},
		{"stopping pod", func(p *Pod) { p.stopping.Store(true) }, "pod parked is stopping"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &Pod{m: &manifest.Pod{Name: "parked", Admin: manifest.Admin{Socket: filepath.Join(t.TempDir(), "admin.sock")}},
				log: slog.New(slog.DiscardHandler), byName: map[string]*service{}, failed: make(chan struct{}), stateCh: make(chan struct{})}
			// steady runs: once parking does not fail the pod.
			s := &service{pod: p, name: "once", restartReq: make(chan struct{}, 1), state: stateExited}
			steady := &service{pod: p, name: "steady", restartReq: make(chan struct{}, 1), state: stateHealthy}
			p.services, p.byName["once"] = []*service{steady, s}, s
			a, err := newAdmin(p)
			if err != nil {
				t.Fatal(err)
			}
			defer a.close()
			p.park(s)
			c.ended(p)

			err = adminclient.Restart(context.Background(), p.m.Admin.Socket, "once", adminclient.RestartOptions{})
			var se *adminclient.StatusError
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("restart of a parked service: %v, want it accepted", err)
			case c.want == "" && (len(s.restartReq) != 1 || s.parked):
				t.Errorf("accepted, but the loop was not woken (%d pending) or the service is still counted parked (%v)", len(s.restartReq), s.parked)
			case c.want != "" && (!errors.As(err, &se) || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), c.want)):
				t.Errorf("restart: %v, want a 409 saying %q", err, c.want)
			case c.want != "" && len(s.restartReq) != 0:
				t.Errorf("refused, but the loop was woken")
			}
		})
	}
}

// A restart of a service still waiting for the services it comes after
// does not wake its loop: its first launch, which reads the change, is the
// restart (woken, the loop would stop that launch as soon as it began).
// Of a running one, it does.
func TestRestartBeforeTheFirstLaunch(t *testing.T) {
	p := &Pod{m: &manifest.Pod{Name: "p"}, log: slog.New(slog.DiscardHandler), byName: map[string]*service{}, failed: make(chan struct{}), stateCh: make(chan struct{})}
	for _, c := range []struct {
		state string
		woken int
	}{{statePending, 0}, {stateHealthy, 1}} {
		s := &service{pod: p, name: "svc", restartReq: make(chan struct{}, 1), state: c.state}
		if err := s.restart(restartChange{}); err != nil {
			t.Fatal(err)
		}
		if len(s.restartReq) != c.woken {
			t.Errorf("restart of a %s service: %d requests for its loop; want %d", c.state, len(s.restartReq), c.woken)
		}
	}
}

// A service's restart waits for what it comes after as it is now: one given
// up on once and revived since, healthy again, lets it launch (given up on
// for good, it would have every later restart of its dependents given up).
func TestRestartAfterARevivedDependency(t *testing.T) {
	p := &Pod{m: &manifest.Pod{Name: "p"}, log: slog.New(slog.DiscardHandler), byName: map[string]*service{}, failed: make(chan struct{}), stateCh: make(chan struct{})}
	base := &service{pod: p, name: "base", restartReq: make(chan struct{}, 1), up: make(chan struct{})}
	dep := &service{pod: p, name: "dependent", restartReq: make(chan struct{}, 1), stopReq: make(chan struct{}), up: make(chan struct{}),
		spec: manifest.Service{After: []string{"base"}}}
	p.services, p.byName["base"], p.byName["dependent"] = []*service{base, dep}, base, dep
	base.setState(stateHealthy, "")
	base.setState(stateGivenUp, "crash loop")
	base.setState(stateHealthy, "revived by an operator")
	done := make(chan bool, 1)
	go func() { done <- dep.awaitDependencies() }()
	select {
	case ok := <-done:
		if st := dep.status(); !ok || st.State == stateGivenUp {
			t.Fatalf("awaitDependencies = %v, dependent %s (%s); want its launch to go ahead", ok, st.State, st.Detail)
		}
	case <-time.After(10 * time.Second):
		close(dep.stopReq)
		t.Fatalf("the dependent still waits for base, healthy again: %s (%s)", dep.status().State, dep.status().Detail)
	}
}
