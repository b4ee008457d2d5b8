package supervisor

import (
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/events"
)

// A service given up on (a crash loop, or a service it comes after given
// up on) or exited for good (its restart policy) parks: its loop waits
// for an operator's restart, which starts it again, or the pod's stop.
// When every service is parked at once the pod has failed: nothing of it
// runs, and its unit is to restart it. The pod's lifeMu orders a service
// parking against an operator's restart, so that a restart accepted is
// never lost to a pod failing at the same instant.

// park waits for an operator's restart (true) or the pod's stop (false).
func (s *service) park() bool {
	s.pod.park(s)
	select {
	case <-s.restartReq:
		return true
	case <-s.stopReq:
		return false
	}
}

// park counts s as parked, unless a restart is already pending for it,
// and fails the pod when every service is.
func (p *Pod) park(s *service) {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	if len(s.restartReq) > 0 {
		return // revived before it parked
	}
	s.parked = true
	var ended []string
	for _, o := range p.services {
		if !o.parked {
			return
		}
		st := o.status()
		ended = append(ended, o.name+" "+st.State+" ("+st.Detail+")")
	}
	if p.stopping.Load() {
		return
	}
	msg := "every service has ended: " + strings.Join(ended, "; ")
	p.event("pod_failed", events.Critical, "", msg)
	p.fail(msg)
}

// restartable says why an operator's restart is refused now (nil: it is
// not): a pod that failed or is stopping is not revived service by
// service. Called with lifeMu held.
func (p *Pod) restartable() error {
	if p.stopping.Load() {
		return fmt.Errorf("pod %s is stopping", p.m.Name)
	}
	select {
	case <-p.failed:
		return fmt.Errorf("pod %s has failed (%s); restart the pod", p.m.Name, p.failure)
	default:
	}
	return nil
}
