package gitsub

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
)

// runOnce pushes files as task id's branch on rm, runs the shipped runner
// for it (in the plain mode) and returns the result.json it pushed back and
// the branch's files.
func runOnce(t *testing.T, rm Remote, id string, files map[string][]byte) (spawn.Result, *Fetched) {
	t.Helper()
	ctx := context.Background()
	if _, err := rm.Push(ctx, id, files); err != nil {
		t.Fatal(err)
	}
	if err := runnerDispatch(t).Dispatch(ctx, Dispatch{ID: id, Branch: Branch(id), Remote: rm.URL}); err != nil {
		t.Fatalf("the runner delivered no result: %v", err)
	}
	f, err := rm.Fetch(ctx, id, Returned...)
	if err != nil {
		t.Fatal(err)
	}
	return parseResult(id, "k", f.Files["result.json"]), f
}

// A manifest is data, never shell: a field that is not a string (an array
// would be quoted word by word and run), a preset or pin that is not of
// its format (a newline would end the launch line), is refused with a
// failed result naming manifest.json, and nothing of it runs.
func TestRunnerHostileManifest(t *testing.T) {
	rm := Remote{URL: testutil.GitRemote(t)}
	mark := filepath.Join(t.TempDir(), "pwned")
	sh := `"sh", "-c", "touch ` + mark + `"`
	pin := strings.Repeat("0", 64)
	for _, tc := range []struct{ id, manifest, detail string }{
		{"t-id-array", `{"id":["t-id-array", ` + sh + `],"kind":"k","binary":"/bin/true","preset":"p","timeout_seconds":5,"policy_sha256":"` + pin + `"}`, "id is not a string"},
		{"t-bin-array", `{"id":"t-bin-array","kind":"k","binary":["/bin/true", ` + sh + `],"preset":"p","timeout_seconds":5,"policy_sha256":"` + pin + `"}`, "binary is not a string"},
		{"t-preset-nl", `{"id":"t-preset-nl","kind":"k","binary":"/bin/true","preset":"p\n$(touch ` + mark + `)","timeout_seconds":5,"policy_sha256":"` + pin + `"}`, "want a preset name"},
		{"t-policy-nl", `{"id":"t-policy-nl","kind":"k","binary":"/bin/true","preset":"p","timeout_seconds":5,"policy_sha256":"` + pin + `\n'; touch ` + mark + `"}`, "policy_sha256"},
		{"t-pin-quote", `{"id":"t-pin-quote","kind":"k","binary":"/bin/true","sha256":"'$(touch ` + mark + `)'","preset":"p","timeout_seconds":5,"policy_sha256":"` + pin + `"}`, "want 64 hex digits"},
		{"t-no-manifest", "", "no spawns/t-no-manifest/manifest.json"},
		{"t-args-obj", `{"id":"t-args-obj","kind":"k","binary":"/bin/true","args":{"a":"$(touch ` + mark + `)"},"preset":"p","timeout_seconds":5,"policy_sha256":"` + pin + `"}`, "args is not a list of strings"},
	} {
		t.Run(tc.id, func(t *testing.T) {
			files := map[string][]byte{"manifest.json": []byte(tc.manifest)}
			if tc.manifest == "" {
				files = map[string][]byte{} // a branch without spawns/<id>/
			}
			r, _ := runOnce(t, rm, tc.id, files)
			if r.Status != ledger.Failed || !strings.Contains(r.Detail, "manifest.json") || !strings.Contains(r.Detail, tc.detail) {
				t.Errorf("result %+v, want failed naming manifest.json and %q", r, tc.detail)
			}
			if _, err := os.Stat(mark); err == nil {
				t.Fatal("the manifest's value ran as a command")
			}
		})
	}
}

// Arguments and environment values with quotes, $(...) and newlines reach
// the sub-agent as written, as one argument each.
func TestRunnerArgsVerbatim(t *testing.T) {
	rm := Remote{URL: testutil.GitRemote(t)}
	f := agent(t, "t-verbatim", `printf '%s|%s|%s' "$#" "$1" "$AGENT_MODE" >"$0.out"; echo '{}'`)
	hostile := "it's \"$(touch /nonexistent/x)\"\nsecond line\n"
	f.Manifest.Args = []string{hostile}
	f.Manifest.Env = map[string]string{"AGENT_MODE": hostile}
	files, err := f.encode()
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := runOnce(t, rm, "t-verbatim", files); r.Status != ledger.Done {
		t.Fatalf("result %+v, want done", r)
	}
	got, err := os.ReadFile(f.Manifest.Binary + ".out")
	if want := "1|" + hostile + "|" + hostile; err != nil || string(got) != want {
		t.Errorf("the agent saw %q, %v; want %q", got, err, want)
	}
}

// Output the shell cannot pass as an argument (a result line, a stderr
// line over 128 KiB) still makes a result; the last line that is not blank
// is the result, as the local substrate reads it.
func TestRunnerOutput(t *testing.T) {
	rm := Remote{URL: testutil.GitRemote(t)}
	big := `head -c 200000 /dev/zero | tr '\0' a`
	for _, tc := range []struct {
		name, body string
		status     ledger.Status
		exit       int
		result     string
	}{
		{"big-result", `printf '{"big":"'; ` + big + `; printf '"}\n'`, ledger.Done, 0, `{"big":"aaaa`},
		{"trailing-blank", `printf '{"a":1}\n\n  \n'`, ledger.Done, 0, `{"a":1}`},
		{"big-stderr", big + ` >&2; echo '{"a":2}'; exit 3`, ledger.Failed, 3, `{"a":2}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "t-" + tc.name
			f := agent(t, id, tc.body)
			files, err := f.encode()
			if err != nil {
				t.Fatal(err)
			}
			r, _ := runOnce(t, rm, id, files)
			var compact bytes.Buffer
			if len(r.Result) > 0 {
				if err := json.Compact(&compact, r.Result); err != nil {
					t.Fatal(err)
				}
			}
			if r.Status != tc.status || r.Exit != tc.exit || !strings.HasPrefix(compact.String(), tc.result) {
				t.Errorf("result %s exit %d %q (result %.40s); want %s exit %d, result %s...", r.Status, r.Exit, r.Detail, r.Result, tc.status, tc.exit, tc.result)
			}
			if len(r.Detail) > 1000 {
				t.Errorf("detail is %d bytes long: want the stderr line clipped", len(r.Detail))
			}
		})
	}
}

// A remote URL carrying credentials (a CI job's token): the runner clones
// and pushes with them, and the sub-agent finds them neither in the
// checkout's .git nor in its environment.
func TestRunnerRemoteSecret(t *testing.T) {
	const secret = "s3cr3t-t0ken"
	url, _ := testutil.GitHTTPRemote(t, "x-access-token", secret)
	rm := Remote{URL: url}
	f := agent(t, "t-secret", `cat .git/config; git config --get remote.origin.url; env; grep -rl `+secret+` . >&2; echo '{}'`)
	files, err := f.encode()
	if err != nil {
		t.Fatal(err)
	}
	r, fetched := runOnce(t, rm, "t-secret", files)
	if r.Status != ledger.Done {
		t.Fatalf("result %+v, want done", r)
	}
	if !strings.Contains(string(fetched.Files["stdout.log"]), "url = http://127.0.0.1") {
		t.Fatalf("stdout.log = %s: want the checkout's config, its URL without credentials", fetched.Files["stdout.log"])
	}
	for name, b := range fetched.Files {
		if strings.Contains(string(b), secret) {
			t.Errorf("%s holds the remote's secret:\n%s", name, b)
		}
	}
}

// A git repository of the sub-agent's in work/ is not one the runner's git
// enters: with a commit, adding work/ ran git inside it, with its config
// (core.fsmonitor, a command of the sub-agent's), as the runner's user.
// Its .git goes, its files are committed as files, and the detail says
// so; the result and the logs are committed either way.
func TestRunnerEntersNoRepositoryOfTheAgents(t *testing.T) {
	testutil.RequireTool(t, "git")
	rm := Remote{URL: testutil.GitRemote(t)}
	mark := filepath.Join(t.TempDir(), "ran")
	for _, tc := range []struct{ id, script string }{
		{"t-work-repo", `git init -q "$w/repo"`},
		{"t-work-fsmonitor", `git init -q "$w/repo" && git -C "$w/repo" -c user.name=a -c user.email=a@a commit -q --allow-empty -m x &&
git -C "$w/repo" config core.fsmonitor "touch ` + mark + `"`},
		{"t-work-gitfile", `git init -q --separate-git-dir "$w/.hidden" "$w/repo"`},
	} {
		t.Run(tc.id, func(t *testing.T) {
			f := agent(t, tc.id, `w="$(dirname "$1")/work" && `+tc.script+` && echo kept >"$w/repo/file" && echo '{"a":1}'`)
			files, err := f.encode()
			if err != nil {
				t.Fatal(err)
			}
			r, fetched := runOnce(t, rm, tc.id, files)
			if _, err := os.Stat(mark); err == nil {
				t.Fatal("the runner's git ran the sub-agent's core.fsmonitor")
			}
			if r.Status != ledger.Done || !strings.Contains(string(r.Result), `"a"`) || !strings.Contains(r.Detail, "work/ held git repositories, committed as plain files") {
				t.Fatalf("result %+v; want done, its result, and a detail saying work/'s repositories went", r)
			}
			if _, ok := fetched.Files["stdout.log"]; !ok {
				t.Error("the branch holds no stdout.log; want the logs committed beside the result")
			}
			if kept := testutil.Git(t, rm.URL, "show", "refs/heads/"+Branch(tc.id)+":"+Dir(tc.id)+"/work/repo/file"); kept != "kept" {
				t.Errorf("work/repo/file on the branch: %q; want it committed as a file", kept)
			}
		})
	}
}
