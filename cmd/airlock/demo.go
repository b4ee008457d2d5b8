package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/policies"
	"github.com/spf13/cobra"
)

// newDemoCmd shows the policy engine on the embedded presets answering
// the questions the proxy will ask (`make run` boots the demo pod).
func newDemoCmd() *cobra.Command {
	var f policyFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Boot the policy engine on the embedded presets and show example decisions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := f.engine(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "airlock policy engine: policy %s\npresets: %s\n\n", e.Hash(), strings.Join(e.Presets(), ", "))
			for _, ex := range demoExamples() {
				in := ex.in
				d := e.Decide(cmd.Context(), &in)
				verdict := "DENY "
				if d.Allow {
					verdict = "ALLOW"
				}
				fmt.Fprintf(out, "%s  %-10s %-34s %s\n", verdict, in.Sandbox.Preset, shortExe(in.Process.Exe), describe(&in))
				fmt.Fprintf(out, "       reason=%s rule=%q\n       %s\n\n", d.Reason, d.Rule, d.Hint(&in))
			}
			fmt.Fprintln(out, "Explain a decision:  airlock policy explain --input "+exampleInput)
			fmt.Fprintln(out, "Run the preset tests: airlock policy test presets")
			fmt.Fprintln(out)
			return sandboxDemo(cmd)
		},
	}
	f.register(cmd, true)
	return cmd
}

func describe(in *policies.Input) string {
	r := in.Request
	if r.Phase == policies.PhaseConnect {
		return fmt.Sprintf("CONNECT %s:%d", r.Host, r.Port)
	}
	return fmt.Sprintf("%s https://%s%s", r.Method, r.Host, r.Path)
}

func shortExe(p string) string {
	if len(p) > 34 {
		return "…" + p[len(p)-33:]
	}
	return p
}

type example struct{ in policies.Input }

func demoExamples() []example {
	git := "/usr/lib/git-core/git-remote-http"
	conn := func(preset, exe, host string, port int) example {
		return example{policies.Input{
			Sandbox: policies.Sandbox{ID: "demo", Kind: preset, Preset: preset},
			Process: policies.Process{PID: 1234, Exe: exe},
			Request: policies.Request{Phase: policies.PhaseConnect, Host: host, Port: port},
		}}
	}
	req := func(preset, exe, method, host, path string, query map[string][]string) example {
		ex := conn(preset, exe, host, 443)
		r := &ex.in.Request
		r.Phase, r.Method, r.Path, r.Query = policies.PhaseRequest, method, path, query
		return ex
	}
	return []example{
		req("reviewer", "/usr/bin/curl", "GET", "api.github.com", "/repos/octo/hello/pulls/7/files", nil),
		req("reviewer", "/usr/bin/curl", "POST", "api.github.com", "/repos/octo/hello/pulls/7/reviews", nil),
		req("reviewer", git, "GET", "github.com", "/octo/hello.git/info/refs", map[string][]string{"service": {"git-upload-pack"}}),
		req("reviewer", git, "POST", "github.com", "/octo/hello.git/git-receive-pack", nil),
		conn("reviewer", "/usr/bin/wget", "api.github.com", 443),
		req("coder", "/usr/bin/node", "POST", "api.anthropic.com", "/v1/messages", nil),
		conn("coder", "/usr/bin/node", "registry.npmjs.org", 443),
		conn("coder", "/usr/bin/node", "exfil.example.net", 443),
		conn("writer", "/usr/bin/node", "github.com", 443),
		conn("strict", "/usr/bin/curl", "example.org", 443),
		conn("permissive", "/usr/bin/curl", "example.org", 22),
	}
}

// demoPreset lets curl GET /public/** on the demo upstream, nothing else.
const demoPreset = `package airlock.presets.demo

import data.airlock.lib

rules := [{
	"name": "demo-public",
	"binaries": [{"path": %q}],
	"hosts": ["demo.local"],
	"ports": [%d],
	"methods": "read-only",
	"paths": ["/public/**"],
}]

denies := []

decision := lib.decide(rules, denies)
`

// sandboxDemo runs curl in a sandbox whose only way out is the in-process
// proxy, against an upstream on this machine: one request allowed, one
// denied with its reason, one direct connection that has nowhere to go.
func sandboxDemo(cmd *cobra.Command) error {
	out := cmd.OutOrStdout()
	fmt.Fprintln(out, "== A sandboxed client through the proxy (airlock launch) ==")
	if os.Geteuid() != 0 {
		fmt.Fprintln(out, "skipped: launching a sandbox needs root (uid switch, network namespace, cgroup); run `sudo make run`")
		return nil
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		fmt.Fprintln(out, "skipped: the demo client is curl, which is not installed")
		return nil
	}
	curl, _ = filepath.EvalSymlinks(curl)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from the upstream at "+r.URL.Path+"\n")
	}))
	port := ln.Addr().(*net.TCPAddr).Port
	dir, err := os.MkdirTemp("", "airlock-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bundle := filepath.Join(dir, "policy")
	os.MkdirAll(bundle, 0o755)
	if err := os.WriteFile(filepath.Join(bundle, "demo.rego"), []byte(fmt.Sprintf(demoPreset, curl, port)), 0o644); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	script := fmt.Sprintf(`echo "$ curl http://demo.local:%[1]d/public/hello"; curl -sS http://demo.local:%[1]d/public/hello
echo "$ curl http://demo.local:%[1]d/admin/keys"; curl -sS http://demo.local:%[1]d/admin/keys; echo
echo "$ curl --noproxy '*' http://127.0.0.1:%[1]d/  (straight to the upstream, bypassing the proxy)"; curl -sS -m 3 --noproxy '*' http://127.0.0.1:%[1]d/ || echo "(no route: the sandbox's only way out is the proxy)"`, port)
	launch := exec.Command(self, "launch", "--policy", bundle, "--preset", "demo",
		"--resolve", fmt.Sprintf("demo.local:%d:127.0.0.1", port), "--allow-range", "127.0.0.1/32",
		"--ca-dir", filepath.Join(dir, "ca"), "--audit-log", filepath.Join(dir, "audit.log"), "--log-level", "error",
		"--", "/bin/sh", "-c", script)
	launch.Stdout, launch.Stderr = out, cmd.ErrOrStderr()
	// The demo's launch is the one above: the caller's knobs (a pin, a pod
	// socket) are not the demo's to take.
	launch.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		_, knob := envKnobs[name]
		return knob
	})
	if err := launch.Run(); err != nil {
		return fmt.Errorf("sandbox demo: %w", err)
	}
	audit, _ := os.ReadFile(filepath.Join(dir, "audit.log"))
	fmt.Fprintf(out, "\naudit log (a line per decision, before anything is dialled; an allowed one's outcome on its close line):\n%s", audit)
	return nil
}
