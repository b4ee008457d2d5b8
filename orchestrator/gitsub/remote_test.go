package gitsub

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func TestPushFetchDelete(t *testing.T) {
	ctx := context.Background()
	rm := Remote{URL: testutil.GitRemote(t)}
	files := map[string][]byte{"prompt.txt": []byte("hello\n"), "task": []byte("do it")}
	commit, err := rm.Push(ctx, "t-1", files)
	if err != nil {
		t.Fatal(err)
	}
	// The branch starts from the remote's HEAD: what the base carries (a
	// workflow, the runner) is on it too.
	if got := testutil.Git(t, "", "--git-dir", rm.URL, "show", Branch("t-1")+":README"); got != "spawn state" {
		t.Errorf("README on the branch = %q, want the base's", got)
	}
	if tip, err := rm.Tip(ctx, "t-1"); err != nil || tip != commit {
		t.Errorf("Tip = %q, %v; want %q", tip, err, commit)
	}
	f, err := rm.Fetch(ctx, "t-1", "prompt.txt", "task", "result.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(f.Files["prompt.txt"]) != "hello\n" || string(f.Files["task"]) != "do it" {
		t.Errorf("fetched %q", f.Files)
	}
	if _, ok := f.Files["result.json"]; ok {
		t.Error("result.json fetched before the runner wrote one")
	}
	// A task id is never reused: a second push to the branch is refused.
	if _, err := rm.Push(ctx, "t-1", map[string][]byte{"task": []byte("other")}); err == nil {
		t.Error("second push onto spawn/t-1 succeeded")
	}
	// A branch that moved since it was judged is kept.
	if err := rm.Delete(ctx, "t-1", strings.Repeat("0", 40)); err == nil {
		t.Error("Delete with a stale tip succeeded")
	}
	if err := rm.Delete(ctx, "t-1", commit); err != nil {
		t.Fatal(err)
	}
	if b, err := rm.Branches(ctx); err != nil || len(b) != 0 {
		t.Errorf("Branches after delete = %v, %v", b, err)
	}
}

func TestPushRefusesBadNames(t *testing.T) {
	rm := Remote{URL: testutil.GitRemote(t)}
	for _, tc := range []struct {
		id, file string
	}{
		{"../x", "task"},
		{"a/b", "task"},
		{"ok", "../task"},
		{"ok", ".."},
	} {
		if _, err := rm.Push(context.Background(), tc.id, map[string][]byte{tc.file: nil}); err == nil {
			t.Errorf("Push(%q, %q) succeeded", tc.id, tc.file)
		}
	}
}

// A remote URL's token never shows in an error (which reaches the ledger,
// the inbox and the terminal): git's command line in it is redacted too.
func TestRemoteErrorsHideToken(t *testing.T) {
	ctx := context.Background()
	const token = "wr0ng-t0ken"
	good, _ := testutil.GitHTTPRemote(t, "x-access-token", "right")
	rm := Remote{URL: strings.Replace(good, ":right@", ":"+token+"@", 1)}
	_, pushErr := rm.Push(ctx, "t-1", map[string][]byte{"task": []byte("x")})
	_, tipErr := rm.Tip(ctx, "t-1")
	_, fetchErr := rm.Fetch(ctx, "t-1", "task")
	for name, err := range map[string]error{"Push": pushErr, "Tip": tipErr, "Fetch": fetchErr, "Delete": rm.Delete(ctx, "t-1", "0000000000000000000000000000000000000000")} {
		if err == nil {
			t.Errorf("%s with a wrong token succeeded", name)
		} else if strings.Contains(err.Error(), token) || !strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("%s: %v; want the remote named, its token not", name, err)
		}
	}
	// A token as the URL's user, with no password or with GitHub's
	// x-oauth-basic.
	for _, userinfo := range []string{token, token + ":x-oauth-basic", token + ":"} {
		rm = Remote{URL: "https://" + userinfo + "@127.0.0.1:1/o/r.git"}
		if _, err := rm.Push(ctx, "t-1", map[string][]byte{"task": []byte("x")}); err == nil || strings.Contains(err.Error(), token) || strings.Contains(rm.String(), token) {
			t.Errorf("Push to a remote whose user is its token: %v (%s); want the token hidden", err, rm)
		}
	}
}

// What the sub-agent committed where a file should be (a directory named
// result.json) is left out, as an absent file is: read as a blob, it failed
// every poll, and the task never reached its deadline's end.
func TestFetchReadsOnlyFiles(t *testing.T) {
	ctx := context.Background()
	rm := Remote{URL: testutil.GitRemote(t)}
	if _, err := rm.Push(ctx, "t-tree", map[string][]byte{"task": []byte("do it")}); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(t.TempDir(), "work")
	testutil.Git(t, "", "clone", "--quiet", "--branch", Branch("t-tree"), rm.URL, work)
	dir := filepath.Join(work, Dir("t-tree"), "result.json")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Git(t, work, "add", ".")
	testutil.Git(t, work, "commit", "--quiet", "-m", "a tree where result.json goes")
	testutil.Git(t, work, "push", "--quiet", "origin", Branch("t-tree"))
	f, err := rm.Fetch(ctx, "t-tree", "task", "result.json")
	if err != nil {
		t.Fatalf("Fetch = %v; want the tree left out, not an error", err)
	}
	if _, ok := f.Files["result.json"]; ok || string(f.Files["task"]) != "do it" {
		t.Errorf("fetched %q; want the task, and no result.json", f.Files)
	}
}

// A remote URL's credentials never reach git's command line, which every
// user of the host may read in /proc: they go in its environment, as a
// header, and the remote takes them.
func TestRemoteCredentialsOffTheCommandLine(t *testing.T) {
	ctx := context.Background()
	const secret = "s3cret-t0ken"
	url, _ := testutil.GitHTTPRemote(t, "x-access-token", secret)
	real, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	argv := filepath.Join(t.TempDir(), "argv")
	wrapper := filepath.Join(t.TempDir(), "git")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nprintf '%s\\n' \"$*\" >>"+argv+"\nexec "+real+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	rm := Remote{URL: url, Git: wrapper}
	if _, err := rm.Push(ctx, "t-cred", map[string][]byte{"task": []byte("x")}); err != nil {
		t.Fatalf("Push with the right credentials: %v", err)
	}
	if _, err := rm.Fetch(ctx, "t-cred", "task"); err != nil {
		t.Fatalf("Fetch with the right credentials: %v", err)
	}
	logged, err := os.ReadFile(argv)
	if err != nil || !strings.Contains(string(logged), "127.0.0.1") {
		t.Fatalf("git's command lines: %q, %v; want the remote named", logged, err)
	}
	if strings.Contains(string(logged), secret) {
		t.Errorf("a git command line holds the remote's token:\n%s", logged)
	}
}

// What a remote's URL shows in messages: no password, no user of an
// http(s) URL (hosts take a token there), an ssh user (git@) as it is; a
// URL that does not parse with what could be credentials hidden, and
// refused by Check.
func TestRedact(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{"https://tok@h.test/o/r.git", "https://xxxxx@h.test/o/r.git"},
		{"https://tok:x-oauth-basic@h.test/o/r.git", "https://xxxxx:xxxxx@h.test/o/r.git"},
		{"ssh://git@h.test/o/r.git", "ssh://git@h.test/o/r.git"},
		{"ssh://git:pw@h.test/o/r.git", "ssh://git:xxxxx@h.test/o/r.git"},
		{"https://user:SE^CRET@h.test/o/r.git", "https://xxxxx@h.test/o/r.git"},
		{"https://user:p%zzSECRET@h.test/o/r.git", "https://xxxxx@h.test/o/r.git"},
		{"git@h.test:o/r.git", "git@h.test:o/r.git"},
		{"/srv/git/r.git", "/srv/git/r.git"},
	} {
		if got := redact(c.url); got != c.want {
			t.Errorf("redact(%q) = %q; want %q", c.url, got, c.want)
		}
	}
	for _, c := range []struct {
		url string
		ok  bool
	}{{"https://user:SE^CRET@h.test/o/r.git", false}, {"https://user:SE%5ECRET@h.test/o/r.git", true}, {"git@h.test:o/r.git", true}} {
		err := Remote{URL: c.url}.Check()
		if (err == nil) != c.ok || err != nil && strings.Contains(err.Error(), "CRET") {
			t.Errorf("Check(%q) = %v; want ok %v, and nothing of the password", c.url, err, c.ok)
		}
	}
}
