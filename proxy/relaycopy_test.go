package proxy

import (
	"io"
	"testing"
	"time"
)

// A tunnel holds a relay buffer only while bytes are in flight: many
// tunnels that have carried data both ways and gone quiet hold none, and
// neither do ended ones. A buffer per direction for a tunnel's whole life
// would be 512 KiB per quiet tunnel.
func TestQuietTunnelsHoldNoBuffers(t *testing.T) {
	const tunnels = 64
	before := relayBufs.inUse.Load()
	type ends struct{ client, upstream io.ReadWriteCloser }
	var all []ends
	var dones []<-chan [2]int64
	for range tunnels {
		client, upstream, done := relayed(t)
		all = append(all, ends{client, upstream})
		dones = append(dones, done)
	}
	buf := make([]byte, 5)
	for _, e := range all { // both directions carry a message, then go quiet
		e.client.Write([]byte("hello"))
		io.ReadFull(e.upstream, buf)
		e.upstream.Write([]byte("olleh"))
		io.ReadFull(e.client, buf)
	}
	// The relay puts a buffer back right after its write, which the reader
	// above may see before it happens: wait for it, bounded.
	held := func() int64 {
		deadline := time.Now().Add(5 * time.Second)
		for relayBufs.inUse.Load() != before && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		return relayBufs.inUse.Load() - before
	}
	if n := held(); n != 0 {
		t.Errorf("%d quiet tunnels hold %d relay buffers; want none", tunnels, n)
	}
	for i, e := range all {
		e.client.Close()
		e.upstream.Close()
		select {
		case <-dones[i]:
		case <-time.After(10 * time.Second):
			t.Fatal("relay did not end after both ends closed")
		}
	}
	if n := held(); n != 0 {
		t.Errorf("after %d tunnels ended, %d relay buffers are held; want none", tunnels, n)
	}
}
