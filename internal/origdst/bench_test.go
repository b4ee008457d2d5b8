package origdst

import (
	"net"
	"net/netip"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/vishvananda/netns"
)

// BenchmarkTableOriginal is the ctnetlink GET every transparent connection
// makes (SO_ORIGINAL_DST, which it replaced, cost about 5 µs here but gives
// only the destination).
func BenchmarkTableOriginal(b *testing.B) {
	s, table := redirectedConn(b)
	local, remote := addrPortOf(s.LocalAddr()), addrPortOf(s.RemoteAddr())
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := table.Original(local, remote); err != nil {
			b.Fatal(err)
		}
	}
}

// redirectedConn is the accepted end of a connection to 127.0.0.2:443
// redirected to a listener, in a namespace the benchmark makes, and a
// Table of that namespace.
func redirectedConn(b *testing.B) (*net.TCPConn, *Table) {
	testutil.RequireRoot(b, "network namespaces and nftables")
	var s *net.TCPConn
	var table *Table
	_, err := inNewNamespace(func() (netip.AddrPort, error) {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return netip.AddrPort{}, err
		}
		defer ln.Close()
		if err := redirect443(uint16(ln.Addr().(*net.TCPAddr).Port)); err != nil {
			return netip.AddrPort{}, err
		}
		c, err := net.Dial("tcp4", "127.0.0.2:443")
		if err != nil {
			return netip.AddrPort{}, err
		}
		b.Cleanup(func() { c.Close() })
		a, err := ln.Accept()
		if err != nil {
			return netip.AddrPort{}, err
		}
		s = a.(*net.TCPConn)
		b.Cleanup(func() { s.Close() })
		table, err = OpenTable(netns.None())
		if err == nil {
			b.Cleanup(func() { table.Close() })
		}
		return netip.AddrPort{}, err
	})
	if err != nil {
		b.Fatal(err)
	}
	return s, table
}
