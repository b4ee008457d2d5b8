// Package certs is the proxy's certificate authority: the airlock CA
// (generated on first start or supplied by the operator) and the leaf
// certificates it signs for inspected hosts, cached in a bounded LRU.
package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/durable"
	"github.com/airlock-sandbox/airlock/internal/trusted"
	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sys/unix"
)

// File names inside the CA directory.
const (
	CertFile = "ca.pem"
	KeyFile  = "ca-key.pem"
)

// CA signs leaf certificates.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer
	// leafKey is shared by every leaf: signing, not key generation, is then
	// the only per-host cost.
	leafKey *ecdsa.PrivateKey
	leaves  *lru.Cache[string, *tls.Certificate]
	hits    atomic.Uint64
	misses  atomic.Uint64
	tickets ticketKeys
}

// LoadOrCreate loads the CA from dir, or generates one (ECDSA P-256, key
// written 0600) when dir holds neither file. A directory with only one of
// the two files, or a key readable by others, is an error. Proxies
// starting together on a fresh dir (concurrent `airlock spawn`s) take
// turns under a lock of dir, so the second loads the CA the first made
// instead of finding its key without its certificate.
func LoadOrCreate(dir string, cacheSize int) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("CA directory: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	switch {
	case errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist):
		if err := create(dir, certPath, keyPath); err != nil {
			return nil, err
		}
	case certErr != nil || keyErr != nil:
		return nil, fmt.Errorf("CA directory %s must hold both %s and %s (or neither, to generate them)", dir, CertFile, KeyFile)
	}
	return Load(certPath, keyPath, cacheSize)
}

// Load reads an operator-supplied CA. The key is believed only from a
// regular file no other user could have written or can read, in
// directories no other user could have changed (trusted): it signs for
// every host every sandbox trusts. The certificate file must hold the one
// certificate and nothing else: it is handed to every sandbox as the root
// it trusts.
func Load(certPath, keyPath string, cacheSize int) (*CA, error) {
	keyPEM, err := readKey(keyPath)
	if err != nil {
		return nil, err
	}
	certFile, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if err := onlyOneCert(certFile); err != nil {
		return nil, fmt.Errorf("CA certificate %s: %w", certPath, err)
	}
	pair, err := tls.X509KeyPair(certFile, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA %s: %w", certPath, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("CA %s: %w", certPath, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("CA %s is not a CA certificate", certPath)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("CA key %s cannot sign", keyPath)
	}
	// Exactly the certificate parsed, whatever else the file held.
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	cache, err := lru.New[string, *tls.Certificate](cacheSize)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, CertPEM: certPEM, key: signer, leafKey: leafKey, leaves: cache}, nil
}

// readKey reads the CA key through one descriptor, checked: a regular
// file, root's or this user's, readable and writable by no one else, in a
// directory no other user may write. (Not every directory above: a home's
// ~/.config is group-writable under a umask of 002, its group the user's
// own.)
func readKey(path string) ([]byte, error) {
	dir, err := os.Stat(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	if err := trusted.Mode(dir); err != nil {
		return nil, fmt.Errorf("CA key %s: its directory: %w", path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("CA key %s is not a regular file", path)
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("CA key %s is readable by group or others (%v); chmod 600 it", path, fi.Mode().Perm())
	}
	if err := trusted.Mode(fi); err != nil {
		return nil, fmt.Errorf("CA key %s: %w", path, err)
	}
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

// onlyOneCert refuses a certificate file that holds a private key, or more
// than one certificate: every sandbox reads it, and trusts each
// certificate in it as a root.
func onlyOneCert(raw []byte) error {
	certs := 0
	for {
		var b *pem.Block
		if b, raw = pem.Decode(raw); b == nil {
			break
		}
		switch {
		case strings.Contains(b.Type, "PRIVATE KEY"):
			return fmt.Errorf("holds a private key (%s): every sandbox is given this file; keep the key in a file of its own", b.Type)
		case b.Type == "CERTIFICATE":
			certs++
		}
	}
	if certs > 1 {
		return fmt.Errorf("holds %d certificates: every sandbox would trust each; give the CA's alone", certs)
	}
	return nil
}

// lockDir holds an exclusive flock of dir itself until unlock.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("CA directory: %w", err)
	}
	if err := durable.Flock(f, unix.LOCK_EX); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "flock", Path: dir, Err: err}
	}
	return func() { f.Close() }, nil
}

func create(dir, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "airlock CA " + host, Organization: []string{"airlock"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(5, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	// The key first, created 0600 and never wider; then the certificate.
	if err := writeNew(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeNew(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// Leaf returns a certificate for host signed by the CA, from the cache when
// it holds one that is still valid for an hour.
func (ca *CA) Leaf(host string) (*tls.Certificate, error) {
	if c, ok := ca.leaves.Get(host); ok && time.Until(c.Leaf.NotAfter) > time.Hour {
		ca.hits.Add(1)
		return c, nil
	}
	ca.misses.Add(1)
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &ca.leafKey.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("sign leaf for %s: %w", host, err)
	}
	leaf, _ := x509.ParseCertificate(der)
	c := &tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: ca.leafKey, Leaf: leaf}
	ca.leaves.Add(host, c)
	return c, nil
}

// CacheStats reports leaf cache hits and misses since start.
func (ca *CA) CacheStats() (hits, misses uint64) { return ca.hits.Load(), ca.misses.Load() }

// ticketKeys encrypt the TLS session tickets given to the clients of
// inspected connections.
type ticketKeys struct {
	mu      sync.Mutex
	keys    [][32]byte // newest first
	rotated time.Time
	// config holds keys, set once per rotation: SetSessionTicketKeys
	// derives each key anew (a SHA-512 each), which a clone carries.
	config *tls.Config
}

// Ticket keys rotate daily and are kept a week, as crypto/tls's own.
const (
	ticketKeyRotation = 24 * time.Hour
	ticketKeysKept    = 7
)

// TicketKeys are the keys for tls.Config.SetSessionTicketKeys of every
// connection served with this CA's leaves. crypto/tls makes its own keys
// per Config, and each inspected connection has its own Config: without
// shared keys no ticket could be used on a later connection, and a
// client that resumes (Node's agents, libcurl within a process, Go's with
// a session cache) would pay a full handshake every time. The caller must
// not modify the slice.
func (ca *CA) TicketKeys() ([][32]byte, error) {
	t := &ca.tickets
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.keys) == 0 || time.Since(t.rotated) >= ticketKeyRotation {
		var k [32]byte
		if _, err := rand.Read(k[:]); err != nil {
			return nil, fmt.Errorf("session ticket key: %w", err)
		}
		t.keys = append([][32]byte{k}, t.keys[:min(len(t.keys), ticketKeysKept-1)]...)
		t.rotated = time.Now()
		t.config = &tls.Config{}
		t.config.SetSessionTicketKeys(t.keys)
	}
	return t.keys, nil
}

// TicketConfig is a tls.Config holding the TicketKeys, for an inspected
// connection to Clone and fill in: its keys are derived once per rotation,
// not on every handshake. The caller must not modify it.
func (ca *CA) TicketConfig() (*tls.Config, error) {
	if _, err := ca.TicketKeys(); err != nil {
		return nil, err
	}
	ca.tickets.mu.Lock()
	defer ca.tickets.mu.Unlock()
	return ca.tickets.config, nil
}
