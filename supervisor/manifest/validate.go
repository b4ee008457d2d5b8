package manifest

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/yamlobj"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy/egress"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// checks run in order over a decoded manifest, each small and about one
// part of it (runc's validate.Validate). Each reports through the report,
// so every problem is found in one pass; a field the decoder already
// failed on is not reported again.
var checks = []func(*Pod, *yamlobj.Report){
	checkPod,
	checkPolicy,
	checkProxy,
	checkAdmin,
	checkServices,
	checkHealth,
	checkRestart,
	checkPorts,
	checkAfter,
	checkIngress,
	checkSandboxes,
}

func validate(p *Pod, r *yamlobj.Report) {
	for _, check := range checks {
		check(p, r)
	}
}

var (
	namePattern   = regexp.MustCompile(`^[a-z0-9-]+$`)
	envPattern    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	presetPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	userPattern   = regexp.MustCompile(`^[a-z_][a-z0-9_.-]*\$?$`)
)

// maxID is the largest uid or gid a process can hold: (uid_t)-1 means
// "unchanged" to setresuid.
const maxID = 1<<32 - 2

func checkName(r *yamlobj.Report, path, name string) {
	if name != "" && !namePattern.MatchString(name) {
		r.At(path, "%q: want lower-case letters, digits and - only (it names cgroups)", name)
	}
}

// maxEventsKeep bounds events.keep.
const maxEventsKeep = 1000

func checkPod(p *Pod, r *yamlobj.Report) {
	checkName(r, "name", p.Name)
	if p.Events.MaxBytes <= 0 {
		r.At("events.max_bytes", "%d: want a positive size", p.Events.MaxBytes)
	}
	if p.Events.Keep < 1 || p.Events.Keep > maxEventsKeep {
		// Rotation renames every kept file while appends wait.
		r.At("events.keep", "%d: want 1 to %d rotated files (at least 1: rotation must not lose lines)", p.Events.Keep, maxEventsKeep)
	}
	if p.StopGrace <= 0 {
		r.At("stop_grace", "%s: want a positive duration", p.StopGrace)
	}
}

func checkPolicy(p *Pod, r *yamlobj.Report) {
	if p.Policy.SHA256 != "" {
		pin, err := policies.ParsePin(p.Policy.SHA256)
		if err != nil {
			r.At("policy.sha256", "%q: want sha256:<64 hex digits> (see `airlock policy hash`)", p.Policy.SHA256)
		}
		p.Policy.SHA256 = pin
	}
	if p.Policy.PublicKey == "" {
		for _, f := range []string{"key_id", "signing_alg"} {
			if r.Given("policy." + f) {
				r.At("policy."+f, "only means something with policy.public_key")
			}
		}
	}
	if err := policies.CheckSigningAlg(p.Policy.SigningAlg); err != nil {
		r.At("policy.signing_alg", "%v", err)
	}
}

func checkProxy(p *Pod, r *yamlobj.Report) {
	x := p.Proxy
	checkPort(r, "proxy.port", x.Port)
	if (x.CACert == "") != (x.CAKey == "") {
		r.At("proxy", "ca_cert and ca_key go together")
	}
	if x.CACert != "" && x.CADir != "" {
		r.At("proxy.ca_dir", "give either ca_dir (a generated CA) or ca_cert and ca_key (yours), not both")
	}
	for i, s := range x.Resolve {
		if _, err := egress.New(egress.Options{Resolve: []string{s}}); err != nil {
			r.At(yamlobj.Index("proxy.resolve", i), "%s (want HOST:PORT:ADDR[,ADDR])", strings.TrimPrefix(err.Error(), "--resolve "))
		}
	}
	for i, s := range x.AllowRange {
		if _, err := egress.ParseAllowRange(s); err != nil {
			r.At(yamlobj.Index("proxy.allow_range", i), "%s (want a CIDR, e.g. 127.0.0.1/32)", strings.TrimPrefix(err.Error(), "--allow-range "))
		}
	}
	if x.AuditFailure != "closed" && x.AuditFailure != "warn" {
		r.At("proxy.audit_failure", "%q: want closed or warn", x.AuditFailure)
	}
	l := x.Limits
	for name, v := range map[string]int64{
		"max_conns": int64(l.MaxConns), "max_header_bytes": int64(l.MaxHeaderBytes),
		"read_header_timeout": int64(l.ReadHeaderTimeout), "idle_timeout": int64(l.IdleTimeout),
		"handshake_timeout": int64(l.HandshakeTimeout), "tunnel_idle_timeout": int64(l.TunnelIdleTimeout),
		"write_timeout": int64(l.WriteTimeout), "upstream_header_timeout": int64(l.UpstreamHeaderTimeout),
		"dial_timeout": int64(l.DialTimeout),
	} {
		// A zero or negative limit is a mistake, not a way to turn the
		// guard off (as `airlock proxy` refuses it).
		if path := "proxy.limits." + name; r.Given(path) && v <= 0 {
			r.At(path, "must be positive (leave it out for the proxy's default)")
		}
	}
}

// checkAdmin keeps the admin HTTP endpoint on loopback: it has no
// authentication, and the unix socket is the admin API proper.
func checkAdmin(p *Pod, r *yamlobj.Report) {
	if p.Admin.HTTP == "" {
		return
	}
	if why := CheckLoopback(p.Admin.HTTP); why != "" {
		r.At("admin.http", "%q: %s", p.Admin.HTTP, why)
	}
}

// CheckLoopback says why addr, where a listener without authentication
// would serve, is not a loopback host:port; "" when it is one.
func CheckLoopback(addr string) (why string) {
	if why := CheckLoopbackHost(addr); why != "" {
		return why
	}
	_, port, _ := net.SplitHostPort(addr)
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "want a port from 1 to 65535"
	}
	return ""
}

// CheckLoopbackHost is CheckLoopback but for the port, which may be 0 (the
// kernel's pick, said once bound).
func CheckLoopbackHost(addr string) (why string) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "want 127.0.0.1:PORT"
	}
	if a, err := netip.ParseAddr(host); err != nil || !a.IsLoopback() {
		return "must be a loopback address (127.0.0.1:PORT or [::1]:PORT): it has no authentication"
	}
	return ""
}

func checkServices(p *Pod, r *yamlobj.Report) {
	seen := map[string]int{}
	for i := range p.Services {
		s := &p.Services[i]
		path := yamlobj.Index("services", i)
		checkName(r, path+".name", s.Name)
		if j, dup := seen[s.Name]; dup && s.Name != "" {
			r.At(path+".name", "%q is also services[%d]'s name", s.Name, j)
		} else {
			seen[s.Name] = i
		}
		if len(s.Command) > 0 {
			c := s.Command[0]
			if c == "" || (!strings.HasPrefix(c, "/") && strings.Contains(c, "/")) {
				r.At(path+".command[0]", "%q: want an absolute path or a name looked up in PATH", c)
			}
		}
		checkUser(r, path+".user", s.User)
		for j, c := range s.KeepCaps {
			if err := sandbox.CheckKeepCap(c); err != nil {
				r.At(yamlobj.Index(path+".keep_caps", j), "%v", err)
			}
		}
		if s.Preset != "" && !presetPattern.MatchString(s.Preset) {
			r.At(path+".preset", "%q is not a preset name", s.Preset)
		}
		for k := range s.Env {
			switch {
			case !envPattern.MatchString(k):
				r.At(yamlobj.Field(path+".env", k), "%q is not an environment variable name", k)
			case sandbox.IsReservedEnv(k):
				r.At(yamlobj.Field(path+".env", k), "%s is the sandbox's (its proxy and CA), which the pod sets", k)
			}
		}
		for k, sec := range s.Secrets {
			sp := yamlobj.Field(path+".secrets", k)
			switch {
			case !envPattern.MatchString(k):
				r.At(sp, "%q is not an environment variable name", k)
			case sandbox.IsReservedEnv(k):
				r.At(sp, "%s is the sandbox's (its proxy and CA), which the pod sets", k)
			case s.Env[k] != "" || r.Given(yamlobj.Field(path+".env", k)):
				r.At(sp, "%s is also in env: a variable comes from one place", k)
			}
			if (sec.Env == "") == (sec.File == "") {
				r.At(sp, "want exactly one of env (a variable of the supervisor's environment) or file")
			}
		}
		switch s.Landlock.Mode {
		case "hard", "best-effort", "off":
		default:
			r.At(path+".landlock.mode", "%q: want hard, best-effort or off", s.Landlock.Mode)
		}
		// Found here, not at boot after the network is made: a manifest
		// that loads is one the pod can run.
		for field, paths := range map[string][]string{"ro": s.Landlock.RO, "rw": s.Landlock.RW, "exec": s.Landlock.Exec} {
			for j, lp := range paths {
				// Relative ones are made absolute against state_dir:
				// without it, that is its error, not theirs.
				if lp == "" || !filepath.IsAbs(lp) && p.StateDir != "" {
					r.At(yamlobj.Index(path+".landlock."+field, j), "%q: want an absolute path", lp)
				}
			}
		}
		if r.Given(path+".memory_max") && s.MemoryMax <= 0 {
			r.At(path+".memory_max", "%d: want a positive size (leave it out for no limit)", s.MemoryMax)
		}
		if r.Given(path+".pids_max") && s.PidsMax <= 0 {
			r.At(path+".pids_max", "%d: want a positive number of processes (leave it out for no limit)", s.PidsMax)
		}
	}
}

// checkUser reads UID[:GID] or NAME[:GROUP] as `airlock launch --user`
// does; names are looked up at boot. Root is refused: the sandbox never
// runs as uid or gid 0.
func checkUser(r *yamlobj.Report, path, spec string) {
	for i, part := range strings.SplitN(spec, ":", 2) {
		what := map[int]string{0: "user", 1: "group"}[i]
		if n, err := strconv.ParseInt(part, 10, 64); err == nil {
			if n < 1 || n > maxID {
				r.At(path, "%q: %s id %d: want 1 to %d (never root)", spec, what, n, int64(maxID))
				return
			}
			continue
		}
		if !userPattern.MatchString(part) {
			r.At(path, "%q: want UID[:GID] or a user name", spec)
			return
		}
		if part == "root" {
			r.At(path, "%q: the sandbox never runs as root", spec)
			return
		}
	}
}

func checkHealth(p *Pod, r *yamlobj.Report) {
	for i, s := range p.Services {
		h := s.Health
		if h == nil {
			continue
		}
		path := yamlobj.Index("services", i) + ".health"
		var kinds []string
		if h.HTTP != nil {
			kinds = append(kinds, "http")
			checkServicePort(r, path+".http.port", h.HTTP.Port, s, i)
			if !strings.HasPrefix(h.HTTP.Path, "/") {
				r.At(path+".http.path", "%q: want a path starting with /", h.HTTP.Path)
			}
		}
		if h.TCP != nil {
			kinds = append(kinds, "tcp")
			checkServicePort(r, path+".tcp.port", h.TCP.Port, s, i)
		}
		if r.Given(path + ".exec") {
			kinds = append(kinds, "exec")
			if len(h.Exec) == 0 {
				r.At(path+".exec", "must not be empty")
			} else if h.Exec[0] == "" {
				r.At(path+".exec[0]", "the command: must not be empty")
			}
		}
		if len(kinds) != 1 {
			r.At(path, "want exactly one of http, tcp or exec, got %s", orNone(kinds))
		}
		if h.Interval <= 0 {
			r.At(path+".interval", "%s: want a positive duration", h.Interval)
		}
		if h.Timeout <= 0 {
			r.At(path+".timeout", "%s: want a positive duration", h.Timeout)
		} else if h.Interval > 0 && h.Timeout > h.Interval {
			r.At(path+".timeout", "%s is longer than the interval (%s)", h.Timeout, h.Interval)
		}
		if h.Threshold < 1 {
			r.At(path+".threshold", "%d: want at least 1", h.Threshold)
		}
		if h.StartPeriod < 0 {
			r.At(path+".start_period", "%s: want zero or a positive duration", h.StartPeriod)
		}
	}
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, " and ")
}

// checkServicePort says when a port a check or route uses is not one the
// service declares: it would reach nothing, or another service.
func checkServicePort(r *yamlobj.Report, path string, port int, s Service, i int) {
	if r.Failed(yamlobj.Index("services", i) + ".ports") {
		return
	}
	for _, p := range s.Ports {
		if p == port {
			return
		}
	}
	r.At(path, "%d is not one of service %q's ports %v", port, s.Name, s.Ports)
}

func checkRestart(p *Pod, r *yamlobj.Report) {
	for i, s := range p.Services {
		x := s.Restart
		path := yamlobj.Index("services", i) + ".restart"
		switch x.Policy {
		case "always", "on-failure", "never":
		default:
			r.At(path+".policy", "%q: want always, on-failure or never", x.Policy)
		}
		if x.Initial <= 0 {
			r.At(path+".backoff.initial", "%s: want a positive duration", x.Initial)
		}
		if x.Max < x.Initial {
			r.At(path+".backoff.max", "%s is shorter than backoff.initial (%s)", x.Max, x.Initial)
		}
		if x.Multiplier < 1 || x.Multiplier > 100 {
			r.At(path+".backoff.multiplier", "%g: want 1 to 100", x.Multiplier)
		}
		if x.Jitter < 0 || x.Jitter > 1 {
			r.At(path+".backoff.jitter", "%g: want 0 to 1", x.Jitter)
		}
		if x.GiveUpAfter < 1 {
			r.At(path+".give_up.restarts", "%d: want at least 1", x.GiveUpAfter)
		}
		if x.GiveUpWindow <= 0 {
			r.At(path+".give_up.window", "%s: want a positive duration", x.GiveUpWindow)
		}
	}
}

func checkPort(r *yamlobj.Report, path string, port int) bool {
	if port < 1 || port > 65535 {
		r.At(path, "%d: want a port from 1 to 65535", port)
		return false
	}
	return true
}

// checkPorts: the services share one network namespace, so a port is one
// service's, and never the proxy's.
func checkPorts(p *Pod, r *yamlobj.Report) {
	owner := map[int]string{}
	for i, s := range p.Services {
		for j, port := range s.Ports {
			path := yamlobj.Index(yamlobj.Index("services", i)+".ports", j)
			if !checkPort(r, path, port) {
				continue
			}
			switch prev, taken := owner[port]; {
			case port == p.Proxy.Port:
				r.At(path, "%d is the proxy's port (proxy.port)", port)
			case taken:
				r.At(path, "%d is also %s", port, prev)
			}
			owner[port] = fmt.Sprintf("service %q's port", s.Name)
		}
	}
}

// checkAfter: every name in after is a service, and the order has no
// cycle, each cycle reported once, by name, at its first service.
func checkAfter(p *Pod, r *yamlobj.Report) {
	byName := map[string]int{}
	for i, s := range p.Services {
		if _, dup := byName[s.Name]; !dup {
			byName[s.Name] = i
		}
	}
	for i, s := range p.Services {
		for j, dep := range s.After {
			path := yamlobj.Index(yamlobj.Index("services", i)+".after", j)
			if dep == s.Name {
				r.At(path, "%q is the service itself", dep)
			} else if _, ok := byName[dep]; !ok {
				r.At(path, "no service named %q", dep)
			}
		}
	}
	const (
		unseen = iota
		visiting
		done
	)
	state := make([]int, len(p.Services))
	var stack []int
	var visit func(i int)
	visit = func(i int) {
		state[i] = visiting
		stack = append(stack, i)
		for _, dep := range p.Services[i].After {
			j, ok := byName[dep]
			if !ok || j == i {
				continue
			}
			switch state[j] {
			case unseen:
				visit(j)
			case visiting:
				// The cycle is the stack from j on: each service there
				// comes after the next, and the last after j. Name it
				// from its first service in the manifest.
				k := len(stack) - 1
				for stack[k] != j {
					k--
				}
				cycle := stack[k:]
				m := 0
				for c := range cycle {
					if cycle[c] < cycle[m] {
						m = c
					}
				}
				var names []string
				for c := 0; c <= len(cycle); c++ {
					names = append(names, p.Services[cycle[(m+c)%len(cycle)]].Name)
				}
				first := cycle[m]
				r.At(yamlobj.Index("services", first)+".after", "dependency cycle: %s", strings.Join(names, " -> "))
			}
		}
		stack = stack[:len(stack)-1]
		state[i] = done
	}
	for i := range p.Services {
		if state[i] == unseen {
			visit(i)
		}
	}
}

func checkIngress(p *Pod, r *yamlobj.Report) {
	services := map[string]int{}
	for i, s := range p.Services {
		services[s.Name] = i
	}
	names, listens := map[string]int{}, map[string]int{}
	for i, in := range p.Ingress {
		path := yamlobj.Index("ingress", i)
		checkName(r, path+".name", in.Name)
		if j, dup := names[in.Name]; dup && in.Name != "" {
			r.At(path+".name", "%q is also ingress[%d]'s name", in.Name, j)
		} else {
			names[in.Name] = i
		}
		if in.Listen != "" {
			host, port, err := net.SplitHostPort(in.Listen)
			n, perr := strconv.Atoi(port)
			switch {
			case err != nil || host == "":
				r.At(path+".listen", "%q: want HOST:PORT (0.0.0.0:PORT for every interface)", in.Listen)
			case perr != nil || n < 1 || n > 65535:
				r.At(path+".listen", "%q: want a port from 1 to 65535", in.Listen)
			case in.Listen == p.Admin.HTTP:
				r.At(path+".listen", "%q is also admin.http", in.Listen)
			default:
				if j, dup := listens[in.Listen]; dup {
					r.At(path+".listen", "%q is also ingress[%d]'s", in.Listen, j)
				}
				listens[in.Listen] = i
			}
		}
		if in.Service == "" {
			continue
		}
		si, ok := services[in.Service]
		if !ok {
			r.At(path+".service", "no service named %q", in.Service)
			continue
		}
		if r.Given(path + ".port") {
			checkServicePort(r, path+".port", in.Port, p.Services[si], si)
		}
	}
}

// checkSandboxes refuses a limit that would bound nothing: a one-off
// always has both, and the pod a count of them.
func checkSandboxes(p *Pod, r *yamlobj.Report) {
	if p.Sandboxes.MemoryMax <= 0 {
		r.At("sandboxes.memory_max", "%d: want a positive size (a one-off sandbox always has a memory limit)", p.Sandboxes.MemoryMax)
	}
	if p.Sandboxes.PidsMax <= 0 {
		r.At("sandboxes.pids_max", "%d: want a positive number of processes (a one-off sandbox always has a pids limit)", p.Sandboxes.PidsMax)
	}
	if p.Sandboxes.Max <= 0 {
		r.At("sandboxes.max", "%d: want a positive number of one-off sandboxes (how many may run at once: each holds up to memory_max and pids_max)", p.Sandboxes.Max)
	}
}
