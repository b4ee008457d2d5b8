package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// startMitmproxy runs Debian's mitmdump as the inspecting peer: its own
// confdir in the bench's directory (its CA is made there on the first
// start and kept for the later rounds, as airlock's is), the origin
// verified against the bench's test CA only, nothing printed per flow and
// no flow written anywhere. Its clients CONNECT to the origin's address
// (mitmproxy has no --resolve for mitm.bench) with SNI mitm.bench, so
// that it mints, and the origin presents, the same name as for airlock.
func startMitmproxy(dir string, up *upstreams) (*running, error) {
	if _, err := exec.LookPath("mitmdump"); err != nil {
		return nil, errors.New("mitmproxy not installed (apt-get install mitmproxy)")
	}
	confdir := filepath.Join(dir, "mitmproxy")
	if err := os.MkdirAll(confdir, 0o700); err != nil {
		return nil, err
	}
	addr := freePort()
	host, p, _ := net.SplitHostPort(addr)
	r, err := startWith(addr, "mitmdump", "--quiet", "--listen-host", host, "--listen-port", p,
		"--set", "confdir="+confdir,
		"--set", "ssl_verify_upstream_trusted_ca="+up.caFile,
		"--set", "flow_detail=0", "--set", "termlog_verbosity=error")
	if err != nil {
		return nil, err
	}
	r.inspectTarget = up.tlsAddr
	ca := filepath.Join(confdir, "mitmproxy-ca-cert.pem")
	if err := waitFile(ca, 10*time.Second); err != nil {
		r.stop()
		return nil, fmt.Errorf("mitmproxy's CA: %w", err)
	}
	if r.inspectRoots, err = pool(ca); err != nil {
		r.stop()
		return nil, fmt.Errorf("mitmproxy's CA: %w", err)
	}
	return r, nil
}

// waitFile waits until path exists and is not empty.
func waitFile(path string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not written within %v", path, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
