package proxy

import (
	"io"
	"testing"
	"time"
)

// Bytes a client writes inside an inspected tunnel, whatever they are, never
// panic the loop and never reach the upstream as a request the policy
// denies: the fixture's upstream checks each request it receives against
// `policy eval` for exactly the method, path, query, upgrade and host it
// arrived with. The bytes go through the real loop (Proxy.inspect) over
// loopback TLS, to a real upstream through the real transport.
func FuzzInspectLoop(f *testing.F) {
	fx := newFuzzFixture(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		// No input may hold the loop: every wait in it is bounded by one of
		// the fixture's one-second timeouts once the client has closed its
		// side. The fuzzer calls an input that runs for 10 s a hang.
		client, tc, done := fx.inspectedTunnel(t, 8*time.Second)
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
