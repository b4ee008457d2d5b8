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
