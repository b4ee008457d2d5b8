package proxy

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// pipeFDs counts the process's open pipe descriptors.
func pipeFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}

// A tunnel holds splice pipes only while bytes are in flight, and spare
// pipes are capped: many tunnels that have carried data and gone quiet,
// or have ended, leave at most maxSparePipes pipes open. With Go's own
// splice every open tunnel held two pipes (four descriptors) for its whole
// life, and ended ones left theirs open until the garbage collector ran.
func TestQuietTunnelsHoldNoPipes(t *testing.T) {
	const tunnels = 3 * maxSparePipes
	before := pipeFDs(t)
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
	if held := pipeFDs(t) - before; held > 2*maxSparePipes {
		t.Errorf("%d quiet tunnels hold %d pipe descriptors; want at most %d (the spares)", tunnels, held, 2*maxSparePipes)
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
	if held := pipeFDs(t) - before; held > 2*maxSparePipes {
		t.Errorf("after %d tunnels ended, %d pipe descriptors are open; want at most %d (the spares)", tunnels, held, 2*maxSparePipes)
	}
}
