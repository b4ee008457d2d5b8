package main

import (
	"net"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// go-sockmap carries every load it takes part in, its data relayed by the
// kernel alone.
func TestGoSockmapCarriesTheTunnelLoads(t *testing.T) {
	testutil.RequireRoot(t, "a BPF sockhash")
	peers, err := sockmapRelay()
	if err != nil {
		t.Fatal(err)
	}
	defer peers.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go acceptEach(ln, func(c net.Conn) { spliceOne(peers, c.(*net.TCPConn)) })
	up := shortLoads(t)
	checkLoads(t, &running{addr: ln.Addr().String()}, up, "tunnels,https,tlsbulk,bulk")
}
