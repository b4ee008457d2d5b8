package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/presets"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestMain lets the test binary stand in for airlock where a command re-runs
// its own executable: `airlock demo` runs `airlock launch`, and the
// launcher re-executes itself as the sandbox's stage 2.
func TestMain(m *testing.M) {
	if os.Getenv("AIRLOCK_TEST_AS_AIRLOCK") == "1" || (len(os.Args) > 1 && os.Args[1] == sandbox.Stage2Arg) {
		main()
		return
	}
	os.Setenv("AIRLOCK_TEST_AS_AIRLOCK", "1")
	os.Exit(m.Run())
}

func airlock(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// copyPresets writes the embedded presets into a fresh directory.
func copyPresets(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "presets")
	os.MkdirAll(dir, 0o755)
	entries, _ := presets.FS.ReadDir(".")
	for _, e := range entries {
		raw, _ := presets.FS.ReadFile(e.Name())
		if err := os.WriteFile(filepath.Join(dir, e.Name()), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestHashLockVerifyAndTamperExitCode(t *testing.T) {
	dir := copyPresets(t)
	code, hash, errs := airlock(t, "", "policy", "hash", dir)
	if code != ExitOK || !strings.HasPrefix(hash, "sha256:") {
		t.Fatalf("policy hash = %d %q %s", code, hash, errs)
	}
	if code, _, errs := airlock(t, "", "policy", "lock", dir); code != ExitOK {
		t.Fatalf("policy lock = %d %s", code, errs)
	}
	if code, out, errs := airlock(t, "", "policy", "verify", dir); code != ExitOK || !strings.Contains(out, strings.TrimSpace(hash)) {
		t.Fatalf("policy verify = %d %q %s", code, out, errs)
	}
	if code, _, errs := airlock(t, "", "policy", "verify", dir, "--policy-sha256", strings.TrimSpace(hash)); code != ExitOK {
		t.Fatalf("policy verify with matching --policy-sha256 = %d %s", code, errs)
	}

	// One byte changed in a preset: refuse, with the distinct exit code and
	// the file named.
	p := filepath.Join(dir, "coder.rego")
	raw, _ := os.ReadFile(p)
	raw[0] ^= 0x20
	os.WriteFile(p, raw, 0o644)
	code, _, errs = airlock(t, "", "policy", "verify", dir)
	if code != ExitIntegrity || !strings.Contains(errs, "changed coder.rego") {
		t.Fatalf("policy verify after tamper = %d %s; want exit %d naming coder.rego", code, errs, ExitIntegrity)
	}
	code, _, errs = airlock(t, "", "demo", "--policy", dir)
	if code != ExitIntegrity {
		t.Fatalf("demo on a tampered bundle = %d %s; want exit %d", code, errs, ExitIntegrity)
	}
	// The environment knob pins too.
	t.Setenv("AIRLOCK_POLICY_SHA256", "sha256:"+strings.Repeat("0", 64))
	if code, _, _ := airlock(t, "", "policy", "verify"); code != ExitIntegrity {
		t.Fatalf("AIRLOCK_POLICY_SHA256 mismatch exit = %d; want %d", code, ExitIntegrity)
	}
}

func TestEvalAndExplain(t *testing.T) {
	input := `{"sandbox": {"id": "s", "kind": "reviewer"},
		"process": {"pid": 7, "exe": "/usr/bin/curl", "sha256": ""},
		"request": {"phase": "request", "host": "api.github.com", "port": 443,
			"method": "POST", "path": "/repos/o/r/issues"}}`
	code, out, errs := airlock(t, input, "policy", "eval", "--preset", "reviewer", "--input", "-")
	if code != ExitOK {
		t.Fatalf("policy eval = %d %s", code, errs)
	}
	var d struct {
		Allow  bool   `json:"allow"`
		Reason string `json:"reason"`
		Rule   string `json:"rule"`
		Hint   string `json:"hint"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("policy eval output %q: %v", out, err)
	}
	if d.Allow || d.Reason != "method_not_allowed" || d.Rule != "github-api-read" || !strings.Contains(d.Hint, "POST") {
		t.Fatalf("policy eval = %+v", d)
	}

	code, out, errs = airlock(t, strings.Replace(input, "/usr/bin/curl", "/usr/bin/wget", 1), "policy", "explain", "--preset", "reviewer")
	if code != ExitOK || !strings.Contains(out, "binary_not_allowed") ||
		!strings.Contains(out, `rule "github-api-read" would need: binary /usr/bin/wget`) {
		t.Fatalf("policy explain = %d\n%s\n%s", code, out, errs)
	}

	// The checks come from the library that decided: a WebSocket denial
	// names the websocket check as what the closest rule lacks.
	ws := strings.Replace(input, `"method": "POST"`, `"method": "GET", "upgrade": "websocket"`, 1)
	code, out, errs = airlock(t, ws, "policy", "explain", "--preset", "reviewer")
	if code != ExitOK || !strings.Contains(out, "websocket_not_allowed") ||
		!strings.Contains(out, `rule "github-api-read" would need: websocket true (it allows false)`) {
		t.Fatalf("policy explain of a WebSocket = %d\n%s\n%s", code, out, errs)
	}
	// An input refused before the preset is not a preset without rules.
	code, out, errs = airlock(t, "{}", "policy", "explain", "--preset", "reviewer")
	if code != ExitOK || !strings.Contains(out, "invalid_request") || strings.Contains(out, "no allow rules") ||
		!strings.Contains(out, "no rule was checked") {
		t.Fatalf("policy explain of {} = %d\n%s\n%s", code, out, errs)
	}

	// A misspelt input field is an error, not an empty input.
	if code, _, _ := airlock(t, `{"proces": {}}`, "policy", "eval", "--preset", "reviewer"); code != ExitUsage {
		t.Fatalf("policy eval with an unknown field exit = %d; want %d", code, ExitUsage)
	}
}

func TestPolicyTestFailsOnAFailingRegoTest(t *testing.T) {
	dir := copyPresets(t)
	if code, out, errs := airlock(t, "", "policy", "test", dir); code != ExitOK || !strings.Contains(out, "PASS") {
		t.Fatalf("policy test on the presets = %d\n%s\n%s", code, out, errs)
	}
	os.WriteFile(filepath.Join(dir, "broken_test.rego"), []byte("package broken_test\n\ntest_fails if false\n"), 0o644)
	if code, out, _ := airlock(t, "", "policy", "test", dir); code != ExitError || !strings.Contains(out, "FAIL") {
		t.Fatalf("policy test with a failing test = %d\n%s", code, out)
	}
}

// A test file that changes the policy changes it under test only (compile
// leaves test files out of every decision): `policy test` refuses to run
// the tests, naming the file, the rule and the package to move it out of,
// instead of passing on another policy than the one that decides. The
// bundle still loads, as `airlock up` loads it: `policy verify` passes,
// with a warning.
func TestPolicyTestRefusesATestThatChangesThePolicy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"a clause added to the library", map[string]string{
			"shim_test.rego": "package airlock.lib\n\n_bins_ok(_) := true\n\ntest_any_binary if _bins_ok([])\n",
		}, []string{"shim_test.rego:3: test rule _bins_ok", "package data.airlock.lib", "package airlock.lib_test"}},
		// The test's i is the comprehension's: under test it takes one
		// host, and the test that b.example is unreachable passes.
		{"a bare name in a policy module's package", map[string]string{
			"mine.rego": "package mine\n\nhosts := [h | h := [\"a.example\", \"b.example\"][i]]\n",
			"mp.rego": "package airlock.presets.mp\n\nimport data.airlock.lib\n\n" +
				`rules := [{"name": "r", "binaries": [{"path": "/usr/bin/curl"}], "hosts": data.mine.hosts}]` + "\n\ndenies := []\n\ndecision := lib.decide(rules, denies)\n",
			"mine_test.rego": "package mine\n\ni := 0\n\n" +
				`test_b_unreachable if not data.airlock.presets.mp.decision.allow with input as {"process": {"exe": "/usr/bin/curl", "sha256": ""}, "request": {"phase": "connect", "host": "b.example", "port": 443}}` + "\n",
		}, []string{"mine_test.rego:3: test rule i", "inside data.mine, the package of mine.rego", "package mine_test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyPresets(t)
			for name, body := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			code, out, errs := airlock(t, "", "policy", "test", dir)
			for _, w := range tc.want {
				if code == ExitOK || !strings.Contains(errs, w) || strings.Contains(out, "PASS") {
					t.Fatalf("policy test = %d\n%s\n%s; want the tests not run, naming %q", code, out, errs, w)
				}
			}
			code, out, errs = airlock(t, "", "policy", "verify", dir)
			if code != ExitOK || !strings.HasPrefix(out, "ok ") || !strings.Contains(errs, "warning: airlock policy test will not run") || !strings.Contains(errs, tc.want[0]) {
				t.Fatalf("policy verify = %d\n%s\n%s; want the bundle loaded, with a warning", code, out, errs)
			}
		})
	}
}

func TestFmt(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.rego")
	os.WriteFile(p, []byte("package x\nallow if {   true }\n"), 0o644)
	if code, out, _ := airlock(t, "", "policy", "fmt", "-l", "--fail", dir); code != ExitError || !strings.Contains(out, "x.rego") {
		t.Fatalf("policy fmt -l --fail = %d %q", code, out)
	}
	if code, _, errs := airlock(t, "", "policy", "fmt", "-w", dir); code != ExitOK {
		t.Fatalf("policy fmt -w = %d %s", code, errs)
	}
	if code, _, _ := airlock(t, "", "policy", "fmt", "-l", "--fail", dir); code != ExitOK {
		t.Fatalf("policy fmt after -w still reports changes")
	}
}

func TestDemo(t *testing.T) {
	// The caller's knobs are its own, not the demo's launch's (of a
	// bundle of the demo's): a pin of the embedded bundle failed it.
	_, embedded, _ := airlock(t, "", "policy", "hash")
	t.Setenv("AIRLOCK_POLICY_SHA256", strings.TrimSpace(embedded))
	code, out, errs := airlock(t, "", "demo")
	if code != ExitOK || !strings.Contains(out, "ALLOW") || !strings.Contains(out, "DENY") || !strings.Contains(out, "binary_not_allowed") {
		t.Fatalf("demo = %d\n%s\n%s", code, out, errs)
	}
	if os.Geteuid() == 0 {
		for _, want := range []string{"hello from the upstream at /public/hello", `"reason":"path_not_allowed"`, "no route"} {
			if !strings.Contains(out, want) {
				t.Errorf("sandbox demo output lacks %q:\n%s\n%s", want, out, errs)
			}
		}
	}
}

// A limit of zero or less would switch a guard off: it is a usage error,
// named, before anything listens.
func TestProxyRefusesNonPositiveLimits(t *testing.T) {
	for _, flag := range []string{"--max-conns=0", "--max-header-bytes=-1", "--read-header-timeout=0s", "--idle-timeout=-1s",
		"--handshake-timeout=0s", "--tunnel-idle-timeout=0s", "--dial-timeout=0s", "--write-timeout=0s", "--upstream-header-timeout=-1m"} {
		code, _, errs := airlock(t, "", "proxy", "--preset", "strict", "--listen", "127.0.0.1:0", "--ca-dir", t.TempDir(), flag)
		name, _, _ := strings.Cut(flag, "=")
		if code != ExitUsage || !strings.Contains(errs, name+" must be positive") {
			t.Errorf("airlock proxy %s = %d %q; want exit %d naming %s", flag, code, errs, ExitUsage, name)
		}
	}
}

// A malformed pin could never match a bundle: it is a usage error naming
// the flag (or its variable), found before any bundle is read, not an
// integrity failure. Both spellings of a good pin are accepted.
func TestPolicySHA256Malformed(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-bundle")
	for _, pin := range []string{"abc", "sha256:" + strings.Repeat("0", 63), "sha256:" + strings.Repeat("g", 64), "md5:" + strings.Repeat("0", 64)} {
		code, _, errs := airlock(t, "", "policy", "verify", missing, "--policy-sha256", pin)
		if code != ExitUsage || !strings.Contains(errs, "--policy-sha256") {
			t.Errorf("policy verify --policy-sha256 %q = %d %q; want exit %d naming the flag", pin, code, errs, ExitUsage)
		}
	}
	t.Run("env", func(t *testing.T) {
		t.Setenv("AIRLOCK_POLICY_SHA256", "sha256:nothex")
		if code, _, errs := airlock(t, "", "policy", "verify", missing); code != ExitUsage || !strings.Contains(errs, "AIRLOCK_POLICY_SHA256") {
			t.Errorf("AIRLOCK_POLICY_SHA256 malformed = %d %q; want exit %d naming it", code, errs, ExitUsage)
		}
	})
	_, hash, _ := airlock(t, "", "policy", "hash")
	hex := strings.TrimPrefix(strings.TrimSpace(hash), "sha256:")
	for _, pin := range []string{"sha256:" + hex, hex, strings.ToUpper(hex)} {
		if code, _, errs := airlock(t, "", "policy", "verify", "--policy-sha256", pin); code != ExitOK {
			t.Errorf("policy verify --policy-sha256 %q = %d %s", pin, code, errs)
		}
	}
}

// --audit-failure is closed or warn; anything else is a usage error, named,
// before anything is set up, for the proxy and the launcher alike.
func TestAuditFailureFlag(t *testing.T) {
	for _, args := range [][]string{
		{"proxy", "--preset", "reviewer", "--listen", "127.0.0.1:0", "--ca-dir", t.TempDir(), "--audit-failure", "open"},
		{"launch", "--preset", "reviewer", "--audit-failure", "open", "--", "/bin/true"},
	} {
		code, _, errs := airlock(t, "", args...)
		if code != ExitUsage || !strings.Contains(errs, "--audit-failure") || !strings.Contains(errs, "closed or warn") {
			t.Errorf("airlock %s = %d %q; want exit %d naming --audit-failure", args[0], code, errs, ExitUsage)
		}
	}
}

// A setting that would be ignored, or could not work, is refused, named,
// as a usage error before anything runs: policy and proxy flags where no
// proxy serves the sandbox (--net none or host, or no --preset); policy
// flags that would read as "none" (an empty key or lock, from an unset
// variable), need a key they lack, or make the public key an HMAC secret;
// proxy flags that do not parse, found before a policy is compiled.
func TestUsageErrorsBeforeAnythingRuns(t *testing.T) {
	zero := "sha256:" + strings.Repeat("0", 64)
	link := filepath.Join(t.TempDir(), "audit.log")
	if err := os.Symlink("/etc/passwd", link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"a preset with --net host", nil, []string{"launch", "--net", "host", "--preset", "reviewer", "--", "/bin/true"}, "--preset: --net host serves no proxy"},
		{"a pin with --net none", nil, []string{"launch", "--net", "none", "--policy-sha256", zero, "--", "/bin/true"}, "--policy-sha256: --net none serves no proxy"},
		{"a proxy flag without --preset", nil, []string{"launch", "--net", "proxy", "--allow-range", "0.0.0.0/0", "--", "/bin/true"}, "--allow-range: without --preset"},
		{"a policy knob with --net host", []string{"AIRLOCK_POLICY=/nonexistent"}, []string{"launch", "--net", "host", "--", "/bin/true"}, "--policy (from AIRLOCK_POLICY in the environment: unset it)"},
		{"an empty key", nil, []string{"policy", "verify", "--policy-public-key", ""}, "--policy-public-key is empty"},
		{"an empty key from the environment", []string{"AIRLOCK_POLICY_PUBLIC_KEY="}, []string{"policy", "verify"}, "--policy-public-key (from AIRLOCK_POLICY_PUBLIC_KEY) is empty"},
		{"an empty lock", nil, []string{"policy", "verify", "--policy-lock", ""}, "--policy-lock is empty"},
		{"a key id without a key", nil, []string{"policy", "verify", "--policy-key-id", "k"}, "--policy-key-id only means something with --policy-public-key"},
		{"an HMAC algorithm", nil, []string{"policy", "verify", "--policy-public-key", "/nonexistent.pem", "--policy-signing-alg", "HS256"}, `signing algorithm "HS256"`},
		{"an allowed range that is none", nil, []string{"launch", "--preset", "strict", "--allow-range", "bogus", "--", "/bin/true"}, `--allow-range "bogus"`},
		{"a pin to no port", nil, []string{"launch", "--preset", "strict", "--resolve", "x:99999:1.2.3.4", "--", "/bin/true"}, `--resolve "x:99999:1.2.3.4": bad port`},
		{"an upstream CA not there", nil, []string{"launch", "--preset", "strict", "--upstream-ca", "/nonexistent.pem", "--", "/bin/true"}, "--upstream-ca"},
		// Not policy, but as silently wrong: the id names the cgroup;
		// metrics a launch does not serve, or serves to every interface.
		{"metrics a launch does not serve", nil, []string{"launch", "--net", "proxy", "--preset", "strict", "--metrics", "127.0.0.1:0", "--", "/bin/true"}, "--metrics: a launch's proxy serves no metrics"},
		{"a demo's state dir with a manifest", nil, []string{"up", "/nonexistent/pod.yaml", "--state-dir", "/tmp/x"}, "--state-dir is the demo pod's"},
		{"metrics on every interface", nil, []string{"proxy", "--preset", "strict", "--metrics", "0.0.0.0:0"}, `--metrics "0.0.0.0:0"`},
		{"a sandbox id that leaves its cgroup", nil, []string{"launch", "--net", "none", "--sandbox-id", "x/../../esc", "--", "/bin/true"}, `--sandbox-id "x/../../esc"`},
		// Refused by the open too, but only after the policy's compile.
		{"an audit log through a link", nil, []string{"proxy", "--preset", "strict", "--audit-log", link}, "audit log " + link + " is a symbolic link"},
		{"a launch's audit log through a link", nil, []string{"launch", "--preset", "strict", "--audit-log", link, "--", "/bin/true"}, "audit log " + link + " is a symbolic link"},
		// Its leaf would be pod web's group, which web's boot kills.
		{"a sandbox id whose cgroup is a pod's", nil, []string{"launch", "--net", "none", "--sandbox-id", "pod-web", "--", "/bin/true"}, `--sandbox-id "pod-web": ids beginning pod- name pods' cgroups`},
		// Under another parent its v1 limit groups would be pod web's.
		{"a sandbox id whose v1 groups are a pod's", nil, []string{"launch", "--net", "none", "--cgroup", "/sys/fs/cgroup/elsewhere", "--memory-max", "67108864", "--sandbox-id", "pod-web", "--", "/bin/true"}, `--sandbox-id "pod-web": ids beginning pod- name pods' cgroups`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			if code, _, errs := airlock(t, "", tc.args...); code != ExitUsage || !strings.Contains(errs, tc.want) {
				t.Errorf("airlock %q = %d %q; want exit %d saying %q", tc.args, code, errs, ExitUsage, tc.want)
			}
		})
	}
	// Without them, as before.
	if code, _, errs := airlock(t, "", "policy", "verify"); code != ExitOK {
		t.Errorf("policy verify = %d %s", code, errs)
	}
}

// The policy variables are not ignored where their flags are not: `airlock
// up` refuses them (a pod's policy is its manifest's), and `policy verify`
// and `policy test` without a DIR take the bundle AIRLOCK_POLICY names,
// the one launch and spawn would load.
func TestPolicyVariablesWhereNoFlagTakesThem(t *testing.T) {
	t.Run("up", func(t *testing.T) {
		t.Setenv("AIRLOCK_POLICY_SHA256", "sha256:"+strings.Repeat("0", 64))
		if code, _, errs := airlock(t, "", "up", filepath.Join(t.TempDir(), "pod.yaml")); code != ExitUsage || !strings.Contains(errs, "AIRLOCK_POLICY_SHA256 is set") {
			t.Errorf("up with AIRLOCK_POLICY_SHA256 = %d %q; want exit %d naming it", code, errs, ExitUsage)
		}
	})
	broken := filepath.Join(t.TempDir(), "broken")
	os.MkdirAll(broken, 0o755)
	os.WriteFile(filepath.Join(broken, "x.rego"), []byte("package x\n\nbad {\n"), 0o644)
	t.Setenv("AIRLOCK_POLICY", broken)
	for _, sub := range []string{"verify", "test"} {
		if code, _, errs := airlock(t, "", "policy", sub); code == ExitOK || !strings.Contains(errs, broken) {
			t.Errorf("policy %s with AIRLOCK_POLICY=%s = %d %q; want that bundle loaded, and refused", sub, broken, code, errs)
		}
	}
}
