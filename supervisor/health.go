package supervisor

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/supervisor/manifest"
)

// probeSuffix ends the id of a service's exec probe (its leaf's name).
const probeSuffix = ".probe"

// checker probes a service once, within the health check's timeout; nil
// is healthy. ctx ends when the probe must stop (the service is being
// stopped or restarted).
type checker func(ctx context.Context) error

// newChecker builds the service's probe. HTTP and TCP probes are made
// from inside the pod's network namespace, where the service listens on
// its loopback; an exec probe runs in a sandbox like the service's own.
func newChecker(p *Pod, s *service, h *manifest.Health) checker {
	switch {
	case h.HTTP != nil:
		url := "http://127.0.0.1:" + strconv.Itoa(h.HTTP.Port) + h.HTTP.Path
		client := &http.Client{Transport: &http.Transport{
			Proxy:             nil,
			DialContext:       p.network.DialContext,
			DisableKeepAlives: true,
			// A probe reads a status: not the 10 MiB of header a
			// service could send in its place.
			MaxResponseHeaderBytes: 16 << 10,
		},
			// A redirect is an answer (3xx is healthy): followed, the
			// probe would judge whatever it points at, another
			// service's port or none.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
		return func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, h.Timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode >= 400 {
				return fmt.Errorf("GET %s: %s", url, resp.Status)
			}
			return nil
		}
	case h.TCP != nil:
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(h.TCP.Port))
		return func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, h.Timeout)
			defer cancel()
			c, err := p.network.DialContext(ctx, "tcp", addr)
			if err != nil {
				return err
			}
			return c.Close()
		}
	default:
		return func(ctx context.Context) error { return s.execProbe(ctx, h.Exec, h.Timeout) }
	}
}

// probeSetupWithin bounds an exec probe's sandbox setup, which takes tens
// of milliseconds.
const probeSetupWithin = 10 * time.Second

// execProbe runs argv with the service's identity and restrictions, in
// its own cgroup under the pod's (so a probe that hangs is killed whole at
// its timeout, and its connections, belonging to no service, get nothing)
// with the service's limits: it runs as the service, with what the
// service may write, so a service that rewrote what its probe runs would
// otherwise have memory and processes without bound every interval.
//
// Its timeout runs from the command's start: the sandbox's setup (tens of
// milliseconds, more on a loaded host) is the supervisor's, not the
// service's, and must not fail a healthy service.
func (s *service) execProbe(ctx context.Context, argv []string, timeout time.Duration) error {
	c := s.cfg
	c.Command = argv
	c.Stdin, c.Stdout, c.Stderr = nil, nil, nil
	// ".probe": service names cannot hold a dot, so a probe's leaf is
	// never a service's, whose preset would then decide for the probe.
	// A setup that hangs (a path of the service's on a hung mount) is a
	// failed check, not a health watch that never reports again.
	ctx, cancel := context.WithTimeoutCause(ctx, probeSetupWithin, fmt.Errorf("its sandbox was not set up within %v", probeSetupWithin))
	defer cancel()
	sb, err := Launch(ctx, SandboxOptions{ID: s.leafID() + probeSuffix, Config: c, Env: s.env, CgroupParent: s.pod.group, ParentReaped: true,
		MemoryMax: s.memoryLimit(), PidsMax: s.spec.PidsMax, Network: s.pod.network, CABundle: s.pod.caBundle, Logger: s.pod.log})
	if err != nil {
		return fmt.Errorf("exec probe: %w", err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	timedOut := false
	select {
	case <-sb.Done():
	case <-timer.C:
		timedOut = true
		sb.Kill()
	case <-ctx.Done():
		sb.Kill()
	}
	out, err := sb.Wait()
	if err != nil {
		return err
	}
	if timedOut {
		return fmt.Errorf("exec probe %v: no exit within %v", argv, timeout)
	}
	if out.ExitCode != 0 {
		return fmt.Errorf("exec probe %v: %s", argv, exitDetail(out.ExitCode))
	}
	return nil
}
