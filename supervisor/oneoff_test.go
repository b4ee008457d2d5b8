package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/adminclient"
	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
)

// A one-off is refused, with the status and field, when one of its id
// runs, when its leaf would be a service's, when its id is a service's or
// the pod's, and once the pod stops.
func TestOneOffAddRefusals(t *testing.T) {
	o := newOneOffs(&Pod{m: &manifest.Pod{Name: "p"}})
	o.services = map[string]proxy.Service{"/airlock-pod-p/airlock-p-svc": {ID: "svc"}, "/airlock-pod-p/airlock-p-gateway": {ID: "gateway"}}
	o.byID["spawn-1"] = &oneOff{}
	for _, tc := range []struct {
		name, id, cg string
		closed       bool
		status       int
		want         string
	}{
		{"id running", "spawn-1", "/airlock-pod-p/airlock-spawn-1", false, 409, `id "spawn-1": a sandbox of that id is running`},
		{"a service's leaf", "p-svc", "/airlock-pod-p/airlock-p-svc", false, 409, "its cgroup is a service's"},
		// Lines and metrics are keyed by id: a one-off named gateway
		// would be given the service's lines (tee) and end its series.
		{"a service's id", "gateway", "/airlock-pod-p/airlock-gateway", false, 409, `id "gateway": a service of pod p has that id`},
		{"the pod's name", "p", "/airlock-pod-p/airlock-p", false, 409, `id "p": it is pod p's own name`},
		// A service's exec probe runs in that leaf.
		{"a probe's", "p-svc.probe", "/airlock-pod-p/airlock-p-svc.probe", false, 409, `id "p-svc.probe": ids ending ".probe" are the services' probes'`},
		{"pod stopping", "spawn-2", "/airlock-pod-p/airlock-spawn-2", true, 503, "pod p is stopping"},
	} {
		if tc.closed {
			o.byID = map[string]*oneOff{}
			o.close(context.Background())
		}
		x := &oneOff{spec: adminclient.SandboxSpec{ID: tc.id}, cg: tc.cg}
		err := o.add(x)
		if err == nil { // taken: the pod's stop below would wait for it
			delete(o.byID, tc.id)
			o.wg.Done()
		}
		var r *refusal
		if !errors.As(err, &r) || r.status != tc.status || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: add = %v; want %d naming %q", tc.name, err, tc.status, tc.want)
		}
	}
}

// A one-off's ID is its cgroup's name: 1 to 100 of letters, digits, '.',
// '_', '-', not starting with punctuation; nothing else (no '/', no "..").
func TestValidSandboxID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"spawn-1", true}, {"a", true}, {"A.b_c-9", true}, {strings.Repeat("x", 100), true},
		{"", false}, {strings.Repeat("x", 101), false}, {"-a", false}, {".a", false}, {"_a", false},
		{"..", false}, {"a/b", false}, {"a b", false}, {"é", false}, {"a\n", false},
	} {
		if got := ValidSandboxID(tc.id); got != tc.want {
			t.Errorf("ValidSandboxID(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}

// testPod is a pod for one-offs in group: its policy the embedded
// presets, its limits for one-offs 512 MiB and 128 processes, 4 at once.
func testPod(t *testing.T, group string) *Pod {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	engine, err := OpenEngine(context.Background(), PolicyOptions{Options: policies.Options{Source: PolicySource("")}, Presets: []string{"strict"}}, log)
	if err != nil {
		t.Fatal(err)
	}
	return &Pod{m: &manifest.Pod{Name: "p", Proxy: manifest.Proxy{Port: 3128}, Sandboxes: manifest.Sandboxes{MemoryMax: 512 << 20, PidsMax: 128, Max: 4}},
		engine: engine, log: log, ctx: context.Background(), group: group, proxy: &proxy.Proxy{}}
}

// A one-off's leaf gets the pod's limits for one-offs (its manifest's
// sandboxes:), or lower ones its launcher asks for; one above the pod's
// is refused, naming the field: no launcher lifts the bound that keeps a
// fork bomb from the supervisor and the host.
func TestOneOffLimits(t *testing.T) {
	o := newOneOffs(testPod(t, ""))
	for _, tc := range []struct {
		name            string
		memory, pids    int64 // asked
		wantMem, wantPi int64
		refused         string
	}{
		{"the pod's", 0, 0, 512 << 20, 128, ""},
		{"lower", 64 << 20, 16, 64 << 20, 16, ""},
		{"the pod's, asked", 512 << 20, 128, 512 << 20, 128, ""},
		{"more memory", 1 << 30, 0, 0, 0, "memory_max 1073741824: above the pod's limit for a one-off sandbox, 536870912 (its manifest's sandboxes.memory_max)"},
		{"more processes", 0, 129, 0, 0, "pids_max 129: above the pod's limit for a one-off sandbox, 128 (its manifest's sandboxes.pids_max)"},
		{"negative", 0, -1, 0, 0, "pids_max -1: want a positive limit, or none for the pod's (128)"},
	} {
		spec := adminclient.SandboxSpec{ID: "spawn-1", Preset: "strict", Command: []string{"/bin/true"}, Dir: "/", UID: 61000, GID: 61000,
			Stdout: "/job/out", Stderr: "/job/err", Audit: "/job/audit", MemoryMax: tc.memory, PidsMax: tc.pids}
		opts, err := o.options(spec)
		var r *refusal
		switch {
		case tc.refused != "" && (!errors.As(err, &r) || r.status != 400 || err.Error() != tc.refused):
			t.Errorf("%s: options = %v; want a 400 %q", tc.name, err, tc.refused)
		case tc.refused == "" && (err != nil || opts.MemoryMax != tc.wantMem || opts.PidsMax != tc.wantPi):
			t.Errorf("%s: options = memory %d, pids %d, %v; want %d and %d", tc.name, opts.MemoryMax, opts.PidsMax, err, tc.wantMem, tc.wantPi)
		}
	}
}

// A one-off is not given a credential its preset has the pod's proxy
// inject, whatever variable it comes in: the proxy reads it from the pod's
// environment so that the sandbox never holds it. The refusal names the
// variable, rule and header, never the value; a placeholder passes.
func TestOneOffRefusesAHandedSecret(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
	o := newOneOffs(testPod(t, ""))
	for _, tc := range []struct {
		env, refused string
	}{
		{"MY_KEY=sk-ant-test-0123456789", `env MY_KEY: it holds the credential preset "coder"'s rule "anthropic-api" injects (header x-api-key)`},
		{"HEADER=x-api-key: sk-ant-test-0123456789", `env HEADER: it holds the credential preset "coder"'s rule "anthropic-api" injects`},
		{"ANTHROPIC_API_KEY=placeholder", ""},
		{"ARG=sk-ant-test-0123456789", `argument 2 of the command: it holds the credential preset "coder"'s rule "anthropic-api" injects`},
	} {
		spec := adminclient.SandboxSpec{ID: "spawn-1", Preset: "coder", Command: []string{"/bin/true"}, Dir: "/", UID: 61000, GID: 61000,
			Stdout: "/job/out", Stderr: "/job/err", Audit: "/job/audit", Env: []string{"FIRST=fine", tc.env}}
		if name, v, _ := strings.Cut(tc.env, "="); name == "ARG" {
			spec.Env, spec.Command = nil, []string{"/usr/bin/env", "-i", v}
		}
		_, err := o.options(spec)
		var r *refusal
		switch {
		case tc.refused != "" && (!errors.As(err, &r) || r.status != 400 || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("env %s: options = %v; want a 400 %q", tc.env, err, tc.refused)
		case tc.refused != "" && strings.Contains(err.Error(), "0123456789"):
			t.Errorf("env %s: the refusal quotes the secret: %v", tc.env, err)
		case tc.refused == "" && err != nil:
			t.Errorf("env %s: options = %v; want it allowed", tc.env, err)
		}
	}
}

// A real one-off's leaf holds its limits: memory.max (or a hybrid host's
// v1 memory.limit_in_bytes) the pod's, and pids.max the lower one its
// launcher asked for. Its files are made through a link of root's.
func TestOneOffLeafIsLimited(t *testing.T) {
	o := runningPod(t)
	dir := t.TempDir()
	os.Mkdir(dir+"/logs", 0o700)
	os.Symlink(dir+"/logs", dir+"/out")
	x, err := o.launch(adminclient.SandboxSpec{ID: "limited", Preset: "strict", Command: []string{"/bin/sleep", "30"}, Dir: "/", UID: 61000, GID: 61000,
		Stdout: dir + "/out/stdout", Stderr: dir + "/err", Audit: dir + "/audit", PidsMax: 32}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer x.stopGrace(0)
	got := map[string]string{}
	for _, d := range x.sb.leaf.Joined {
		for _, f := range []string{"memory.max", "memory.limit_in_bytes", "pids.max"} {
			if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
				got[strings.TrimSuffix(strings.TrimSuffix(f, ".max"), ".limit_in_bytes")] = strings.TrimSpace(string(b))
			}
		}
	}
	if want := map[string]string{"memory": strconv.Itoa(512 << 20), "pids": "32"}; !maps.Equal(got, want) {
		t.Errorf("the one-off's leaf %v has limits %v; want %v", x.sb.leaf.Joined, got, want)
	}
	// And its command is in each of them (a v1 group by its thread).
	for _, d := range x.sb.leaf.Joined {
		testutil.WaitFor(t, "the one-off's command in "+d, func() bool {
			b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			return len(strings.TrimSpace(string(b))) > 0
		})
	}
	// And no swap past the memory's limit, where the kernel counts swap.
	for _, d := range x.sb.leaf.Joined {
		for f, want := range map[string]string{"memory.swap.max": "0", "memory.memsw.limit_in_bytes": strconv.Itoa(512 << 20)} {
			if b, err := os.ReadFile(filepath.Join(d, f)); err == nil && strings.TrimSpace(string(b)) != want {
				t.Errorf("the one-off's %s/%s is %s; want %s", d, f, strings.TrimSpace(string(b)), want)
			}
		}
	}
	if _, err := os.Stat(dir + "/logs/stdout"); err != nil {
		t.Errorf("stdout through root's link: %v", err)
	}
}

// runningPod is testPod with what a real one-off needs: its cgroup (with
// the memory and pids controllers where v2 has them) and its network,
// both removed when t ends; its one-offs served.
func runningPod(t *testing.T) *oneOffs {
	t.Helper()
	testutil.RequireRoot(t, "a one-off sandbox (cgroups, namespaces)")
	mnt, err := cgroup2.Mount()
	testutil.RequireFeature(t, "cgroup v2", err)
	name := PodGroupName(fmt.Sprintf("oneoff-test-%d", os.Getpid()))
	group, err := cgroup2.Create(mnt, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, v1err := sandbox.RemoveV1Tree(name)
		if err := errors.Join(sandbox.RemoveTree(group), v1err); err != nil {
			t.Error(err)
		}
	})
	cgroup2.EnableControllers(group, "memory", "pids") // where v2 has them; else v1 groups hold the limits
	p := testPod(t, group)
	if p.network, err = sandbox.NewNetwork(sandbox.NetworkConfig{ProxyPort: p.m.Proxy.Port}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.network.Close() })
	p.sandboxes = newOneOffs(p)
	p.sandboxes.serve(nil, nil)
	return p.sandboxes
}

// A pod runs at most sandboxes.max one-offs at once: each one's limits
// bound it alone. A launch past the count is refused before anything
// runs, 429 naming the count, on the admin API as a status its launcher
// shows (one on its launcher's streams too); once one has ended, and its
// launcher heard so, another is launched.
func TestOneOffCount(t *testing.T) {
	o := runningPod(t)
	o.pod.m.Sandboxes.Max = 1
	dir := t.TempDir()
	sock := filepath.Join(dir, "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ConnContext: withConn, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serveSandboxLaunch(o.pod, w, r) })}
	go srv.Serve(ln)
	defer srv.Close()
	n := 0
	spec := func(id string) adminclient.SandboxSpec {
		n++
		return adminclient.SandboxSpec{ID: id, Preset: "strict", Command: []string{"/bin/sleep", "30"}, Dir: "/", UID: 61000, GID: 61000,
			Stdout: fmt.Sprintf("%s/out-%d", dir, n), Stderr: fmt.Sprintf("%s/err-%d", dir, n), Audit: fmt.Sprintf("%s/audit-%d", dir, n)}
	}
	ctx := context.Background()
	first, err := adminclient.Launch(ctx, sock, spec("first"))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Stop(0)
	const reason = "pod p runs 1 one-off sandboxes, its most (its manifest's sandboxes.max): launch again once one has ended"
	for _, tc := range []struct {
		name   string
		launch func() (*adminclient.Sandbox, error)
	}{
		{"to files", func() (*adminclient.Sandbox, error) { return adminclient.Launch(ctx, sock, spec("second")) }},
		{"on its launcher's streams", func() (*adminclient.Sandbox, error) {
			s := spec("second")
			s.Stdout, s.Stderr, s.Audit = "", "", ""
			return adminclient.LaunchStdio(ctx, sock, s, os.Stdin, os.Stdout, os.Stderr)
		}},
	} {
		sb, err := tc.launch()
		var se *adminclient.StatusError
		if !errors.As(err, &se) || se.Status != http.StatusTooManyRequests || !strings.Contains(err.Error(), reason) {
			if sb != nil {
				sb.Stop(0)
				sb.Wait()
			}
			t.Errorf("a second one-off %s while the first runs: %v; want a 429 saying %q", tc.name, err, reason)
		}
	}
	if _, ok := o.get("second"); ok {
		t.Error("a one-off refused is registered")
	}
	first.Stop(0)
	if code, err := first.Wait(); code != 128+9 && code != 128+15 {
		t.Errorf("the first one-off stopped: exit %d, %v", code, err)
	}
	second, err := adminclient.Launch(ctx, sock, spec("second"))
	if err != nil {
		t.Fatalf("a one-off once the first has ended: %v", err)
	}
	second.Stop(0)
	second.Wait()
}

// The pod makes a one-off's files as root, often in a directory a sandbox
// writes: a link planted on the way (job/out → a directory of root's) is
// refused, naming the field and the link, and nothing is made where it
// leads; the files made before it are removed.
func TestOneOffFilesRefusePlantedLinks(t *testing.T) {
	mnt, err := cgroup2.Mount() // a launch names its leaf first
	testutil.RequireFeature(t, "cgroup v2", err)
	o := newOneOffs(testPod(t, filepath.Join(mnt, PodGroupName("p"))))
	base := t.TempDir()
	rootOnly, job := filepath.Join(base, "root-only"), filepath.Join(base, "job")
	os.Mkdir(rootOnly, 0o700)
	os.Mkdir(job, 0o777)
	if err := os.Chmod(job, 0o777); err != nil { // the sandbox's uid may write it
		t.Fatal(err)
	}
	if err := os.Symlink(rootOnly, filepath.Join(job, "out")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field               string
		stdout, stderr, aud string
	}{
		{"stdout", "out/stdout", "stderr", "audit"},
		{"audit", "stdout", "stderr", "out/audit"},
	} {
		spec := adminclient.SandboxSpec{ID: "spawn-1", Preset: "strict", Command: []string{"/bin/true"}, Dir: "/", UID: 61000, GID: 61000,
			Stdout: filepath.Join(job, tc.stdout), Stderr: filepath.Join(job, tc.stderr), Audit: filepath.Join(job, tc.aud)}
		_, err := o.launch(spec, nil, nil)
		var r *refusal
		want := tc.field + ": " + job + "/out/" + tc.field + ": not made through a link another user may point elsewhere: " + job + "/out: the link " + job + "/out is in " + job + ", which another user may write"
		if !errors.As(err, &r) || r.status != 400 || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s through a planted link: launch = %v; want a 400 beginning %q", tc.field, err, want)
		}
		for _, d := range []string{rootOnly, job} {
			if entries, _ := os.ReadDir(d); len(entries) != map[string]int{rootOnly: 0, job: 1}[d] {
				t.Errorf("%s through a planted link: %s holds %v afterwards; want nothing made", tc.field, d, entries)
			}
		}
	}
}
