package supervisor

import (
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// notifyReady tells systemd (Type=notify) the pod is up, and starts the
// watchdog pings if the unit asked for them. Outside systemd (no
// NOTIFY_SOCKET) nothing is sent. The services never see NOTIFY_SOCKET:
// their environment is built from nothing.
func notifyReady(p *Pod) {
	daemon.SdNotify(false, daemon.SdNotifyReady+"\n"+status(p))
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval == 0 {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		watchdog(p, interval/2)
	}()
}

// watchdog pings systemd at half its timeout, but only while every service
// is healthy: a pod that cannot get healthy is restarted by its unit.
func watchdog(p *Pod, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		if p.Ready() {
			daemon.SdNotify(false, daemon.SdNotifyWatchdog)
		}
	}
}

func status(p *Pod) string {
	healthy := 0
	for _, s := range p.services {
		if s.healthy() {
			healthy++
		}
	}
	return fmt.Sprintf("STATUS=%d/%d services healthy", healthy, len(p.services))
}

// notifyStatus tells systemd how many services are healthy, at each change
// once the pod is up (nothing outside systemd).
func notifyStatus(p *Pod) {
	if p.ready.Load() {
		daemon.SdNotify(false, status(p))
	}
}

func notifyStopping() { daemon.SdNotify(false, daemon.SdNotifyStopping) }
