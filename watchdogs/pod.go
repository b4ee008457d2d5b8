package watchdogs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/adminclient"
)

// PodTarget is a gateway an airlock pod runs: the supervisor's status is
// the evidence (its exits, the last instance's output and OOM kills, its
// heap and memory limit), and the restart, with its change, is the
// supervisor's, through the pod's admin socket.
type PodTarget struct {
	Socket  string
	Service string
	Timeout time.Duration // bounds each request, and the wait for the old instance to go
}

// serviceStatus is what the watchdog reads of a service in the pod's status
// (supervisor.ServiceStatus, which this layer does not import).
type serviceStatus struct {
	Name       string   `json:"name"`
	State      string   `json:"state"`
	Detail     string   `json:"detail"`
	Launches   int      `json:"launches"`
	LastExit   *int     `json:"last_exit"`
	Exits      int      `json:"exits"`
	OOMKills   int64    `json:"oom_kills"`
	LastOutput []string `json:"last_output"`
	NodeHeapMB int      `json:"node_heap_mb"`
	MemoryMax  int64    `json:"memory_max"`
}

// The states in which the supervisor no longer brings the service back by
// itself: given up on, exited for good, stopped with the pod.
var unsupervised = []string{"given_up", "exited", "stopped"}

func (t PodTarget) status(ctx context.Context) (time.Time, serviceStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	resp, err := adminclient.Do(ctx, t.Socket, http.MethodGet, "/v1/status")
	if err != nil {
		return time.Time{}, serviceStatus{}, fmt.Errorf("the pod's status (admin socket %s): %w", t.Socket, err)
	}
	defer resp.Body.Close()
	var st struct {
		Pod      string          `json:"pod"`
		Booted   time.Time       `json:"booted"`
		Services []serviceStatus `json:"services"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return time.Time{}, serviceStatus{}, fmt.Errorf("the pod's status (admin socket %s): %w", t.Socket, err)
	}
	for _, s := range st.Services {
		if s.Name == t.Service {
			return st.Booted, s, nil
		}
	}
	return time.Time{}, serviceStatus{}, fmt.Errorf("pod %s has no service %q", st.Pod, t.Service)
}

// Look implements Target.
func (t PodTarget) Look(ctx context.Context, m *TargetMemory) (Evidence, error) {
	booted, s, err := t.status(ctx)
	if err != nil {
		return Evidence{}, err
	}
	ev := Evidence{Known: true, HeapMB: s.NodeHeapMB, MemoryMax: s.MemoryMax,
		// Starting or in backoff, the supervisor is bringing it back.
		Running: !slices.Contains(unsupervised, s.State),
		Healthy: s.State == "healthy"}
	var judge bool
	switch {
	case m.Seen && m.PodBooted.Equal(booted):
		judge = s.Exits > m.Exits
	case m.Seen:
		// The pod was restarted: every exit since its boot is new.
		judge = s.Exits > 0
	default:
		// A first look sets the baseline, unless the gateway is down
		// now and its last exit is all that says why.
		judge = !ev.Running && s.Exits > 0
	}
	m.Seen, m.PodBooted, m.Exits = true, booted, s.Exits
	if judge {
		ev.Exited = true
		ev.Exit = s.Detail
		if s.LastExit != nil && ev.Exit == "" {
			ev.Exit = fmt.Sprintf("exit code %d", *s.LastExit)
		}
		ev.HeapOOM = heapExhausted([]byte(strings.Join(s.LastOutput, "\n") + "\n"))
		ev.OOMKills = s.OOMKills
	}
	return ev, nil
}

// Restart implements Target: the supervisor stops the instance it runs (a
// hung one with its whole cgroup), or starts one it had stopped
// supervising, with the change. It returns once the supervisor has begun
// an instance after the request (its status says starting, or later), so
// that no probe after it sees the old one. (A restart of the supervisor's
// own that began between the status read and the request is taken for
// this one; the request, still pending, then replaces it.)
func (t PodTarget) Restart(ctx context.Context, c Change, m *TargetMemory) error {
	_, before, err := t.status(ctx)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	if err := adminclient.Restart(rctx, t.Socket, t.Service, adminclient.RestartOptions{NodeHeapMB: c.HeapMB, MemoryMax: c.MemoryMax}); err != nil {
		return fmt.Errorf("restart through the admin socket %s: %w", t.Socket, err)
	}
	tick := time.NewTicker(settlePoll)
	defer tick.Stop()
	var last error // the last look that failed, not by the deadline
	for {
		booted, s, err := t.status(rctx)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			last = err
		}
		if err == nil && s.Launches > before.Launches {
			// This restart's exit is the watchdog's own: not a fault.
			m.Seen, m.PodBooted, m.Exits = true, booted, s.Exits
			return nil
		}
		select {
		case <-rctx.Done():
			why := fmt.Errorf("restart through the admin socket %s: the supervisor did not begin a new instance within %v", t.Socket, t.Timeout)
			if last != nil {
				// Why the looks saw no new instance, when they failed.
				why = fmt.Errorf("%w (the last failed status read: %v)", why, last)
			}
			return why
		case <-tick.C:
		}
	}
}

// Recover implements Recoverer, for a watchdog with nothing to change (the
// shim's): a restart as it was.
func (t PodTarget) Recover(ctx context.Context) error {
	var m TargetMemory
	return t.Restart(ctx, Change{}, &m)
}

// Dial reaches the pod's own loopback, where its services listen, through
// the admin socket: the health probe's connections.
func (t PodTarget) Dial(ctx context.Context, _, addr string) (net.Conn, error) {
	return adminclient.Dial(ctx, t.Socket, addr)
}
