// Package manifest reads the pod manifest that `airlock up` boots: the
// policy bundle and its pin, the proxy, the admin API, the services and
// the ingress routes.
//
// Reading is strict, like Caddy's StrictUnmarshalJSON and runc's
// validator: an unknown field, a missing required field, a value of the
// wrong type or an invalid value is an error naming the file, the line
// and the field path (`pod.yaml:14: services[1].health.interval: "1x" is
// not a duration`), and every error is reported at once. A manifest that
// loads is complete: defaults are applied and paths are absolute, so the
// supervisor has nothing left to check before its first side effect.
package manifest

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/yamlobj"
	"github.com/airlock-sandbox/airlock/proxy"
)

// Pod is one pod: what `airlock up` boots.
type Pod struct {
	// Name labels the pod (cgroup names, events); required, [a-z0-9-]+.
	Name string
	// StateDir holds the pod's runtime files (events, audit log, admin
	// socket); state_dir, required, absolute after Load.
	StateDir string
	Events   Events
	Policy   Policy
	Proxy    Proxy
	Admin    Admin
	// Services are the pod's processes; required, at least one.
	Services []Service
	Ingress  []Ingress
	// Sandboxes bounds the one-off sandboxes launched in the pod.
	Sandboxes Sandboxes
	// StopGrace is how long a service has after SIGTERM before its cgroup
	// is killed; stop_grace, default 10s.
	StopGrace time.Duration
}

// Events is the pod's event file (agent-inbox.jsonl).
type Events struct {
	// File is the events file; file, default agent-inbox.jsonl, relative
	// to the state dir; absolute after Load.
	File string
	// MaxBytes is the size at which the file is rotated; max_bytes,
	// default 10 MiB (a number or a K/M/G size).
	MaxBytes int64
	// Keep is how many rotated files are kept; keep, default 3.
	Keep int
}

// Policy is the policy bundle and its pin; the fields mirror the
// `--policy*` flags of `airlock policy verify` and `airlock proxy`.
type Policy struct {
	// Bundle is a bundle directory or .tar.gz; empty means the embedded
	// presets.
	Bundle string
	// SHA256 pins the bundle hash (sha256:<64 hex>, normalised so).
	SHA256 string
	// Lock is the lock file to enforce (default: <bundle>/airlock.lock
	// when it exists).
	Lock string
	// PublicKey is a PEM public key file: the bundle must carry a valid
	// OPA signature (public_key).
	PublicKey string
	// KeyID and SigningAlg go with PublicKey (key_id, default "default";
	// signing_alg, default RS256).
	KeyID      string
	SigningAlg string
	// Watch reloads a bundle directory when it changes; default true.
	Watch bool
	// Quarantine denies everything after a rejected reload instead of
	// keeping the last good policy; default false.
	Quarantine bool
}

// Proxy is the pod's egress proxy.
type Proxy struct {
	// Port is the proxy's listener inside the pod (127.0.0.1:Port);
	// default 3128.
	Port int
	// CADir is the generated CA's directory (ca_dir; default: as
	// `airlock proxy --ca-dir`, left empty here). CACert and CAKey
	// (ca_cert, ca_key) are an operator's CA instead, given together.
	CADir  string
	CACert string
	CAKey  string
	// UpstreamCA are extra PEM files trusted upstream (upstream_ca).
	UpstreamCA []string
	// Resolve pins names, HOST:PORT:ADDR[,ADDR] (curl's --resolve).
	Resolve []string
	// AllowRange are CIDRs the SSRF guard lets through (allow_range,
	// UNSAFE).
	AllowRange []string
	// AuditLog is the audit log (audit_log, default
	// <state_dir>/audit.jsonl).
	AuditLog string
	// AuditFailure is closed (default) or warn (audit_failure).
	AuditFailure string
	Limits       Limits
}

// Limits are the proxy's limits (max_conns, max_header_bytes,
// read_header_timeout, idle_timeout, handshake_timeout,
// tunnel_idle_timeout, write_timeout, upstream_header_timeout) and its
// dial_timeout; a zero value means the proxy's default
// (proxy.DefaultLimits, egress.DefaultDialTimeout). A value given in the
// manifest must be positive.
type Limits struct {
	proxy.Limits
	DialTimeout time.Duration
}

// Admin is the supervisor's admin API.
type Admin struct {
	// Socket is the admin unix socket (default <state_dir>/admin.sock).
	Socket string
	// HTTP, when set, is a loopback host:port serving /healthz, /readyz
	// and /metrics.
	HTTP string
}

// Service is one process of the pod, in its own sandbox and cgroup.
type Service struct {
	// Name is required, [a-z0-9-]+, unique in the pod.
	Name string
	// Command is required; Command[0] is absolute or looked up in PATH
	// at boot (left as given here).
	Command []string
	// Dir is the working directory (absolute after Load); empty: the
	// launcher's default.
	Dir string
	// User is UID[:GID] or a user name, never root; default 998:998 as
	// `airlock launch`.
	User string
	// KeepCaps are capabilities kept in every set (keep_caps).
	KeepCaps []string
	// Preset is required: the preset deciding this service's egress.
	Preset string
	// Env is the service's environment, besides what the sandbox sets.
	Env map[string]string
	// Secrets are environment variables whose values come from the
	// supervisor's environment or a file.
	Secrets  map[string]Secret
	Landlock Landlock
	// MemoryMax and PidsMax are cgroup limits (memory_max, pids_max);
	// 0: none.
	MemoryMax int64
	PidsMax   int64
	// Ports the service listens on inside the pod; other services may
	// connect to them.
	Ports  []int
	Health *Health
	// After names services that must be healthy (or started, when they
	// have no health check) before this one starts.
	After   []string
	Restart Restart
}

// Secret is where a secret's value comes from: exactly one of Env (a
// variable of the supervisor's environment) and File (absolute after
// Load).
type Secret struct{ Env, File string }

// Landlock are a service's Landlock paths (absolute after Load) and mode
// (hard, best-effort or off; default hard).
type Landlock struct {
	RO, RW, Exec []string
	Mode         string
}

// Health is a service's health check: exactly one of HTTP, TCP and Exec.
type Health struct {
	HTTP *HTTPCheck
	TCP  *TCPCheck
	// Exec runs inside the service's sandbox; exit 0 is healthy.
	Exec []string
	// Interval between checks, default 2s.
	Interval time.Duration
	// Timeout of one check, default 1s, at most Interval.
	Timeout time.Duration
	// Threshold is how many consecutive failures make the service
	// unhealthy, default 3.
	Threshold int
	// StartPeriod: failures during it do not count (start_period,
	// default 0).
	StartPeriod time.Duration
}

// HTTPCheck is healthy on a 2xx or 3xx answer to GET Path (default /) on
// 127.0.0.1:Port inside the pod.
type HTTPCheck struct {
	Port int
	Path string
}

// TCPCheck is healthy when 127.0.0.1:Port inside the pod accepts.
type TCPCheck struct{ Port int }

// Restart is a service's restart policy. YAML: restart: {policy,
// backoff: {initial, max, multiplier, jitter}, give_up: {restarts,
// window}}.
type Restart struct {
	// Policy is always, on-failure (default) or never.
	Policy string
	// Initial, Max, Multiplier and Jitter shape the exponential backoff
	// (defaults 200ms, 30s, 2, 0.2).
	Initial    time.Duration
	Max        time.Duration
	Multiplier float64
	Jitter     float64
	// GiveUpAfter restarts within GiveUpWindow is a crash loop, given up
	// on (defaults 5 and 60s).
	GiveUpAfter  int
	GiveUpWindow time.Duration
}

// Sandboxes are the cgroup limits of each one-off sandbox launched in the
// pod (POST /v1/sandboxes, `airlock launch --pod-socket`, `airlock spawn
// --pod-socket`): memory_max (a size) and pids_max, default
// DefaultSandboxMemoryMax and DefaultSandboxPidsMax, positive. A launch
// may ask for less, never more. Max is how many may run at once, default
// DefaultSandboxesMax, positive: each one's limits bound it alone, so
// without a count N launches hold N times them.
type Sandboxes struct {
	MemoryMax int64
	PidsMax   int64
	Max       int
}

// Ingress is a route from the host to a service's port, behind
// per-operator API keys.
type Ingress struct {
	// Name is required, unique.
	Name string
	// Listen is the host address, host:port; required.
	Listen string
	// Service and Port: where the route leads (Port one of the
	// service's ports); required.
	Service string
	Port    int
	// Keys is the key file (absolute after Load; its existence is checked
	// at boot by the ingress, not here); required.
	Keys string
}

// Load reads, parses and validates the manifest at path. Relative paths
// in it are resolved against the manifest's directory.
func Load(path string) (*Pod, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return Parse(path, data, filepath.Dir(abs))
}

// Parse parses and validates a manifest; name labels errors (a file
// name), and relative paths are resolved against baseDir, which must be
// absolute.
func Parse(name string, data []byte, baseDir string) (*Pod, error) {
	if !filepath.IsAbs(baseDir) {
		return nil, fmt.Errorf("manifest %s: base directory %q is not absolute", name, baseDir)
	}
	d := yamlobj.NewDecoder(name)
	p := readPod(d, data)
	if p == nil {
		return nil, d.Err()
	}
	resolve(p, baseDir)
	validate(p, d.Report)
	if err := d.Err(); err != nil {
		return nil, err
	}
	return p, nil
}
