package proxy

import (
	"fmt"
	"path"
	"strings"

	"github.com/airlock-sandbox/airlock/proxy/identity"
)

// Service is who a connection on a pod's listener is decided as: one of
// the pod's services, with its own preset (Sandbox.Route).
type Service struct{ ID, Kind, Preset string }

// ByCgroup is a Sandbox.Route that places a process by its cgroup: in the
// service whose cgroup (keyed as cgroup2.Path gives it, the form
// /proc/<pid>/cgroup shows) is the process's or an ancestor of it. Of
// nested services' cgroups the deepest wins. A process in none of them is
// placed nowhere, and the error names its cgroup.
func ByCgroup(services map[string]Service) func(*identity.Process) (Service, error) {
	byPath := make(map[string]Service, len(services))
	for cg, s := range services {
		byPath[path.Clean(cg)] = s
	}
	return func(p *identity.Process) (Service, error) {
		// The process's cgroup, then each ancestor: the first known is
		// the deepest.
		for cg := p.Cgroup; strings.HasPrefix(cg, "/"); cg = path.Dir(cg) {
			if s, ok := byPath[cg]; ok {
				return s, nil
			}
			if cg == "/" {
				break
			}
		}
		if p.Cgroup == "" {
			return Service{}, fmt.Errorf("pid %d (%s) is in no cgroup v2, so in no service of the pod", p.PID, p.Exe)
		}
		return Service{}, fmt.Errorf("pid %d (%s) is in cgroup %s, which is in no service of the pod", p.PID, p.Exe, p.Cgroup)
	}
}
