package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// A launch that cannot mean what it says is a usage error (exit 2) found
// before anything is created: no limit is dropped, no outcome is lost.
func TestLaunchUsageErrors(t *testing.T) {
	unwritable := filepath.Join(t.TempDir(), "missing-dir", "status.json")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--memory-max", "-1", "--", "/bin/true"}, "--memory-max -1"},
		{[]string{"--memory-max", "0", "--", "/bin/true"}, "--memory-max 0"},
		{[]string{"--pids-max", "0", "--", "/bin/true"}, "--pids-max 0"},
		{[]string{"--pids-max", "-5", "--", "/bin/true"}, "--pids-max -5"},
		{[]string{"--user", "4294967295", "--", "/bin/true"}, "uid 4294967295 is out of range"},
		{[]string{"--user", "1000:4294967295", "--", "/bin/true"}, "gid 4294967295 is out of range"},
		{[]string{"--json-status", unwritable, "--", "/bin/true"}, "--json-status"},
		{[]string{"--net", "bogus", "--", "/bin/true"}, `--net "bogus"`},
		{[]string{"--stop-timeout", "0s", "--", "/bin/true"}, "--stop-timeout"},
		{nil, "no command to run"},
	} {
		id := "usage-" + strings.NewReplacer("-", "", " ", "").Replace(tc.want)
		args := append([]string{"launch", "--sandbox-id", id}, tc.args...)
		code, _, stderr := airlock(t, "", args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("airlock %v: exit %d, %q; want %d naming %q", args, code, stderr, ExitUsage, tc.want)
		}
		if mnt, err := cgroup2.Mount(); err == nil {
			if _, err := os.Stat(filepath.Join(mnt, "airlock-"+id)); err == nil {
				t.Errorf("airlock %v created its cgroup before refusing", args)
				os.Remove(filepath.Join(mnt, "airlock-"+id))
			}
		}
	}
	if _, err := os.Stat(filepath.Dir(unwritable)); err == nil {
		t.Error("--json-status created a directory")
	}
}

// A sandbox uid that is a host account's is said, with the way out.
func TestLaunchWarnsOfAHostAccount(t *testing.T) {
	testutil.RequireRoot(t, "airlock launch")
	code, _, stderr := airlock(t, "", "launch", "--net", "none", "--user", "65534", "--", "/bin/true")
	if code != ExitOK || !strings.Contains(stderr, `uid 65534 is the host account \"nobody\"`) || !strings.Contains(stderr, "--user") {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	// A host group's gid too: it reads what that group may (shadow's
	// /etc/shadow).
	group, err := user.LookupGroupId("65534")
	if err != nil {
		t.Fatalf("no host group 65534 to test with: %v", err)
	}
	code, _, stderr = airlock(t, "", "launch", "--net", "none", "--user", "61000:65534", "--", "/bin/true")
	if code != ExitOK || !strings.Contains(stderr, fmt.Sprintf(`gid 65534 is the host group \"%s\"`, group.Name)) || strings.Contains(stderr, "uid 61000") {
		t.Fatalf("exit %d, stderr %s; want the host group named, not the unused uid", code, stderr)
	}
}

// A launch refused before its sandbox is made (a policy that fails its
// pin) still writes why to --json-status, with the exit code it ends with.
func TestLaunchStatusOfAPolicyRefused(t *testing.T) {
	status := filepath.Join(t.TempDir(), "status.json")
	code, _, errs := airlock(t, "", "launch", "--preset", "strict", "--policy-sha256", strings.Repeat("0", 64), "--json-status", status, "--", "/bin/true")
	raw, _ := os.ReadFile(status)
	var st struct {
		Started  bool   `json:"started"`
		Error    string `json:"error"`
		ExitCode int    `json:"exit_code"`
	}
	if code != ExitIntegrity || json.Unmarshal(raw, &st) != nil || st.Started || st.ExitCode != ExitIntegrity || st.Error == "" {
		t.Fatalf("launch with a pin the policy fails: exit %d (%s), --json-status %s; want %d, and the status saying so", code, errs, raw, ExitIntegrity)
	}
}

// --json-status is written by root, often in a directory a sandbox writes:
// a link planted there, or a hard link to another file, is refused and
// its target left as it was; a file of the launcher's own is emptied.
func TestStatusFileIsNotWrittenThroughLinks(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "shadow")
	if err := os.WriteFile(target, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	link, hard, own := filepath.Join(dir, "link.json"), filepath.Join(dir, "hard.json"), filepath.Join(dir, "own.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(target, hard); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{link: "symbolic link", hard: "hard links"} {
		if s, err := openStatus(path); err == nil || !strings.Contains(err.Error(), want) {
			if s != nil {
				s.Close()
			}
			t.Errorf("openStatus(%s) = %v; want it refused (%s)", filepath.Base(path), err, want)
		}
	}
	// A link on the way that another user could point elsewhere: the
	// sandbox's own, in its job directory.
	job := t.TempDir()
	os.Chmod(job, 0o777)
	out := filepath.Join(job, "out")
	os.Symlink(dir, out)
	os.Lchown(out, 65534, 65534)
	if s, err := openStatus(filepath.Join(out, "shadow")); err == nil || !strings.Contains(err.Error(), "the link") {
		if s != nil {
			s.Close()
		}
		t.Errorf("openStatus through another user's link = %v; want it refused", err)
	}
	if raw, err := os.ReadFile(target); err != nil || string(raw) != "secret" {
		t.Errorf("the links' target after the refusals: %q, %v; want it as it was", raw, err)
	}
	// One of this process's descriptors, by its name.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, err := openStatus(fmt.Sprintf("/dev/fd/%d", w.Fd()))
	w.Close()
	if err != nil {
		t.Fatalf("openStatus(/dev/fd/N) = %v; want the descriptor", err)
	}
	s.write(map[string]any{"started": true}, slog.Default())
	s.Close()
	if raw, _ := io.ReadAll(r); string(raw) != "{\"started\":true}\n" {
		t.Errorf("the status through /dev/fd/N: %q", raw)
	}
	if err := os.WriteFile(own, []byte(`{"started":true,"exit_code":0,"pid":123456789}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err = openStatus(own)
	if err != nil {
		t.Fatal(err)
	}
	s.write(map[string]any{"started": false}, slog.Default())
	s.Close()
	if raw, err := os.ReadFile(own); err != nil || string(raw) != "{\"started\":false}\n" {
		t.Errorf("a status file of the launcher's own after a launch: %q, %v; want only the new outcome", raw, err)
	}
}

// A launch whose --keep-env or --env would hand the command a credential
// its preset injects (from this process's environment, as its own proxy
// reads it) is refused, exit 2, before the sandbox is made: the status
// and the error name the variable, never the value.
func TestLaunchRefusesToHandOverAnInjectedKey(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-test-abc123")
	t.Setenv("AIRLOCK_TEST_COPY", "sk-ant-test-abc123")
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--keep-env", "ANTHROPIC_API_KEY"}, `--keep-env ANTHROPIC_API_KEY: it holds the credential preset "coder"'s rule "anthropic-api" injects (header x-api-key)`},
		{[]string{"--keep-env", "AIRLOCK_TEST_COPY"}, "--keep-env AIRLOCK_TEST_COPY: it holds the credential"},
		{[]string{"--env", "KEY=x-api-key: sk-ant-test-abc123"}, "--env KEY: it holds the credential"},
	} {
		status := filepath.Join(t.TempDir(), "status.json")
		args := append(append([]string{"launch", "--preset", "coder", "--json-status", status}, tc.flags...), "--", "/bin/true")
		code, _, stderr := airlock(t, "", args...)
		raw, _ := os.ReadFile(status)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) || !strings.Contains(string(raw), `"started":false`) || strings.Contains(stderr+string(raw), "abc123") {
			t.Errorf("airlock %v: exit %d, %s, status %s; want %d naming %s, not the key", args, code, stderr, raw, ExitUsage, tc.want)
		}
	}
}

// What is refused is a value holding an injected secret: a placeholder,
// a variable that holds none, a secret the proxy lacks are not; a file's
// secret is found as an environment variable's is.
func TestHandedSecret(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_INJECTED", "sk-live-abc123")
	t.Setenv("AIRLOCK_TEST_OTHER", "unrelated")
	// One the proxy refuses to send (a trailing space) is not injected,
	// but is the credential all the same.
	t.Setenv("AIRLOCK_TEST_SPACED", "sk-ant-spaced-key ")
	// Basic's user:pass, base64: "ci-bot:hunter2-long-pass".
	t.Setenv("AIRLOCK_TEST_BASIC", "Y2ktYm90Omh1bnRlcjItbG9uZy1wYXNz")
	// A token as the user, base64 unpadded: "ghp_usertoken12:x".
	t.Setenv("AIRLOCK_TEST_BASIC_USER", "Z2hwX3VzZXJ0b2tlbjEyOng")
	// A public user beside a token: "x-access-token:ghp_realsecret1234".
	t.Setenv("AIRLOCK_TEST_BASIC_GIT", "eC1hY2Nlc3MtdG9rZW46Z2hwX3JlYWxzZWNyZXQxMjM0")
	// A local server's dummy key, found whole only.
	t.Setenv("AIRLOCK_TEST_SHORT", "x")
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("ghp_filetoken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := policies.Preset{Name: "p", Rules: []policies.Rule{
		{Name: "model", Inject: map[string]policies.SecretRef{"authorization": {Env: "AIRLOCK_TEST_INJECTED", Format: "Bearer %s"}}},
		{Name: "git", Inject: map[string]policies.SecretRef{"x-token": {File: file}}},
		{Name: "lacking", Inject: map[string]policies.SecretRef{"x-key": {Env: "AIRLOCK_TEST_UNSET"}}},
		{Name: "spaced", Inject: map[string]policies.SecretRef{"x-api-key": {Env: "AIRLOCK_TEST_SPACED"}}},
		{Name: "basic", Inject: map[string]policies.SecretRef{"authorization": {Env: "AIRLOCK_TEST_BASIC", Format: "Basic %s"}}},
		{Name: "token-user", Inject: map[string]policies.SecretRef{"authorization": {Env: "AIRLOCK_TEST_BASIC_USER", Format: "Basic %s"}}},
		{Name: "git-user", Inject: map[string]policies.SecretRef{"authorization": {Env: "AIRLOCK_TEST_BASIC_GIT", Format: "Basic %s"}}},
		{Name: "short", Inject: map[string]policies.SecretRef{"x-key": {Env: "AIRLOCK_TEST_SHORT"}}},
	}}
	for _, tc := range []struct {
		envs, keep, args []string
		want             string
	}{
		{nil, []string{"AIRLOCK_TEST_INJECTED"}, nil, `--keep-env AIRLOCK_TEST_INJECTED: it holds the credential preset "p"'s rule "model" injects (header authorization)`},
		{[]string{"GH=ghp_filetoken"}, nil, nil, `--env GH: it holds the credential preset "p"'s rule "git" injects (header x-token)`},
		{nil, []string{"AIRLOCK_TEST_SPACED"}, nil, `--keep-env AIRLOCK_TEST_SPACED: it holds the credential preset "p"'s rule "spaced" injects (header x-api-key)`},
		{[]string{"KEY=sk-ant-spaced-key"}, nil, nil, `--env KEY: it holds the credential preset "p"'s rule "spaced" injects`},
		{[]string{"CRED=ci-bot:hunter2-long-pass"}, nil, nil, `--env CRED: it holds the credential preset "p"'s rule "basic" injects`},
		{[]string{"PASS=hunter2-long-pass"}, nil, nil, `--env PASS: it holds the credential preset "p"'s rule "basic" injects`},
		{[]string{"OPENAI_API_KEY=placeholder", "AIRLOCK_TEST_UNSET=", "EMPTY", "USER=ci-bot"}, []string{"AIRLOCK_TEST_OTHER", "AIRLOCK_TEST_UNSET"}, nil, ""},
		{[]string{"GH_TOKEN=ghp_usertoken12"}, nil, nil, `--env GH_TOKEN: it holds the credential preset "p"'s rule "token-user" injects`},
		{[]string{"GIT_USER=x-access-token"}, nil, []string{"-c", "credential.username=x-access-token"}, ""},
		{[]string{"T=ghp_realsecret1234"}, nil, nil, `--env T: it holds the credential preset "p"'s rule "git-user" injects`},
		{[]string{"HOME=/home/x"}, nil, []string{"-c", "exit 0"}, ""},
		{[]string{"DUMMY=x"}, nil, nil, `--env DUMMY: it holds the credential preset "p"'s rule "short" injects`},
		{[]string{"OTHER=fine", "LATER=sk-live-abc123"}, nil, nil, `--env LATER: it holds the credential preset "p"'s rule "model" injects`},
		{nil, nil, []string{"-v", "KEY=sk-live-abc123"}, `argument 2 of the command: it holds the credential preset "p"'s rule "model" injects`},
		{[]string{"X_sk-live-abc123=1"}, nil, nil, `--env: a variable's name holds the credential preset "p"'s rule "model" injects`},
	} {
		err := handedSecret(p, tc.envs, tc.keep, tc.args)
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--env %q --keep-env %q, arguments %q: %v; want %q", tc.envs, tc.keep, tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "abc123") {
			t.Errorf("--env %q: the refusal quotes the secret: %v", tc.envs, err)
		}
	}
}
