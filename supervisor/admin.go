package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/nodeopts"
	"github.com/airlock-sandbox/airlock/internal/trusted"
)

// Status is the pod as the admin API, `airlock status` and /readyz show it.
type Status struct {
	Pod    string  `json:"pod"`
	Ready  bool    `json:"ready"`
	Policy string  `json:"policy"`
	Uptime float64 `json:"uptime_seconds"`
	// Booted tells one run of the pod from the next (its services'
	// exits are counted from there).
	Booted   time.Time       `json:"booted"`
	Services []ServiceStatus `json:"services"`
	Ingress  []IngressStatus `json:"ingress,omitempty"`
	Boot     []BootStep      `json:"boot"`
	Events   string          `json:"events_file"`
	// EventsFailed counts the events the events file did not take since
	// the pod booted (each in the supervisor's log): an inbox that stays
	// quiet while this grows is not a quiet pod.
	EventsFailed int64  `json:"events_failed"`
	Audit        string `json:"audit_log"`
}

// ServiceStatus is one service's state.
type ServiceStatus struct {
	Name     string    `json:"name"`
	State    string    `json:"state"`
	Since    time.Time `json:"since"`
	Preset   string    `json:"preset"`
	Pid      int       `json:"pid,omitempty"`
	Restarts int       `json:"restarts"`
	LastExit *int      `json:"last_exit,omitempty"`
	Detail   string    `json:"detail,omitempty"`
	// Exits counts the instances that have exited since the pod booted,
	// whatever the reason (operator restarts included): a watchdog
	// polling now and then tells by it that one died in between, though
	// the supervisor restarted it.
	Exits int `json:"exits"`
	// Launches counts the instances begun since the pod booted, counted
	// as the state turns to starting: a restart's caller waits for it to
	// grow, and then sees no more of the old instance.
	Launches int `json:"launches"`
	// OOMKills and LastOutput are the last exited instance's: the
	// processes the OOM killer killed in its cgroups, and its last lines
	// of output (at most 40, each cut at 2 KiB), where a V8 heap
	// exhaustion says so.
	OOMKills   int64    `json:"oom_kills"`
	LastOutput []string `json:"last_output,omitempty"`
	// NodeHeapMB is the --max-old-space-size in the NODE_OPTIONS its
	// launches get, MemoryMax their memory limit (the manifest's, or an
	// operator's restart's).
	NodeHeapMB int   `json:"node_heap_mb,omitempty"`
	MemoryMax  int64 `json:"memory_max,omitempty"`
}

// IngressStatus is one ingress route.
type IngressStatus struct {
	Name    string `json:"name"`
	Listen  string `json:"listen"`
	Service string `json:"service"`
	Port    int    `json:"port"`
}

func (s *service) status() ServiceStatus {
	heap := nodeopts.HeapMB(s.nodeOptions())
	s.mu.Lock()
	defer s.mu.Unlock()
	return ServiceStatus{Name: s.name, State: s.state, Since: s.since, Preset: s.spec.Preset, Pid: s.pid,
		Restarts: s.restarts, LastExit: s.lastExit, Detail: s.detail,
		Exits: s.exits, Launches: s.launches, OOMKills: s.oomKills, LastOutput: s.lastOutput, NodeHeapMB: heap, MemoryMax: s.memoryMax}
}

// Status reports the pod's state now.
func (p *Pod) Status() Status {
	p.bootMu.Lock()
	boot := append([]BootStep(nil), p.boot...)
	p.bootMu.Unlock()
	st := Status{Pod: p.m.Name, Ready: p.Ready(), Uptime: time.Since(p.booted).Seconds(), Booted: p.booted, Boot: boot, Events: p.m.Events.File,
		EventsFailed: p.eventsFailed.Load(), Audit: p.m.Proxy.AuditLog}
	if p.engine != nil {
		st.Policy = p.engine.Hash()
	}
	for _, s := range p.services {
		st.Services = append(st.Services, s.status())
	}
	for i, r := range p.m.Ingress {
		listen := r.Listen
		if i < len(p.ingress) {
			listen = p.ingress[i].Addr().String()
		}
		st.Ingress = append(st.Ingress, IngressStatus{Name: r.Name, Listen: listen, Service: r.Service, Port: r.Port})
	}
	return st
}

// socketDir checks that the admin socket's directory is the pod's root's
// alone (trusted.Path, and no sticky /tmp either): where another user may
// create files, they could bind the socket's path while the pod is down,
// and refuse its next boot or be taken for the pod by its clients.
func socketDir(path string) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err == nil {
		err = trusted.Mode(fi)
	}
	if err == nil {
		err = trusted.Path(dir)
	}
	if err != nil {
		return fmt.Errorf("admin socket %s: its directory %s: %w; put it where only the pod's user may write (the state_dir, its default)", path, dir, err)
	}
	return nil
}

// admin serves the admin API on a unix socket only its owner may use
// (there is no TCP admin port: restarting services is not for the
// network), and, when the manifest asks, /healthz, /readyz and /metrics on
// a loopback address.
type admin struct {
	sock, http *http.Server
}

func newAdmin(p *Pod) (*admin, error) {
	a := &admin{}
	path := p.m.Admin.Socket
	if err := socketDir(path); err != nil {
		return nil, err
	}
	// A socket left by a pod that was killed is removed; one something
	// still listens on is another pod's (the pod's lock covers its name
	// and state, not this path), and anything but a socket there is not
	// ours to remove either.
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("admin socket %s: a %v file is in the way; remove it or choose another admin.socket", path, fi.Mode().Type())
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("admin socket %s: another process listens on it (another pod's?); choose another admin.socket", path)
		}
		os.Remove(path)
	}
	// The umask covers the window between bind and chmod.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, p.Status()) })
	mux.HandleFunc("POST /v1/services/{name}/restart", func(w http.ResponseWriter, r *http.Request) {
		s, ok := p.byName[r.PathValue("name")]
		if !ok {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no service %q in pod %s", r.PathValue("name"), p.m.Name)})
			return
		}
		change, err := decodeRestart(r)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		if err := s.restart(change); err != nil {
			writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]string{"restarting": s.name})
	})
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) { serveEvents(p, w, r) })
	mux.HandleFunc("GET /v1/dial", func(w http.ResponseWriter, r *http.Request) { serveDial(p, w, r) })
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) { serveSandboxLaunch(p, w, r) })
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) { serveSandboxStop(p, w, r) })
	a.sock = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: adminIdle, ConnContext: withConn}
	go a.sock.Serve(ln)

	if p.m.Admin.HTTP != "" {
		hl, err := net.Listen("tcp", p.m.Admin.HTTP)
		if err != nil {
			a.close()
			return nil, fmt.Errorf("admin http: %w", err)
		}
		hm := http.NewServeMux()
		hm.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
		})
		hm.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
			st := p.Status()
			code := http.StatusOK
			if !st.Ready {
				code = http.StatusServiceUnavailable
			}
			services := map[string]string{}
			for _, s := range st.Services {
				services[s.Name] = s.State
			}
			writeJSON(w, code, map[string]any{"ready": st.Ready, "services": services})
		})
		hm.Handle("GET /metrics", p.proxy.Metrics().Handler())
		a.http = &http.Server{Handler: hm, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: adminIdle}
		go a.http.Serve(hl)
	}
	return a, nil
}

// adminIdle closes a client's kept connection it has left unused: a
// client that keeps one per request (a watchdog asks every round) would
// pile them up for the pod's life. A hijacked stream (a one-off's stdio,
// a dial) is not idle.
const adminIdle = time.Minute

func (a *admin) close() {
	for _, s := range []*http.Server{a.sock, a.http} {
		if s != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			s.Shutdown(ctx)
			cancel()
			s.Close()
		}
	}
}

// serveEvents streams the events file as JSON lines: those since ?since=
// (RFC 3339), then, with ?follow=1, new ones as they are written.
func serveEvents(p *Pod, w http.ResponseWriter, r *http.Request) {
	var since time.Time
	if s := r.URL.Query().Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "since: want an RFC 3339 time: " + err.Error()})
			return
		}
		since = t
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	if r.URL.Query().Get("follow") == "" {
		evs, err := events.Read(p.m.Events.File, since)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		for _, e := range evs {
			enc.Encode(e)
		}
		return
	}
	flush()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-p.ctx.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	err := events.Follow(ctx, p.m.Events.File, since, func(e events.Event) {
		enc.Encode(e)
		flush()
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		p.log.Error("events follow", "err", err)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// AdminSocket is the path of the pod's admin socket.
func (p *Pod) AdminSocket() string { return p.m.Admin.Socket }
