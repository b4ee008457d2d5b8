package policies_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

func rsaKeys(t *testing.T, dir, name string) (privFile, pub string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	priv := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	privFile = filepath.Join(dir, name+".pem")
	if err := os.WriteFile(privFile, priv, 0o600); err != nil {
		t.Fatal(err)
	}
	return privFile, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// A bundle signed by the real `opa build --signing-key` verifies with the
// public key, and fails with another key, unsigned, or after tampering.
func TestSignedBundleFromOpaBuild(t *testing.T) {
	opa := testutil.RequireTool(t, "opa")
	tmp := t.TempDir()
	src := filepath.Join(tmp, "src")
	writeBundle(t, src, map[string]string{"lib/airlock.rego": mustReadFile(t, "lib/airlock.rego")})
	priv, pub := rsaKeys(t, tmp, "signer")
	_, otherPub := rsaKeys(t, tmp, "other")
	signed := filepath.Join(tmp, "bundle.tar.gz")
	if out, err := exec.Command(opa, "build", "-b", src, "--signing-key", priv, "--signing-alg", "RS256", "-o", signed).CombinedOutput(); err != nil {
		t.Fatalf("opa build: %v\n%s", err, out)
	}
	ctx := context.Background()
	load := func(path, key string) (*policies.Engine, error) {
		return policies.New(ctx, policies.Options{Source: policies.Source{Path: path}, Logger: discard(),
			Verify: &policies.Verification{PublicKey: key}})
	}
	e, err := load(signed, pub)
	if err != nil {
		t.Fatalf("signed bundle with its key: %v", err)
	}
	if d := e.Decide(ctx, writerModel()); !d.Allow {
		t.Fatalf("signed bundle decided %+v", d)
	}
	if _, err := load(signed, otherPub); !errors.Is(err, policies.ErrIntegrity) {
		t.Fatalf("signed bundle with another key = %v; want ErrIntegrity", err)
	}
	if _, err := load(src, pub); !errors.Is(err, policies.ErrIntegrity) {
		t.Fatalf("unsigned directory with a key configured = %v; want ErrIntegrity", err)
	}

	// Tamper: build a signature for the directory, then change a preset.
	sign := exec.Command(opa, "sign", "--signing-key", priv, "--signing-alg", "RS256", "--bundle", ".")
	sign.Dir = src // opa sign names files relative to the path it is given
	if out, err := sign.CombinedOutput(); err != nil {
		t.Fatalf("opa sign: %v\n%s", err, out)
	}
	if _, err := load(src, pub); err != nil {
		t.Fatalf("signed directory: %v", err)
	}
	p := filepath.Join(src, "writer.rego")
	raw, _ := os.ReadFile(p)
	os.WriteFile(p, append(raw, []byte("\n# edited\n")...), 0o644)
	if _, err := load(src, pub); !errors.Is(err, policies.ErrIntegrity) {
		t.Fatalf("tampered signed directory = %v; want ErrIntegrity", err)
	}
}

func mustReadFile(t *testing.T, p string) string {
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// A signed bundle that brings no library gets the embedded one, which no
// signature covers and only it is excluded from verification: a file of
// the bundle's own under lib/, unsigned, is refused as unsigned, whatever
// its package, and however its package line is written.
func TestUnsignedLibraryFileIsRefused(t *testing.T) {
	opa := testutil.RequireTool(t, "opa")
	tmp := t.TempDir()
	priv, pub := rsaKeys(t, tmp, "signer")
	for _, tc := range []struct{ name, path, body string }{
		{"the library's package, CRLF", "lib/zz.rego", "package airlock.lib\r\n\r\n_any_host(_) := true\r\n"},
		{"the library's package, indented", "lib/zz.rego", "  package airlock.lib\n\n_any_host(_) := true\n"},
		// Beside the injected library, in lib/, another package: once
		// all of lib/ went unverified.
		{"another package in lib/", "lib/helpers.rego", "package helpers\n\nx := 1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "src")
			writeBundle(t, src, nil)
			sign := exec.Command(opa, "sign", "--signing-key", priv, "--signing-alg", "RS256", "--bundle", ".")
			sign.Dir = src
			if out, err := sign.CombinedOutput(); err != nil {
				t.Fatalf("opa sign: %v\n%s", err, out)
			}
			load := func() error {
				_, err := policies.New(context.Background(), policies.Options{Source: policies.Source{Path: src}, Logger: discard(),
					Verify: &policies.Verification{PublicKey: pub}})
				return err
			}
			if err := load(); err != nil {
				t.Fatalf("the signed bundle: %v", err)
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Join(src, tc.path)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(src, tc.path), []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := load(); !errors.Is(err, policies.ErrIntegrity) {
				t.Fatalf("an unsigned %s: %v; want its signature missed (ErrIntegrity)", tc.path, err)
			}
		})
	}
}

// A module whose rules would land in the injected library refuses the
// bundle even unsigned, whatever its package says: its rules would join
// the library every preset is reviewed against. The look before parsing
// may miss the library's package (a quoted one), and a rule's head may
// reach into it from above (lib._bins_ok in package airlock).
func TestBundleCannotExtendInjectedLibrary(t *testing.T) {
	for _, tc := range []struct{ name, file, body, want string }{
		{"the library's package, quoted", "extend.rego", "package airlock[\"lib\"]\n\n_any_host(_) := true\n",
			"extend.rego declares package data.airlock.lib"},
		{"a package below the library's", "extend.rego", "package airlock.lib.more\n\nx := 1\n",
			"extend.rego declares package data.airlock.lib.more"},
		{"head refs from package airlock", "x.rego", "package airlock\n\nlib._bins_ok(_) := true\n\nlib._paths_ok(_) := true\n",
			"x.rego:3: rule lib._bins_ok (in package data.airlock) defines data.airlock.lib._bins_ok"},
		{"a head ref with a variable key", "x.rego", "package airlock\n\nlib[k] := true if some k in {\"_any_host\"}\n",
			"defines data.airlock.lib[k]"},
		{"the library's whole document", "x.rego", "package airlock\n\nlib := {}\n", "defines data.airlock.lib,"},
		// Test files never decide: a bundle's own tests of the
		// library's helpers, in a package of their own, leave the
		// library injected (in its package `policy test` refuses
		// them: TestTestFileCannotChangeWhatDecides).
		{"a test of the library", "mylib_test.rego", "package airlock.lib_test\n\nimport data.airlock.lib\n\ntest_host if lib.host_match(\"*.example.com\", \"a.example.com\")\n", ""},
		{"package airlock beside the library", "x.rego", "package airlock\n\nlibrary.x := 1\n\nhelpers.y := 2\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bundle")
			writeBundle(t, dir, map[string]string{tc.file: tc.body})
			e, err := policies.New(context.Background(), policies.Options{Source: policies.Source{Path: dir}, Logger: discard()})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("New = %v; want the bundle loaded, the library injected", err)
				}
				// The injected library decides: a host no rule of the
				// preset names is refused.
				in := &policies.Input{Sandbox: policies.Sandbox{Preset: "strict"}, Process: policies.Process{Exe: "/usr/bin/evil"},
					Request: policies.Request{Phase: policies.PhaseConnect, Host: "evil.example", Port: 443}}
				if d := e.Decide(context.Background(), in); d.Allow || d.Reason != policies.ReasonHostNotAllowed {
					t.Fatalf("Decide = %+v; want host_not_allowed", d)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v; want the module refused, naming %q", err, tc.want)
			}
		})
	}
}
