package certs

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/trusted"
)

func TestCreateLoadAndSign(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	ca, err := LoadOrCreate(dir, 8)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(filepath.Join(dir, KeyFile))
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("CA key mode = %v; want 0600", st.Mode().Perm())
	}
	again, err := LoadOrCreate(dir, 8)
	if err != nil || !again.Cert.Equal(ca.Cert) {
		t.Fatalf("reload of the generated CA: %v", err)
	}
	leaf, err := ca.Leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.example.com", Roots: pool}); err != nil {
		t.Fatalf("leaf does not verify against the CA: %v", err)
	}
	if same, _ := ca.Leaf("api.example.com"); same != leaf {
		t.Fatal("second Leaf for the same host was not cached")
	}
	if hits, misses := ca.CacheStats(); hits != 1 || misses != 1 {
		t.Fatalf("cache stats = %d hits %d misses; want 1 1", hits, misses)
	}
	ipLeaf, _ := ca.Leaf("127.0.0.1")
	if _, err := ipLeaf.Leaf.Verify(x509.VerifyOptions{DNSName: "127.0.0.1", Roots: pool}); err != nil {
		t.Fatalf("IP leaf does not verify: %v", err)
	}
}

func TestRefusesLooseKeyAndHalfCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	if _, err := LoadOrCreate(dir, 8); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(dir, KeyFile), 0o644)
	if _, err := LoadOrCreate(dir, 8); err == nil {
		t.Fatal("a world-readable CA key was accepted")
	}
	os.Remove(filepath.Join(dir, KeyFile))
	if _, err := LoadOrCreate(dir, 8); err == nil {
		t.Fatal("a CA directory without its key was accepted (or silently regenerated)")
	}
}

// What every sandbox is given to trust is the CA's certificate alone: a
// certificate file that also holds the key (one PEM for both, given as
// --ca-cert and --ca-key) or another certificate is refused, and the
// certificate handed out is the one parsed, never the file as read.
func TestCertFileHoldsTheCertificateAlone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	ca, err := LoadOrCreate(dir, 8)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	cert, _ := os.ReadFile(certPath)
	key, _ := os.ReadFile(keyPath)
	both := filepath.Join(dir, "both.pem")
	if err := os.WriteFile(both, append(append([]byte{}, cert...), key...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(both, both, 8); err == nil || !strings.Contains(err.Error(), "holds a private key") {
		t.Fatalf("Load(one PEM as certificate and key) = %v; want it refused: the certificate file holds the key", err)
	}
	chain := filepath.Join(dir, "chain.pem")
	os.WriteFile(chain, append(append([]byte{}, cert...), cert...), 0o600)
	if _, err := Load(chain, keyPath, 8); err == nil || !strings.Contains(err.Error(), "holds 2 certificates") {
		t.Fatalf("Load(two certificates) = %v; want it refused", err)
	}
	if strings.Contains(string(ca.CertPEM), "PRIVATE KEY") || strings.Count(string(ca.CertPEM), "BEGIN CERTIFICATE") != 1 {
		t.Fatalf("CertPEM = %s; want the one certificate", ca.CertPEM)
	}
}

// The key is believed only from a file of root's or this user's, in
// directories no other user may write: a key another user owns could be
// theirs to read, one in a directory they may write theirs to replace.
func TestKeyOwnerAndDirectory(t *testing.T) {
	testutil.RequireRoot(t, "a key owned by another user")
	dir := filepath.Join(t.TempDir(), "ca")
	if _, err := LoadOrCreate(dir, 8); err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, KeyFile)
	os.Chown(keyPath, 65534, 65534)
	if _, err := LoadOrCreate(dir, 8); !errors.Is(err, trusted.ErrUntrusted) {
		t.Fatalf("a key owned by uid 65534: %v; want it refused as untrusted", err)
	}
	os.Chown(keyPath, 0, 0)
	os.Chmod(dir, 0o777)
	if _, err := LoadOrCreate(dir, 8); !errors.Is(err, trusted.ErrUntrusted) {
		t.Fatalf("a key in a directory anyone may write: %v; want it refused as untrusted", err)
	}
	os.Chmod(dir, 0o700)
	if _, err := LoadOrCreate(dir, 8); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkLeaf(b *testing.B) {
	ca, err := LoadOrCreate(filepath.Join(b.TempDir(), "ca"), 1024)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("warm", func(b *testing.B) {
		ca.Leaf("warm.example.com")
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := ca.Leaf("warm.example.com"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sign", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			ca.leaves.Purge()
			if _, err := ca.Leaf("cold.example.com"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Proxies starting together on a fresh directory (concurrent spawns) all
// get the one CA the first of them made.
func TestLoadOrCreateConcurrently(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	cas := make([]*CA, 16)
	errs := make([]error, len(cas))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range cas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			cas[i], errs[i] = LoadOrCreate(dir, 8)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("LoadOrCreate #%d: %v", i, err)
		}
		if !cas[i].Cert.Equal(cas[0].Cert) {
			t.Fatalf("LoadOrCreate #%d loaded another CA than #0", i)
		}
	}
}

// Every connection of one CA gets the same ticket keys (a ticket from one
// opens on the next); another CA's are its own.
func TestTicketKeysShared(t *testing.T) {
	keys := func(ca *CA) [][32]byte {
		k, err := ca.TicketKeys()
		if err != nil || len(k) != 1 {
			t.Fatalf("TicketKeys() = %d keys, %v; want 1", len(k), err)
		}
		return k
	}
	a, err := LoadOrCreate(t.TempDir(), 4)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadOrCreate(t.TempDir(), 4)
	if err != nil {
		t.Fatal(err)
	}
	first := keys(a)
	if again := keys(a); again[0] != first[0] {
		t.Fatal("a CA's ticket key changed between two connections")
	}
	if keys(b)[0] == first[0] {
		t.Fatal("two CAs share a ticket key")
	}
}
