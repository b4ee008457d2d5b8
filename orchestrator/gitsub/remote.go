package gitsub

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Remote is the repository spawn branches live on.
type Remote struct {
	URL  string // anything git fetches from and pushes to: a URL, or a path (a bare repository in tests)
	Base string // the ref of URL a spawn branch starts from (so a workflow on it is on the branch too); "HEAD" when empty
	Git  string // the git binary; "git" when empty
}

// String is the URL without its password (a CI job's token), for messages.
func (rm Remote) String() string { return redact(rm.URL) }

// redact is s with the credentials of a URL replaced: a password, and an
// http(s) URL's user too (hosts take a token in either: https://TOKEN@host,
// https://TOKEN:x-oauth-basic@host; an ssh user, git@, is no secret). A
// URL that does not parse (a password with a bare % or ^) has what stands
// between its "://" and its last "@" replaced; s is itself when it is
// neither.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		if i, at := strings.Index(s, "://"), strings.LastIndexByte(s, '@'); i >= 0 && at > i {
			return s[:i+3] + "xxxxx" + s[at:]
		}
		return s
	}
	if u.User == nil {
		return s
	}
	user := u.User.Username()
	if u.Scheme == "http" || u.Scheme == "https" {
		user = "xxxxx"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(user, "xxxxx")
	} else {
		u.User = url.User(user)
	}
	return u.String()
}

// Check refuses a remote URL whose credentials could not be kept out of
// git's arguments (credentialsInEnv) and messages: one that names a user
// or password and does not parse as a URL.
func (rm Remote) Check() error {
	if _, err := url.Parse(rm.URL); err != nil && strings.Contains(rm.URL, "://") && strings.Contains(rm.URL, "@") {
		// Not the parser's error: it quotes the URL, or a piece of it.
		return fmt.Errorf("git remote %s does not parse as a URL: percent-encode its user and password", redact(rm.URL))
	}
	return nil
}

// BranchPrefix names every spawn branch: spawn/<task id>.
const BranchPrefix = "spawn/"

// Branch is the task's branch.
func Branch(id string) string { return BranchPrefix + id }

// Dir is the task's directory inside its branch.
func Dir(id string) string { return "spawns/" + id }

// validID is what a task id must look like to be a branch and a path
// component: no "..", no slashes, nothing git or a shell reads specially.
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]*$`)

func checkID(id string) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("task id %q: want letters, digits and '-'", id)
	}
	return nil
}

func (rm Remote) repo(ctx context.Context) (*repo, error) {
	if rm.URL == "" {
		return nil, errors.New("git substrate: no remote configured (--git-remote)")
	}
	g := rm.Git
	if g == "" {
		g = "git"
	}
	return newRepo(ctx, g)
}

// Push makes one commit on top of the remote's base holding files under
// spawns/<id>/ and pushes it as the new branch spawn/<id>. Nothing is
// cloned: the base is fetched one commit deep into a scratch repository,
// and the commit is built with plumbing (a temporary index). Pushing onto a
// branch that exists is refused, so a task id is never reused. It returns
// the commit pushed.
func (rm Remote) Push(ctx context.Context, id string, files map[string][]byte) (string, error) {
	if err := checkID(id); err != nil {
		return "", err
	}
	r, err := rm.repo(ctx)
	if err != nil {
		return "", err
	}
	defer r.close()
	base := rm.Base
	if base == "" {
		base = "HEAD"
	}
	if _, err := r.run(ctx, nil, "fetch", "--quiet", "--no-tags", "--depth=1", rm.URL, base); err != nil {
		return "", fmt.Errorf("fetch the base %s of %s (a spawn branch starts from it): %w", base, rm, err)
	}
	index := []string{"GIT_INDEX_FILE=" + r.dir + "/spawn.index"}
	if _, err := r.run(ctx, index, "read-tree", "FETCH_HEAD"); err != nil {
		return "", err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.ContainsAny(name, "/\x00") || name == "." || name == ".." || name == "" {
			return "", fmt.Errorf("spawn file %q: want a plain file name", name)
		}
		blob, err := r.lineIn(ctx, files[name], "hash-object", "-w", "--stdin")
		if err != nil {
			return "", err
		}
		if _, err := r.run(ctx, index, "update-index", "--add", "--cacheinfo", "100644,"+blob+","+Dir(id)+"/"+name); err != nil {
			return "", err
		}
	}
	tree, err := r.line(ctx, index, "write-tree")
	if err != nil {
		return "", err
	}
	commit, err := r.line(ctx, nil, "commit-tree", tree, "-p", "FETCH_HEAD", "-m", "spawn "+id)
	if err != nil {
		return "", err
	}
	// An explicit refs/heads/ destination that must not exist yet: a
	// push onto an existing branch is refused rather than merged.
	if _, err := r.run(ctx, nil, "push", "--quiet", "--force-with-lease=refs/heads/"+Branch(id)+":", rm.URL, commit+":refs/heads/"+Branch(id)); err != nil {
		return "", fmt.Errorf("push %s to %s: %w", Branch(id), rm, err)
	}
	return commit, nil
}

func (r *repo) lineIn(ctx context.Context, stdin []byte, args ...string) (string, error) {
	out, err := r.runIn(ctx, stdin, nil, args...)
	return strings.TrimSpace(string(out)), err
}

// Branches lists the remote's spawn branches: task id → tip commit.
func (rm Remote) Branches(ctx context.Context) (map[string]string, error) {
	return rm.lsRemote(ctx, "refs/heads/"+BranchPrefix+"*")
}

// Tip is the commit spawn/<id> points at on the remote, "" when there is no
// such branch.
func (rm Remote) Tip(ctx context.Context, id string) (string, error) {
	if err := checkID(id); err != nil {
		return "", err
	}
	tips, err := rm.lsRemote(ctx, "refs/heads/"+Branch(id))
	return tips[id], err
}

func (rm Remote) lsRemote(ctx context.Context, pattern string) (map[string]string, error) {
	r, err := rm.repo(ctx)
	if err != nil {
		return nil, err
	}
	defer r.close()
	out, err := r.run(ctx, nil, "ls-remote", "--heads", rm.URL, pattern)
	if err != nil {
		return nil, fmt.Errorf("list the spawn branches of %s: %w", rm, err)
	}
	tips := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		hash, ref, ok := strings.Cut(sc.Text(), "\t")
		id, isSpawn := strings.CutPrefix(ref, "refs/heads/"+BranchPrefix)
		if ok && isSpawn {
			tips[id] = hash
		}
	}
	return tips, nil
}

// Delete removes spawn/<id> from the remote if it still points at tip: a
// branch that moved since it was judged (a runner committing late) is
// kept.
func (rm Remote) Delete(ctx context.Context, id, tip string) error {
	if err := checkID(id); err != nil {
		return err
	}
	r, err := rm.repo(ctx)
	if err != nil {
		return err
	}
	defer r.close()
	ref := "refs/heads/" + Branch(id)
	if _, err := r.run(ctx, nil, "push", "--quiet", "--force-with-lease="+ref+":"+tip, rm.URL, ":"+ref); err != nil {
		return fmt.Errorf("delete %s on %s: %w", Branch(id), rm, err)
	}
	return nil
}

// Fetched are the files the runner committed back, as of one tip.
type Fetched struct {
	Tip   string
	Files map[string][]byte // name → content, for the names asked that exist
}

// maxFetched is the largest file Fetch reads.
const maxFetched = 64 << 20

// Fetch reads the named files of spawns/<id>/ at the branch's tip. A name
// the tip does not have as a file of at most maxFetched bytes is left out;
// a branch that does not exist is an error.
func (rm Remote) Fetch(ctx context.Context, id string, names ...string) (*Fetched, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	r, err := rm.repo(ctx)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if _, err := r.run(ctx, nil, "fetch", "--quiet", "--no-tags", "--depth=1", rm.URL, "refs/heads/"+Branch(id)); err != nil {
		return nil, fmt.Errorf("fetch %s from %s: %w", Branch(id), rm, err)
	}
	tip, err := r.line(ctx, nil, "rev-parse", "FETCH_HEAD^{commit}")
	if err != nil {
		return nil, err
	}
	f := &Fetched{Tip: tip, Files: map[string][]byte{}}
	out, err := r.run(ctx, nil, "ls-tree", "-z", "-l", tip, Dir(id)+"/")
	if err != nil {
		return nil, err
	}
	// Only files, and none larger than maxFetched: the branch is the
	// sub-agent's to write, and what cannot be read as a file (a tree, a
	// gitlink where result.json should be) would fail every poll, the task
	// never ending; a huge one would be read into memory whole.
	present := map[string]bool{}
	for _, e := range strings.Split(string(out), "\x00") {
		meta, path, ok := strings.Cut(e, "\t")
		fields := strings.Fields(meta)
		if !ok || len(fields) != 4 || fields[1] != "blob" {
			continue
		}
		if size, err := strconv.ParseInt(fields[3], 10, 64); err == nil && size <= maxFetched {
			present[strings.TrimPrefix(path, Dir(id)+"/")] = true
		}
	}
	for _, name := range names {
		if !present[name] {
			continue
		}
		b, err := r.run(ctx, nil, "cat-file", "blob", tip+":"+Dir(id)+"/"+name)
		if err != nil {
			return nil, err
		}
		f.Files[name] = b
	}
	return f, nil
}
