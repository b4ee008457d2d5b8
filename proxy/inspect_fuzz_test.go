package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// Bytes a client writes inside an inspected tunnel, whatever they are, never
// panic the loop and never reach the upstream as a request the policy
// denies: the fixture's upstream checks each request it receives against
// `policy eval` for exactly the method, path, query, upgrade and host it
// arrived with. The bytes go through the real loop (Proxy.inspect) over
// loopback TLS, to a real upstream through the real transport.
func FuzzInspectLoop(f *testing.F) {
	fx := newFuzzFixture(f)
	ctx := context.Background()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(fx.roots.CertPEM)
	f.Fuzz(func(t *testing.T, raw []byte) {
		dc := fx.p.decide(ctx, fx.cc, policies.Request{Phase: policies.PhaseConnect, Host: fuzzHost, Port: fx.port})
		if !dc.d.Allow || !dc.d.Inspect {
			t.Fatalf("CONNECT %s:%d: %+v; the fuzz policy must inspect it", fuzzHost, fx.port, dc.d)
		}
		fx.p.resolve(ctx, dc)
		client, server := testutil.TCPPair(t)
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer server.Close()
			fx.p.inspect(fx.cc, server, &tracked{conn: server}, dc)
		}()
		// No input may hold the loop: every wait in it is bounded by one of
		// the fixture's one-second timeouts once the client has closed its
		// side. The fuzzer calls an input that runs for 10 s a hang.
		client.SetDeadline(time.Now().Add(8 * time.Second))
		if _, err := io.ReadFull(client, make([]byte, len(established))); err != nil {
			t.Fatalf("CONNECT answer: %v", err)
		}
		tc := tls.Client(client, &tls.Config{ServerName: fuzzHost, RootCAs: pool, NextProtos: []string{"http/1.1"}})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("handshake: %v", err)
		}
		read := make(chan struct{})
		go func() {
			// Closed once the proxy has closed its side: a refusal
			// lingers until the client's end is gone.
			io.Copy(io.Discard, tc)
			client.Close()
			close(read)
		}()
		tc.Write(raw)
		tc.CloseWrite()
		select {
		case <-done:
		case <-time.After(8 * time.Second):
			t.Fatalf("the inspection loop did not end after the client closed its side")
		}
		client.Close()
		<-read
		for _, v := range fx.takeViolations() {
			t.Errorf("upstream received %s", v)
		}
	})
}
