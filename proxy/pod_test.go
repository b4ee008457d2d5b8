package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/airlock-sandbox/airlock/proxy/certs"
	"github.com/airlock-sandbox/airlock/proxy/egress"
	"github.com/airlock-sandbox/airlock/proxy/identity"
	"github.com/airlock-sandbox/airlock/proxy/identity/connhook"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// podPreset allows curl to the test's upstream host; podOther allows curl
// elsewhere only. The same request is thus allowed as one service and
// denied as the other.
const (
	podPreset = `package airlock.presets.%s

import data.airlock.lib

rules := [{"name": "upstream", "binaries": [{"path": %q}], "hosts": [%q], "ports": [%d]}]

denies := []

decision := lib.decide(rules, denies)
`
	podHost  = "plain.pod.test"
	podOther = "elsewhere.pod.test"
)

// podProxyPort is the pod listener's port inside its own namespace.
const podProxyPort = 3128

// A pod's services share one network namespace and one proxy listener, and
// each connection is decided by the preset of the service whose cgroup leaf
// the connecting process is in: the same request from a real curl is
// allowed in service a's leaf, denied by b's preset in b's leaf, and denied
// identity_unknown in a leaf that is no service's (named "ab", so that a
// match by string prefix would wrongly place it in a). With the connect
// hook attached to the pod's parent cgroup, the lookups go through the hook
// (programs attached to a parent run for its descendants); without it, the
// candidates' fd tables are scanned.
func TestPodListenerDecidesByService(t *testing.T) {
	testutil.RequireRoot(t, "a pod's network namespace and cgroup leaves")
	curl := testutil.RequireTool(t, "curl")
	curl, _ = filepath.EvalSymlinks(curl)
	nsenter := testutil.RequireTool(t, "nsenter")
	for _, hooked := range []bool{false, true} {
		t.Run(fmt.Sprintf("hook=%v", hooked), func(t *testing.T) {
			pod := newPod(t, curl, hooked)
			var curls []int // their pids
			run := func(leaf string) (int, string) {
				pid, status, body := pod.curl(t, nsenter, curl, leaf, fmt.Sprintf("http://%s:%d/hello", podHost, pod.upstreamPort))
				curls = append(curls, pid)
				return status, body
			}

			status, body := run(pod.leaves["a"])
			if status != 200 || body != "hello from upstream" {
				t.Fatalf("as service a: %d %q; want 200 from the upstream", status, body)
			}
			a := pod.audit(t, func(l podAudit) bool { return l.Sandbox == "pod-a" })
			if a.Decision != "allow" || a.Preset != "a" || a.Kind != "svc" || a.Binary != curl || a.Rule != "upstream" {
				t.Fatalf("audit line of service a's request = %+v", a)
			}

			status, body = run(pod.leaves["b"])
			d := denial(t, status, body)
			if d.Reason != string(policies.ReasonHostNotAllowed) || d.Sandbox != "pod-b" || d.Preset != "b" ||
				d.Binary != curl || !strings.Contains(d.Hint, `preset "b"`) {
				t.Fatalf("as service b: %+v; want host_not_allowed by preset b, sandbox pod-b", d)
			}
			b := pod.audit(t, func(l podAudit) bool { return l.Sandbox == "pod-b" })
			if b.Decision != "deny" || b.Preset != "b" || b.Reason != d.Reason || b.Binary != curl {
				t.Fatalf("audit line of service b's request = %+v", b)
			}

			status, body = run(pod.leaves["ab"])
			d = denial(t, status, body)
			abPath, _ := cgroup2.Path(pod.leaves["ab"])
			if d.Reason != string(policies.ReasonIdentityUnknown) || d.Sandbox != "pod" || d.Preset != "" ||
				!strings.Contains(d.Hint, "is in cgroup "+abPath+", which is in no service of the pod") {
				t.Fatalf("from a leaf of no service: %+v; want identity_unknown naming cgroup %s, sandbox pod", d, abPath)
			}
			u := pod.audit(t, func(l podAudit) bool { return l.Sandbox == "pod" })
			if u.Decision != "deny" || u.Reason != d.Reason || !strings.Contains(u.Detail, abPath) {
				t.Fatalf("audit line of the unplaced request = %+v", u)
			}

			metrics := pod.metrics(t)
			for _, want := range []string{
				`airlock_proxy_decisions_total{decision="allow",reason="allowed",sandbox="pod-a"} 1`,
				`airlock_proxy_decisions_total{decision="deny",reason="host_not_allowed",sandbox="pod-b"} 1`,
				`airlock_proxy_decisions_total{decision="deny",reason="identity_unknown",sandbox="pod"} 1`,
			} {
				if !strings.Contains(metrics, want) {
					t.Errorf("metrics lack %s:\n%s", want, metrics)
				}
			}

			if hooked {
				// Every connection was attributed through the hook on
				// the parent: each curl is the tgid it recorded.
				if got := pod.hook.seen(); !slices.Equal(got, slices.Sorted(slices.Values(curls))) {
					t.Fatalf("the connect hook on the pod's cgroup named connectors %v; want the curls %v", got, curls)
				}
			}
		})
	}
}

// pod is a proxy serving one listener inside a fresh network namespace for
// the services in leaves "a" and "b" of a parent cgroup.
type pod struct {
	leaves       map[string]string // name → directory under the v2 mount
	ns           *sandbox.Network
	upstreamPort int
	auditFile    string
	metricsURL   string
	hook         *recordingHook
}

func newPod(t *testing.T, curl string, hooked bool) *pod {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	pd := &pod{leaves: map[string]string{}, auditFile: filepath.Join(dir, "audit.log")}

	mnt, err := cgroup2.Mount()
	if err != nil {
		t.Fatal(err)
	}
	parent, err := cgroup2.Create(mnt, fmt.Sprintf("airlock-test-pod-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cgroup2.Remove(parent) })
	for _, name := range []string{"a", "b", "ab"} {
		leaf, err := cgroup2.Create(parent, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cgroup2.Remove(leaf) }) // the curls have exited
		pd.leaves[name] = leaf
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "hello from upstream")
	}), ErrorLog: log.New(io.Discard, "", 0)}
	go up.Serve(ln)
	t.Cleanup(func() { up.Close() })
	pd.upstreamPort = ln.Addr().(*net.TCPAddr).Port

	bundle := filepath.Join(dir, "bundle")
	os.Mkdir(bundle, 0o755)
	for name, host := range map[string]string{"a": podHost, "b": podOther} {
		rego := fmt.Sprintf(podPreset, name, curl, host, pd.upstreamPort)
		if err := os.WriteFile(filepath.Join(bundle, name+".rego"), []byte(rego), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	engine, err := policies.New(ctx, policies.Options{Source: policies.Source{Path: bundle}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certs.LoadOrCreate(filepath.Join(dir, "ca"), 16)
	if err != nil {
		t.Fatal(err)
	}
	guard, err := egress.New(egress.Options{
		AllowRanges: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Resolve:     []string{podHost + ":" + strconv.Itoa(pd.upstreamPort) + ":127.0.0.1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	audit, err := os.Create(pd.auditFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { audit.Close() })
	metrics := proxy.NewMetrics(ca)
	ms := httptest.NewServer(metrics.Handler())
	t.Cleanup(ms.Close)
	pd.metricsURL = ms.URL
	p, err := proxy.New(proxy.Config{Decider: engine, CA: ca, Guard: guard, Audit: audit, Metrics: metrics, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}

	pd.ns, err = sandbox.NewNetwork(sandbox.NetworkConfig{ProxyPort: podProxyPort})
	if err != nil {
		t.Fatal(err)
	}
	services := map[string]proxy.Service{}
	for name, s := range map[string]proxy.Service{"a": {ID: "pod-a", Kind: "svc", Preset: "a"}, "b": {ID: "pod-b", Kind: "svc", Preset: "b"}} {
		cg, err := cgroup2.Path(pd.leaves[name])
		if err != nil {
			t.Fatal(err)
		}
		services[cg] = s
	}
	sb := proxy.Sandbox{ID: "pod", Kind: "pod", Candidates: identity.Cgroup(parent), NetNS: pd.ns.NS, Route: proxy.ByCgroup(services)}
	if hooked {
		h, err := connhook.Attach(parent)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		pd.hook = &recordingHook{hook: h, tgids: map[int]bool{}}
		sb.Hook = pd.hook
	}
	e, err := p.Open(sb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	served := make(chan error, 1)
	go func() { served <- e.Serve(pd.ns.Listener) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Shutdown(ctx)
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		pd.ns.Close()
	})
	return pd
}

// curl runs curl as a process of leaf (the shell moves itself there, then
// becomes curl) inside the pod's network namespace, through the pod's
// listener, and returns its pid, the status and the body.
func (pd *pod) curl(t *testing.T, nsenter, curl, leaf, url string) (pid, status int, body string) {
	t.Helper()
	const script = `echo $$ > "$1/cgroup.procs" && exec "$2" --net="$3" "$4" -sS --max-time 20 -x "$5" -w '\n%{http_code}' "$6"`
	netns := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(pd.ns.NS))
	cmd := exec.Command("sh", "-c", script, "sh", leaf, nsenter, netns, curl, "http://127.0.0.1:"+strconv.Itoa(podProxyPort), url)
	cmd.Env = []string{"PATH=/usr/bin:/bin"} // no proxy variables: -x says where to go
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	s := string(out)
	i := strings.LastIndexByte(s, '\n')
	if err != nil || i < 0 {
		t.Fatalf("curl in %s: %v %q (stderr %s)", leaf, err, out, stderr.String())
	}
	status, _ = strconv.Atoi(s[i+1:])
	return cmd.Process.Pid, status, s[:i]
}

func denial(t *testing.T, status int, body string) proxy.Denial {
	t.Helper()
	var d proxy.Denial
	if err := json.Unmarshal([]byte(body), &d); status != http.StatusForbidden || err != nil {
		t.Fatalf("answer %d %q; want a 403 with a JSON denial (%v)", status, body, err)
	}
	return d
}

// podAudit is the part of an audit line the test checks.
type podAudit struct {
	Msg, Sandbox, Kind, Preset, Binary, Decision, Reason, Rule, Detail string
}

// audit waits for the decision line pred matches: a denial's is written
// after its answer.
func (pd *pod) audit(t *testing.T, pred func(podAudit) bool) podAudit {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		raw, _ := os.ReadFile(pd.auditFile)
		for _, line := range strings.Split(string(raw), "\n") {
			var l podAudit
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "CANONICAL-PROXY-DECISION" && pred(l) {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no matching decision line in:\n%s", raw)
		}
	}
}

func (pd *pod) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(pd.metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return string(raw)
}

// recordingHook notes the connectors the connect hook names.
type recordingHook struct {
	hook  *connhook.Hook
	mu    sync.Mutex
	tgids map[int]bool
}

func (h *recordingHook) Lookup(cookie uint64) (int, int, time.Duration, bool) {
	tgid, fd, at, ok := h.hook.Lookup(cookie)
	if ok {
		h.mu.Lock()
		h.tgids[tgid] = true
		h.mu.Unlock()
	}
	return tgid, fd, at, ok
}

func (h *recordingHook) Blind() bool { return h.hook.Blind() }

func (h *recordingHook) ExecsOf(tgid int) identity.Execs { return h.hook.ExecsOf(tgid) }

func (h *recordingHook) seen() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Sorted(maps.Keys(h.tgids))
}
