package kind_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/orchestrator/kind"
	"github.com/airlock-sandbox/airlock/policies"
)

// valid is a kind every case below breaks in one place.
const valid = `name: k
binary: {path: /bin/true}
args: ["-p", "{{.PromptFile}}"]
preset: reviewer
substrate: local
timeout: 20m
tokens: 40000
env: {CLAUDE_CODE_ENTRYPOINT: airlock}
prompt: |
  Review this. {{.Text}}
`

// writeKind writes src as dir/<name>.yaml and returns the path.
func writeKind(t *testing.T, dir, name, src string) string {
	t.Helper()
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadValid(t *testing.T) {
	dir := t.TempDir()
	path := writeKind(t, dir, "k", valid)
	k, err := kind.Load(dir, "k")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if k.Name != "k" || k.Binary != "/bin/true" || k.Preset != "reviewer" || k.Substrate != kind.Local ||
		k.Timeout.Minutes() != 20 || k.Tokens != 40000 || k.Env["CLAUDE_CODE_ENTRYPOINT"] != "airlock" ||
		k.File != path || string(k.Source) != valid || len(k.Args) != 2 {
		t.Errorf("Load = %+v", k)
	}
}

// TestLoadInvalid: every invalid manifest is refused, the error naming the
// file, the line and the field.
func TestLoadInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, file, old, new string
		want                 string // file:<want>
	}{
		{"unknown field", "k", "tokens: 40000", "tokens: 40000\ntoken: 1", `:8: token: unknown field`},
		{"missing preset", "k", "preset: reviewer\n", "", `:1: preset: missing: the field is required`},
		{"name is not the file", "other", "name: k", "name: k", `:1: name: "k" must be the file's base name "other"`},
		{"bad name", "k", "name: k", "name: K_1", `:1: name: "K_1": want lower-case letters`},
		{"duration without unit", "k", "timeout: 20m", "timeout: 20", `:6: timeout: a number (20) is not a duration`},
		{"bad duration", "k", "timeout: 20m", "timeout: 20x", `:6: timeout: "20x" is not a duration`},
		{"zero timeout", "k", "timeout: 20m", "timeout: 0s", `:6: timeout: 0s: want a positive duration`},
		{"missing timeout", "k", "timeout: 20m\n", "", `:1: timeout: missing: the field is required`},
		{"tokens not a number", "k", "tokens: 40000", "tokens: lots", `:7: tokens: want an integer, got "lots"`},
		{"zero tokens", "k", "tokens: 40000", "tokens: 0", `:7: tokens: 0: want a positive estimate`},
		{"relative binary", "k", "/bin/true", "claude", `:2: binary.path: "claude" is not absolute`},
		{"binary without path", "k", "{path: /bin/true}", "{sha256: abc}", `:2: binary.path: missing: the field is required`},
		{"bad pin", "k", "{path: /bin/true}", "{path: /bin/true, sha256: abc}", `:2: binary.sha256: want 64 hex digits`},
		{"bad substrate", "k", "substrate: local", "substrate: gha", `:5: substrate: "gha": want local or git`},
		{"prompt does not parse", "k", "{{.Text}}", "{{.Text", `:9: prompt: template: prompt:2: unclosed action`},
		{"prompt names no such field", "k", "{{.Text}}", "{{.Diff}}", `:9: prompt: template: prompt:1:15: executing "prompt" at <.Diff>: can't evaluate field Diff`},
		{"arg names no such field", "k", "{{.PromptFile}}", "{{.Prompt}}", `:3: args[1]: template: args:1:2: executing "args" at <.Prompt>: can't evaluate field Prompt`},
		{"env sets the proxy", "k", "CLAUDE_CODE_ENTRYPOINT: airlock", "HTTPS_PROXY: http://evil.test", `:8: env.HTTPS_PROXY: HTTPS_PROXY is the sandbox's`},
		{"env sets the CA", "k", "CLAUDE_CODE_ENTRYPOINT: airlock", "ssl_cert_file: /tmp/ca", `:8: env.ssl_cert_file: ssl_cert_file is the sandbox's`},
		{"args not a list", "k", `["-p", "{{.PromptFile}}"]`, `"-p"`, `:3: args: want a list of strings`},
		{"two documents", "k", "name: k", "name: k\n---\nname: j", `:2: a second YAML document`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(valid, tc.old, tc.new, 1)
			if src == valid && tc.old != tc.new {
				t.Fatalf("case does not change the manifest")
			}
			dir := t.TempDir()
			path := writeKind(t, dir, tc.file, src)
			k, err := kind.LoadFile(path)
			if err == nil {
				t.Fatalf("LoadFile = %+v, want an error", k)
			}
			if !strings.Contains(err.Error(), path+tc.want) {
				t.Errorf("LoadFile:\n%v\nwant it to contain %q", err, path+tc.want)
			}
		})
	}
}

func TestLoadRefusesAPathAsName(t *testing.T) {
	dir := t.TempDir()
	writeKind(t, dir, "k", valid)
	for _, name := range []string{"../k", "k/../k", "K", ""} {
		if _, err := kind.Load(dir, name); err == nil || !strings.Contains(err.Error(), "want lower-case letters") {
			t.Errorf("Load(%q) = %v, want the name refused", name, err)
		}
	}
}

// A kind another user could have written, or put in place of the
// operator's, is refused: it would choose its sub-agents' preset.
func TestLoadRefusesAnUntrustedKind(t *testing.T) {
	for _, tc := range []struct {
		name             string
		dirMode, fileMod os.FileMode
	}{
		{"in a directory others may write", 0o777, 0o600},
		{"a file others may write", 0o755, 0o666},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "kinds")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			path := writeKind(t, dir, "k", valid)
			os.Chmod(path, tc.fileMod)
			os.Chmod(dir, tc.dirMode)
			if _, err := kind.Load(dir, "k"); err == nil || !strings.Contains(err.Error(), "refusing") {
				t.Fatalf("Load = %v; want the kind refused as untrusted", err)
			}
		})
	}
}

func TestList(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"b.yaml", "a.yaml", "notes.txt", "Bad.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "c.yaml"), 0o700); err != nil {
		t.Fatal(err)
	}
	got, err := kind.List(dir)
	if err != nil || strings.Join(got, ",") != "a,b" {
		t.Errorf("List = %v, %v; want [a b]", got, err)
	}
	if got, err := kind.List(filepath.Join(dir, "missing")); err != nil || got != nil {
		t.Errorf("List(missing) = %v, %v; want none", got, err)
	}
}

func TestCheckPreset(t *testing.T) {
	dir := t.TempDir()
	writeKind(t, dir, "k", strings.Replace(valid, "preset: reviewer", "preset: nosuch", 1))
	k, err := kind.Load(dir, "k")
	if err != nil {
		t.Fatal(err)
	}
	e := embeddedEngine(t)
	err = k.Check(e, "")
	if !errors.Is(err, policies.ErrNoPreset) || !strings.Contains(err.Error(), `k.yaml:4: preset: "nosuch" is not in the verified policy bundle sha256:`) ||
		!strings.Contains(err.Error(), "reviewer") {
		t.Errorf("Check = %v, want ErrNoPreset naming the field, the bundle and its presets", err)
	}
}

// TestCheckBySubstrate: a git kind's binary lives on the runner's host,
// so its absence here is no refusal (the runner checks the pin); the
// local substrate needs it here, whichever the kind names by default.
func TestCheckBySubstrate(t *testing.T) {
	e := embeddedEngine(t)
	missing := filepath.Join(t.TempDir(), "not-here")
	for _, tc := range []struct {
		name, kindSub, spawnSub, want string
	}{
		{"git kind", "git", "", ""},
		{"git kind spawned on git", "git", "git", ""},
		{"local kind spawned on git", "local", "git", ""},
		{"local kind", "local", "", "binary.path: open " + missing},
		{"git kind spawned locally", "git", "local", "binary.path: open " + missing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(valid, "{path: /bin/true}", "{path: "+missing+", sha256: "+strings.Repeat("a", 64)+"}", 1)
			src = strings.Replace(src, "substrate: local", "substrate: "+tc.kindSub, 1)
			dir := t.TempDir()
			writeKind(t, dir, "k", src)
			k, err := kind.Load(dir, "k")
			if err != nil {
				t.Fatal(err)
			}
			err = k.Check(e, tc.spawnSub)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Check = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Check = %v, want %q", err, tc.want)
			}
		})
	}
	// A pin not in sha256sum's form is refused on git too.
	k := &kind.Kind{Name: "k", Binary: missing, SHA256: "sha256:XYZ", Preset: "reviewer", Substrate: "git"}
	if err := k.Check(e, ""); err == nil || !strings.Contains(err.Error(), "binary.sha256") {
		t.Errorf("Check(bad pin) = %v, want refused at binary.sha256", err)
	}
}

func TestCheckBinary(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "agent")
	body := []byte("#!/bin/sh\necho '{}'\n")
	if err := os.WriteFile(bin, body, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	good := hex.EncodeToString(sum[:])
	bad := strings.Repeat("0", 64)
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, body, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, binary, pin, want string
	}{
		{"pinned and matching", bin, good, ""},
		{"pinned with prefix, upper case", bin, "sha256:" + strings.ToUpper(good), ""},
		{"not pinned", bin, "", ""},
		{"pin mismatch", bin, bad, ":2: binary.sha256: " + bin + " has sha256 " + good + ", the kind pins " + bad},
		{"missing", filepath.Join(dir, "nope"), "", ":2: binary.path: open " + filepath.Join(dir, "nope") + ": no such file"},
		{"not executable", plain, "", ":2: binary.path: " + plain + " is not an executable file"},
		{"a directory", dir, "", ":2: binary.path: " + dir + " is not an executable file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pin := ""
			if tc.pin != "" {
				pin = ", sha256: " + tc.pin
			}
			src := strings.Replace(valid, "{path: /bin/true}", "{path: "+tc.binary+pin+"}", 1)
			kdir := t.TempDir()
			writeKind(t, kdir, "k", src)
			k, err := kind.Load(kdir, "k")
			if err != nil {
				t.Fatal(err)
			}
			err = k.CheckBinary()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("CheckBinary = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("CheckBinary = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestRender(t *testing.T) {
	k := &kind.Kind{Name: "k", Prompt: "{{.Kind}} {{.ID}}: {{.Text}}", Args: []string{"-p", "{{.PromptFile}}", "--dir={{.Dir}}"}}
	p, err := k.RenderPrompt(kind.Task{ID: "id1", Kind: "k", Text: "do it"})
	if err != nil || p != "k id1: do it" {
		t.Errorf("RenderPrompt = %q, %v", p, err)
	}
	args, err := k.RenderArgs(kind.ArgVars{ID: "id1", Dir: "/s/id1", PromptFile: "/s/id1/prompt.txt"})
	if err != nil || strings.Join(args, " ") != "-p /s/id1/prompt.txt --dir=/s/id1" {
		t.Errorf("RenderArgs = %q, %v", args, err)
	}
	// A kind built without Load (its templates never tried) still fails
	// on a missing key rather than render an empty string.
	bad := &kind.Kind{Name: "k", Prompt: "{{.Diff}}", Args: []string{"{{.Nope}}"}}
	if p, err := bad.RenderPrompt(kind.Task{}); err == nil || !strings.Contains(err.Error(), "prompt") {
		t.Errorf("RenderPrompt({{.Diff}}) = %q, %v; want an error", p, err)
	}
	if a, err := bad.RenderArgs(kind.ArgVars{}); err == nil || !strings.Contains(err.Error(), "args[0]") {
		t.Errorf("RenderArgs({{.Nope}}) = %q, %v; want an error", a, err)
	}
}
