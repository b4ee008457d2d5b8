package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/proxy"
)

// minimal is the smallest valid manifest; error cases add to it, so their
// lines start at 7.
const minimal = `name: pod
state_dir: /var/lib/pod
services:
  - name: web
    command: [/bin/true]
    preset: strict
`

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // every error, in order
	}{
		{"empty", ``, []string{`pod.yaml: the manifest is empty`}},
		{"only comments", "# nothing yet\n", []string{`pod.yaml: the manifest is empty`}},
		{"syntax", "name: [a\n", []string{`pod.yaml:1: did not find expected ',' or ']'`}},
		{"not a mapping", "- a\n", []string{`pod.yaml:1: want a mapping, got a list`}},
		{"two documents", minimal + "---\nname: b\n", []string{`pod.yaml:7: a second YAML document: a manifest is one document`}},
		{"missing required", "services:\n  - name: web\n", []string{
			`pod.yaml:1: name: missing: the field is required`,
			`pod.yaml:1: state_dir: missing: the field is required`,
			`pod.yaml:2: services[0].command: missing: the field is required`,
			`pod.yaml:2: services[0].preset: missing: the field is required`,
		}},
		{"null required", "name:\nstate_dir: /s\nservices: []\n", []string{
			`pod.yaml:1: name: missing: the field is required`,
			`pod.yaml:3: services: must not be empty`,
		}},
		{"unknown field", minimal + "    colour: blue\n", []string{
			`pod.yaml:7: services[0].colour: unknown field (want one of: name, command, dir, user, keep_caps, preset, env, secrets, landlock, memory_max, pids_max, ports, health, after, restart)`,
		}},
		{"unknown top-level field", minimal + "servics: []\n", []string{
			`pod.yaml:7: servics: unknown field (want one of: name, state_dir, events, policy, proxy, admin, services, ingress, sandboxes, stop_grace)`,
		}},
		{"duplicate field", minimal + "name: again\n", []string{`pod.yaml:7: name: duplicate field (first at line 1)`}},
		{"empty string", minimal + "    dir: ''\n", []string{`pod.yaml:7: services[0].dir: must not be empty (leave the field out for its default)`}},
		{"wrong type: string", strings.Replace(minimal, "preset: strict", "preset: {a: b}", 1), []string{`pod.yaml:6: services[0].preset: want a string, got a mapping`}},
		{"wrong type: bool as string", "name: true\nstate_dir: /s\nservices: [{name: a, command: [x], preset: p}]\n", []string{`pod.yaml:1: name: want a string, got a boolean (true)`}},
		{"wrong type: list", minimal + "    after: web\n", []string{`pod.yaml:7: services[0].after: want a list of strings, got "web"`}},
		{"wrong type: mapping", minimal + "proxy: 3128\n", []string{`pod.yaml:7: proxy: want a mapping, got a number (3128)`}},
		{"wrong type: integer", minimal + "    pids_max: many\n", []string{`pod.yaml:7: services[0].pids_max: want an integer, got "many"`}},
		{"wrong type: bool", minimal + "policy: {watch: yes}\n", []string{`pod.yaml:7: policy.watch: want true or false, got "yes"`}},
		{"wrong type: port in list", minimal + "    ports: [80, http]\n", []string{`pod.yaml:7: services[0].ports[1]: want an integer, got "http"`}},
		{"bad duration", minimal + "    health: {tcp: {port: 1}, interval: 1x}\n    ports: [1]\n", []string{
			`pod.yaml:7: services[0].health.interval: "1x" is not a duration (want e.g. "200ms", "2s", "1m")`,
		}},
		{"duration without unit", minimal + "stop_grace: 10\n", []string{
			`pod.yaml:7: stop_grace: a number (10) is not a duration: write it with a unit, as "200ms" or "2s"`,
		}},
		{"stop grace", minimal + "stop_grace: 0s\n", []string{`pod.yaml:7: stop_grace: 0s: want a positive duration`}},
		{"bad name", "name: My_Pod\nstate_dir: /s\nservices: [{name: Web, command: [x], preset: p}]\n", []string{
			`pod.yaml:1: name: "My_Pod": want lower-case letters, digits and - only (it names cgroups)`,
			`pod.yaml:3: services[0].name: "Web": want lower-case letters, digits and - only (it names cgroups)`,
		}},
		{"duplicate service", minimal + "  - name: web\n    command: [/bin/false]\n    preset: strict\n", []string{
			`pod.yaml:7: services[1].name: "web" is also services[0]'s name`,
		}},
		{"relative command path", strings.Replace(minimal, "/bin/true", "bin/true", 1), []string{
			`pod.yaml:5: services[0].command[0]: "bin/true": want an absolute path or a name looked up in PATH`,
		}},
		{"empty command", strings.Replace(minimal, "[/bin/true]", "[]", 1), []string{`pod.yaml:5: services[0].command: must not be empty`}},
		{"root user", minimal + "    user: \"0:0\"\n", []string{`pod.yaml:7: services[0].user: "0:0": user id 0: want 1 to 4294967294 (never root)`}},
		{"root by name", minimal + "    user: root\n", []string{`pod.yaml:7: services[0].user: "root": the sandbox never runs as root`}},
		{"bad user", minimal + "    user: \"a b\"\n", []string{`pod.yaml:7: services[0].user: "a b": want UID[:GID] or a user name`}},
		{"unknown cap", minimal + "    keep_caps: [CAP_NET_BIND_SERVICE, CAP_FLY]\n", []string{`pod.yaml:7: services[0].keep_caps[1]: unknown capability "CAP_FLY"`}},
		{"widening cap", minimal + "    keep_caps: [CAP_NET_ADMIN]\n", []string{`pod.yaml:7: services[0].keep_caps[0]: capability "CAP_NET_ADMIN" would undo the sandbox's boundaries; those a sandbox may keep: CAP_NET_BIND_SERVICE, CAP_KILL, CAP_IPC_LOCK`}},
		{"bad preset", strings.Replace(minimal, "preset: strict", "preset: no-such", 1), []string{`pod.yaml:6: services[0].preset: "no-such" is not a preset name`}},
		{"bad env name", minimal + "    env: {\"A-B\": x}\n", []string{`pod.yaml:7: services[0].env.A-B: "A-B" is not an environment variable name`}},
		{"env value list", minimal + "    env: {A: [x]}\n", []string{`pod.yaml:7: services[0].env.A: want a string, got a list`}},
		{"secret both", minimal + "    secrets: {TOKEN: {env: T, file: /t}}\n", []string{
			`pod.yaml:7: services[0].secrets.TOKEN: want exactly one of env (a variable of the supervisor's environment) or file`,
		}},
		{"secret neither", minimal + "    secrets:\n      TOKEN: {}\n", []string{
			`pod.yaml:8: services[0].secrets.TOKEN: want exactly one of env (a variable of the supervisor's environment) or file`,
		}},
		{"secret unknown field", minimal + "    secrets: {TOKEN: {path: /t}}\n", []string{
			`pod.yaml:7: services[0].secrets.TOKEN.path: unknown field (want one of: env, file)`,
			`pod.yaml:7: services[0].secrets.TOKEN: want exactly one of env (a variable of the supervisor's environment) or file`,
		}},
		{"secret also env", minimal + "    env: {TOKEN: x}\n    secrets: {TOKEN: {env: T}}\n", []string{
			`pod.yaml:8: services[0].secrets.TOKEN: TOKEN is also in env: a variable comes from one place`,
		}},
		{"landlock mode", minimal + "    landlock: {mode: soft}\n", []string{`pod.yaml:7: services[0].landlock.mode: "soft": want hard, best-effort or off`}},
		{"landlock path empty", minimal + "    landlock: {rw: [\"\"]}\n", []string{
			`pod.yaml:7: services[0].landlock.rw[0]: "": want an absolute path`,
		}},
		{"health command empty", minimal + "    health: {exec: [\"\"]}\n", []string{`pod.yaml:7: services[0].health.exec[0]: the command: must not be empty`}},
		{"memory suffix", minimal + "    memory_max: 12X\n", []string{
			`pod.yaml:7: services[0].memory_max: "12X" is not a size (want bytes, or a number with K, M or G: "512M")`,
		}},
		{"memory zero", minimal + "    memory_max: 0\n", []string{`pod.yaml:7: services[0].memory_max: 0: want a positive size (leave it out for no limit)`}},
		{"memory overflow", minimal + "    memory_max: 99999999999G\n", []string{
			`pod.yaml:7: services[0].memory_max: "99999999999G" is not a size (want bytes, or a number with K, M or G: "512M")`,
		}},
		{"pids zero", minimal + "    pids_max: 0\n", []string{`pod.yaml:7: services[0].pids_max: 0: want a positive number of processes (leave it out for no limit)`}},
		// A one-off's limits are there when the manifest says nothing:
		// none can be taken away.
		{"one-off limits", minimal + "sandboxes: {memory_max: 0, pids_max: -1, max: 0}\n", []string{
			`pod.yaml:7: sandboxes.memory_max: 0: want a positive size (a one-off sandbox always has a memory limit)`,
			`pod.yaml:7: sandboxes.pids_max: -1: want a positive number of processes (a one-off sandbox always has a pids limit)`,
			`pod.yaml:7: sandboxes.max: 0: want a positive number of one-off sandboxes (how many may run at once: each holds up to memory_max and pids_max)`,
		}},
		// Nor their count: without it N launches hold N times the limits.
		{"one-off count", minimal + "sandboxes: {max: -1}\n", []string{
			`pod.yaml:7: sandboxes.max: -1: want a positive number of one-off sandboxes (how many may run at once: each holds up to memory_max and pids_max)`,
		}},
		{"one-off count not a number", minimal + "sandboxes: {max: many}\n", []string{`pod.yaml:7: sandboxes.max: want an integer, got "many"`}},
		{"one-off unknown field", minimal + "sandboxes: {count: 3}\n", []string{
			`pod.yaml:7: sandboxes.count: unknown field (want one of: memory_max, pids_max, max)`,
		}},
		{"port range", minimal + "    ports: [0, 70000]\n", []string{
			`pod.yaml:7: services[0].ports[0]: 0: want a port from 1 to 65535`,
			`pod.yaml:7: services[0].ports[1]: 70000: want a port from 1 to 65535`,
		}},
		{"port of two services", minimal + "    ports: [8080]\n  - name: api\n    command: [x]\n    preset: p\n    ports: [8080]\n", []string{
			`pod.yaml:11: services[1].ports[0]: 8080 is also service "web"'s port`,
		}},
		{"proxy port collision", minimal + "    ports: [3128]\n", []string{`pod.yaml:7: services[0].ports[0]: 3128 is the proxy's port (proxy.port)`}},
		{"proxy port collision, set", minimal + "    ports: [8080]\nproxy: {port: 8080}\n", []string{`pod.yaml:7: services[0].ports[0]: 8080 is the proxy's port (proxy.port)`}},
		{"health none", minimal + "    health: {interval: 1s}\n", []string{`pod.yaml:7: services[0].health: want exactly one of http, tcp or exec, got none`}},
		{"health two", minimal + "    ports: [80]\n    health:\n      http: {port: 80}\n      exec: [check]\n", []string{
			`pod.yaml:8: services[0].health: want exactly one of http, tcp or exec, got http and exec`,
		}},
		{"health port", minimal + "    ports: [80]\n    health: {tcp: {port: 81}}\n", []string{`pod.yaml:8: services[0].health.tcp.port: 81 is not one of service "web"'s ports [80]`}},
		{"health port missing", minimal + "    health: {http: {path: /}}\n", []string{`pod.yaml:7: services[0].health.http.port: missing: the field is required`}},
		{"health path", minimal + "    ports: [80]\n    health: {http: {port: 80, path: healthz}}\n", []string{
			`pod.yaml:8: services[0].health.http.path: "healthz": want a path starting with /`,
		}},
		{"health timeout", minimal + "    health: {exec: [x], interval: 1s, timeout: 2s}\n", []string{
			`pod.yaml:7: services[0].health.timeout: 2s is longer than the interval (1s)`,
		}},
		{"health timeout default", minimal + "    health: {exec: [x], interval: 500ms}\n", []string{
			`pod.yaml:7: services[0].health.timeout: 1s is longer than the interval (500ms)`,
		}},
		{"health threshold", minimal + "    health: {exec: [x], threshold: 0, start_period: -1s}\n", []string{
			`pod.yaml:7: services[0].health.threshold: 0: want at least 1`,
			`pod.yaml:7: services[0].health.start_period: -1s: want zero or a positive duration`,
		}},
		{"health exec empty", minimal + "    health: {exec: []}\n", []string{`pod.yaml:7: services[0].health.exec: must not be empty`}},
		{"after unknown", minimal + "    after: [db, web]\n", []string{
			`pod.yaml:7: services[0].after[0]: no service named "db"`,
			`pod.yaml:7: services[0].after[1]: "web" is the service itself`,
		}},
		{"after cycle", `name: pod
state_dir: /s
services:
  - {name: a, command: [x], preset: p, after: [b]}
  - {name: b, command: [x], preset: p, after: [c]}
  - {name: c, command: [x], preset: p, after: [a]}
  - {name: d, command: [x], preset: p, after: [a]}
`, []string{`pod.yaml:4: services[0].after: dependency cycle: a -> b -> c -> a`}},
		{"after cycle, not first", `name: pod
state_dir: /s
services:
  - {name: d, command: [x], preset: p, after: [b]}
  - {name: a, command: [x], preset: p, after: [b]}
  - {name: b, command: [x], preset: p, after: [a]}
`, []string{`pod.yaml:5: services[1].after: dependency cycle: a -> b -> a`}},
		{"restart", minimal + `    restart:
      policy: sometimes
      backoff: {initial: 0s, multiplier: 0.5, jitter: 1.5}
      give_up: {restarts: 0, window: 0s}
`, []string{
			`pod.yaml:8: services[0].restart.policy: "sometimes": want always, on-failure or never`,
			`pod.yaml:9: services[0].restart.backoff.initial: 0s: want a positive duration`,
			`pod.yaml:9: services[0].restart.backoff.multiplier: 0.5: want 1 to 100`,
			`pod.yaml:9: services[0].restart.backoff.jitter: 1.5: want 0 to 1`,
			`pod.yaml:10: services[0].restart.give_up.restarts: 0: want at least 1`,
			`pod.yaml:10: services[0].restart.give_up.window: 0s: want a positive duration`,
		}},
		{"restart max", minimal + "    restart: {backoff: {initial: 1m}}\n", []string{
			`pod.yaml:7: services[0].restart.backoff.max: 30s is shorter than backoff.initial (1m0s)`,
		}},
		{"restart multiplier type", minimal + "    restart: {backoff: {multiplier: double}}\n", []string{
			`pod.yaml:7: services[0].restart.backoff.multiplier: want a number, got "double"`,
		}},
		{"resolve", minimal + "proxy:\n  resolve: [api.model.test:18443:127.0.0.1, api.model.test:443, a:99999:127.0.0.1, a:1:nope]\n", []string{
			`pod.yaml:8: proxy.resolve[1]: "api.model.test:443": want HOST:PORT:ADDR[,ADDR] (want HOST:PORT:ADDR[,ADDR])`,
			`pod.yaml:8: proxy.resolve[2]: "a:99999:127.0.0.1": bad port (want HOST:PORT:ADDR[,ADDR])`,
			`pod.yaml:8: proxy.resolve[3]: "a:1:nope": ParseAddr("nope"): unable to parse IP (want HOST:PORT:ADDR[,ADDR])`,
		}},
		{"allow range", minimal + "proxy: {allow_range: [127.0.0.1/32, 10.0.0.0]}\n", []string{
			`pod.yaml:7: proxy.allow_range[1]: "10.0.0.0": netip.ParsePrefix("10.0.0.0"): no '/' (want a CIDR, e.g. 127.0.0.1/32)`,
		}},
		{"audit failure", minimal + "proxy: {audit_failure: open}\n", []string{`pod.yaml:7: proxy.audit_failure: "open": want closed or warn`}},
		{"ca pair", minimal + "proxy:\n  ca_cert: /ca.pem\n", []string{`pod.yaml:7: proxy: ca_cert and ca_key go together`}},
		{"ca both", minimal + "proxy: {ca_dir: /ca, ca_cert: /c, ca_key: /k}\n", []string{
			`pod.yaml:7: proxy.ca_dir: give either ca_dir (a generated CA) or ca_cert and ca_key (yours), not both`,
		}},
		{"limits", minimal + "proxy:\n  limits:\n    max_conns: 0\n    idle_timeout: -1s\n    dial_timeout: 5s\n", []string{
			`pod.yaml:9: proxy.limits.max_conns: must be positive (leave it out for the proxy's default)`,
			`pod.yaml:10: proxy.limits.idle_timeout: must be positive (leave it out for the proxy's default)`,
		}},
		{"unknown limit", minimal + "proxy: {limits: {max_conn: 5}}\n", []string{
			`pod.yaml:7: proxy.limits.max_conn: unknown field (want one of: max_conns, max_header_bytes, read_header_timeout, idle_timeout, handshake_timeout, tunnel_idle_timeout, write_timeout, upstream_header_timeout, dial_timeout)`,
		}},
		{"proxy port", minimal + "proxy: {port: 0}\n", []string{`pod.yaml:7: proxy.port: 0: want a port from 1 to 65535`}},
		{"pin", minimal + "policy: {sha256: abc}\n", []string{`pod.yaml:7: policy.sha256: "abc": want sha256:<64 hex digits> (see ` + "`airlock policy hash`" + `)`}},
		{"key id without key", minimal + "policy:\n  key_id: k1\n", []string{`pod.yaml:8: policy.key_id: only means something with policy.public_key`}},
		{"admin not loopback", minimal + "admin: {http: 0.0.0.0:9090}\n", []string{
			`pod.yaml:7: admin.http: "0.0.0.0:9090": must be a loopback address (127.0.0.1:PORT or [::1]:PORT): it has no authentication`,
		}},
		{"admin name", minimal + "admin: {http: localhost:9090}\n", []string{
			`pod.yaml:7: admin.http: "localhost:9090": must be a loopback address (127.0.0.1:PORT or [::1]:PORT): it has no authentication`,
		}},
		{"admin port", minimal + "admin: {http: \"127.0.0.1:x\"}\n", []string{`pod.yaml:7: admin.http: "127.0.0.1:x": want a port from 1 to 65535`}},
		{"events", minimal + "events: {max_bytes: 0, keep: 0}\n", []string{
			`pod.yaml:7: events.max_bytes: 0: want a positive size`,
			`pod.yaml:7: events.keep: 0: want 1 to 1000 rotated files (at least 1: rotation must not lose lines)`,
		}},
		{"events kept", minimal + "events: {keep: 1000000000}\n", []string{
			`pod.yaml:7: events.keep: 1000000000: want 1 to 1000 rotated files (at least 1: rotation must not lose lines)`,
		}},
		{"sandbox env", minimal + "    env: {HTTPS_PROXY: http://elsewhere.test:3128}\n    secrets: {SSL_CERT_FILE: {file: /etc/ca.pem}}\n", []string{
			`pod.yaml:7: services[0].env.HTTPS_PROXY: HTTPS_PROXY is the sandbox's (its proxy and CA), which the pod sets`,
			`pod.yaml:8: services[0].secrets.SSL_CERT_FILE: SSL_CERT_FILE is the sandbox's (its proxy and CA), which the pod sets`,
		}},
		{"ingress", minimal + `    ports: [80]
ingress:
  - {name: a, listen: 127.0.0.1:8080, service: web, port: 80, keys: k}
  - {name: a, listen: 127.0.0.1:8080, service: web, port: 81, keys: k}
  - {name: b, listen: ":80", service: db, port: 80, keys: k}
  - {name: c, listen: 127.0.0.1:0, service: web, keys: k}
`, []string{
			`pod.yaml:10: ingress[1].name: "a" is also ingress[0]'s name`,
			`pod.yaml:10: ingress[1].listen: "127.0.0.1:8080" is also ingress[0]'s`,
			`pod.yaml:10: ingress[1].port: 81 is not one of service "web"'s ports [80]`,
			`pod.yaml:11: ingress[2].listen: ":80": want HOST:PORT (0.0.0.0:PORT for every interface)`,
			`pod.yaml:11: ingress[2].service: no service named "db"`,
			`pod.yaml:12: ingress[3].port: missing: the field is required`,
			`pod.yaml:12: ingress[3].listen: "127.0.0.1:0": want a port from 1 to 65535`,
		}},
		{"ingress on admin", minimal + "    ports: [80]\nadmin: {http: 127.0.0.1:9090}\ningress: [{name: a, listen: 127.0.0.1:9090, service: web, port: 80, keys: k}]\n", []string{
			`pod.yaml:9: ingress[0].listen: "127.0.0.1:9090" is also admin.http`,
		}},
		{"many at once", "name: x\nstate_dir: /s\nservices:\n  - name: a\n    command: [x]\n    preset: p\n    ports: [1]\n    health: {tcp: {port: 1}, interval: soon}\n    restart: {policy: maybe}\n    bogus: 1\n", []string{
			`pod.yaml:8: services[0].health.interval: "soon" is not a duration (want e.g. "200ms", "2s", "1m")`,
			`pod.yaml:9: services[0].restart.policy: "maybe": want always, on-failure or never`,
			`pod.yaml:10: services[0].bogus: unknown field (want one of: name, command, dir, user, keep_caps, preset, env, secrets, landlock, memory_max, pids_max, ports, health, after, restart)`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse("pod.yaml", []byte(tc.yaml), "/etc/airlock")
			if err == nil {
				t.Fatalf("Parse = %+v, want errors %q", p, tc.want)
			}
			if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.File != "pod.yaml" {
				t.Errorf("errors.As(%v, *FieldError) = %v", err, fe)
			}
		})
	}
}

func TestMinimalGetsDefaults(t *testing.T) {
	p, err := Parse("pod.yaml", []byte(minimal), "/etc/airlock")
	if err != nil {
		t.Fatal(err)
	}
	want := &Pod{
		Name:     "pod",
		StateDir: "/var/lib/pod",
		Events:   Events{File: "/var/lib/pod/agent-inbox.jsonl", MaxBytes: 10 << 20, Keep: 3},
		Policy:   Policy{KeyID: "default", SigningAlg: "RS256", Watch: true},
		Proxy:    Proxy{Port: 3128, AuditLog: "/var/lib/pod/audit.jsonl", AuditFailure: "closed"},
		Admin:    Admin{Socket: "/var/lib/pod/admin.sock"},
		Services: []Service{{
			Name: "web", Command: []string{"/bin/true"}, User: "998:998", Preset: "strict",
			Landlock: Landlock{Mode: "hard"},
			Restart: Restart{Policy: "on-failure", Initial: 200 * time.Millisecond, Max: 30 * time.Second,
				Multiplier: 2, Jitter: 0.2, GiveUpAfter: 5, GiveUpWindow: time.Minute},
		}},
		Sandboxes: Sandboxes{MemoryMax: 2 << 30, PidsMax: 1024, Max: 16},
		StopGrace: 10 * time.Second,
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("Parse(minimal) =\n%+v\nwant\n%+v", p, want)
	}
}

// full sets every field; its relative paths resolve against the
// manifest's directory, the events file against the state dir.
const full = `name: agent-pod
state_dir: state
events:
  file: inbox.jsonl
  max_bytes: 1M
  keep: 5
policy:
  bundle: policy
  sha256: sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef
  lock: policy.lock
  public_key: keys/policy.pem
  key_id: ops
  signing_alg: ES256
  watch: false
  quarantine: true
proxy:
  port: 3129
  ca_cert: ca/ca.pem
  ca_key: /etc/airlock/ca/ca-key.pem
  upstream_ca: [upstream.pem]
  resolve: ["api.model.test:18443:127.0.0.1,::1"]
  allow_range: [127.0.0.1/32]
  audit_log: stderr
  audit_failure: warn
  limits:
    max_conns: 100
    max_header_bytes: 32768
    read_header_timeout: 5s
    idle_timeout: 1m
    handshake_timeout: 3s
    tunnel_idle_timeout: 10m
    write_timeout: 20s
    upstream_header_timeout: 30s
    dial_timeout: 2s
admin:
  socket: /run/airlock/admin.sock
  http: 127.0.0.1:9090
services:
  - name: shim
    command: [python3, shim.py, --port, 8901]
    dir: app
    user: "61001:61001"
    keep_caps: [CAP_NET_BIND_SERVICE]
    preset: researcher
    env: {MODEL_API: "https://api.model.test:18443", WORKERS: 4}
    secrets:
      MODEL_KEY: {env: HOST_MODEL_KEY}
      CERT: {file: secrets/cert}
    landlock:
      ro: [app/shim.py]
      rw: [/tmp/shim]
      exec: [/opt/python]
      mode: best-effort
    memory_max: 256M
    pids_max: 64
    ports: [8901]
    health:
      http: {port: 8901, path: /healthz}
      interval: 1s
      timeout: 500ms
      threshold: 2
      start_period: 3s
    restart:
      policy: always
      backoff: {initial: 100ms, max: 5s, multiplier: 1.5, jitter: 0}
      give_up: {restarts: 10, window: 2m}
  - name: gateway
    command: [/usr/bin/node, gateway.js]
    user: gateway
    preset: strict
    ports: [18789, 18790]
    health:
      tcp: {port: 18790}
    after: [shim]
    restart: {policy: never}
  - name: worker
    command: [/bin/worker]
    preset: writer
    health: {exec: [/bin/worker, --check]}
    after: [shim, gateway]
ingress:
  - name: gateway
    listen: 127.0.0.1:18789
    service: gateway
    port: 18789
    keys: operators.keys
sandboxes:
  memory_max: 1G
  pids_max: 256
  max: 4
stop_grace: 3s
`

func TestFullManifest(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pod.yaml")
	if err := os.WriteFile(path, []byte(full), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	want := &Pod{
		Name:     "agent-pod",
		StateDir: dir + "/state",
		Events:   Events{File: dir + "/state/inbox.jsonl", MaxBytes: 1 << 20, Keep: 5},
		Policy: Policy{Bundle: dir + "/policy", SHA256: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			Lock: dir + "/policy.lock", PublicKey: dir + "/keys/policy.pem", KeyID: "ops", SigningAlg: "ES256", Quarantine: true},
		Proxy: Proxy{Port: 3129, CACert: dir + "/ca/ca.pem", CAKey: "/etc/airlock/ca/ca-key.pem", UpstreamCA: []string{dir + "/upstream.pem"},
			Resolve: []string{"api.model.test:18443:127.0.0.1,::1"}, AllowRange: []string{"127.0.0.1/32"},
			AuditLog: "stderr", AuditFailure: "warn",
			Limits: Limits{Limits: proxy.Limits{MaxConns: 100, MaxHeaderBytes: 32768, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute,
				HandshakeTimeout: 3 * time.Second, TunnelIdleTimeout: 10 * time.Minute, WriteTimeout: 20 * time.Second,
				UpstreamHeaderTimeout: 30 * time.Second}, DialTimeout: 2 * time.Second}},
		Admin: Admin{Socket: "/run/airlock/admin.sock", HTTP: "127.0.0.1:9090"},
		Services: []Service{
			{
				Name: "shim", Command: []string{"python3", "shim.py", "--port", "8901"}, Dir: dir + "/app",
				User: "61001:61001", KeepCaps: []string{"CAP_NET_BIND_SERVICE"}, Preset: "researcher",
				Env:     map[string]string{"MODEL_API": "https://api.model.test:18443", "WORKERS": "4"},
				Secrets: map[string]Secret{"MODEL_KEY": {Env: "HOST_MODEL_KEY"}, "CERT": {File: dir + "/secrets/cert"}},
				Landlock: Landlock{RO: []string{dir + "/app/shim.py"}, RW: []string{"/tmp/shim"}, Exec: []string{"/opt/python"},
					Mode: "best-effort"},
				MemoryMax: 256 << 20, PidsMax: 64, Ports: []int{8901},
				Health: &Health{HTTP: &HTTPCheck{Port: 8901, Path: "/healthz"}, Interval: time.Second, Timeout: 500 * ms,
					Threshold: 2, StartPeriod: 3 * time.Second},
				Restart: Restart{Policy: "always", Initial: 100 * ms, Max: 5 * time.Second, Multiplier: 1.5, Jitter: 0,
					GiveUpAfter: 10, GiveUpWindow: 2 * time.Minute},
			},
			{
				Name: "gateway", Command: []string{"/usr/bin/node", "gateway.js"}, User: "gateway", Preset: "strict",
				Landlock: Landlock{Mode: "hard"}, Ports: []int{18789, 18790},
				Health:  &Health{TCP: &TCPCheck{Port: 18790}, Interval: 2 * time.Second, Timeout: time.Second, Threshold: 3},
				After:   []string{"shim"},
				Restart: Restart{Policy: "never", Initial: 200 * ms, Max: 30 * time.Second, Multiplier: 2, Jitter: 0.2, GiveUpAfter: 5, GiveUpWindow: time.Minute},
			},
			{
				Name: "worker", Command: []string{"/bin/worker"}, User: "998:998", Preset: "writer", Landlock: Landlock{Mode: "hard"},
				Health:  &Health{Exec: []string{"/bin/worker", "--check"}, Interval: 2 * time.Second, Timeout: time.Second, Threshold: 3},
				After:   []string{"shim", "gateway"},
				Restart: Restart{Policy: "on-failure", Initial: 200 * ms, Max: 30 * time.Second, Multiplier: 2, Jitter: 0.2, GiveUpAfter: 5, GiveUpWindow: time.Minute},
			},
		},
		Ingress:   []Ingress{{Name: "gateway", Listen: "127.0.0.1:18789", Service: "gateway", Port: 18789, Keys: dir + "/operators.keys"}},
		Sandboxes: Sandboxes{MemoryMax: 1 << 30, PidsMax: 256, Max: 4},
		StopGrace: 3 * time.Second,
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("Load(full) =\n%+v\nwant\n%+v", p, want)
		for i := range min(len(p.Services), len(want.Services)) {
			if !reflect.DeepEqual(p.Services[i], want.Services[i]) {
				t.Errorf("services[%d] =\n%+v\nwant\n%+v", i, p.Services[i], want.Services[i])
			}
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want ErrNotExist", err)
	}
}

func TestParseNeedsAbsoluteBase(t *testing.T) {
	if _, err := Parse("pod.yaml", []byte(minimal), "rel"); err == nil {
		t.Error("Parse with a relative base directory succeeded")
	}
}

func TestAliasesAreFollowed(t *testing.T) {
	y := minimal + "    env: &env {A: b}\n  - name: api\n    command: [x]\n    preset: p\n    env: *env\n"
	p, err := Parse("pod.yaml", []byte(y), "/")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Services[1].Env["A"]; got != "b" {
		t.Errorf("services[1].env.A = %q, want b", got)
	}
}

// TestReadmeExample keeps the README's complete example a manifest that
// loads.
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "### The manifest\n")
	if !ok {
		t.Fatal("README.md has no \"### The manifest\" section")
	}
	_, example, ok := strings.Cut(section, "```yaml\n")
	example, _, closed := strings.Cut(example, "```")
	if !ok || !closed {
		t.Fatal("the manifest section has no ```yaml example")
	}
	p, err := Parse("README.md", []byte(example), "/")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Services) != 2 || len(p.Ingress) != 1 {
		t.Errorf("the example has %d services and %d routes, want 2 and 1", len(p.Services), len(p.Ingress))
	}
}

// FuzzParse: whatever the bytes, Parse returns a pod or errors, never
// both, never panics, and every error is placed inside the file.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte(full))
	f.Add([]byte("a: &x [*x]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("pod.yaml", data, "/base")
		if (p == nil) == (err == nil) {
			t.Fatalf("Parse = %v, %v: want exactly one", p, err)
		}
		lines := strings.Count(string(data), "\n") + 2
		for _, e := range unwrap(err) {
			var fe *FieldError
			if !errors.As(e, &fe) || fe.Line < 0 || fe.Line > lines {
				t.Fatalf("error %v is not placed in the file's %d lines", e, lines)
			}
		}
	})
}

func unwrap(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}
