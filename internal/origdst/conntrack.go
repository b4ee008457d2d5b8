// Package origdst reads the tuple a redirected TCP connection's client
// sent. A connection that nftables' redirect (or any DNAT) brought to a
// local listener looks, from the accepted socket, like one to the
// listener's own address, and its source port may be remapped; conntrack
// remembers the original, and a ctnetlink query by the reply tuple
// (Table.Original) gives it whole.
package origdst

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Table asks one network namespace's conntrack for the tuple a redirected
// connection's client sent. SO_ORIGINAL_DST gives only its destination;
// its source is needed too when the NAT remapped the source port: a client
// that connects from one port to two destinations gives two connections
// the same reply tuple (listener → client port), so the second gets a new
// port, and the accepted socket's remote address is not the client
// socket's own. A Table is safe for concurrent use.
type Table struct {
	c *conntrack.Conn
}

// OpenTable opens a ctnetlink socket inside ns (conntrack, like sock_diag,
// answers for the namespace its socket was created in). A closed handle
// means the caller's namespace. Its queries need CAP_NET_ADMIN there.
func OpenTable(ns netns.NsHandle) (*Table, error) {
	cfg := &netlink.Config{}
	if ns.IsOpen() {
		cfg.NetNS = int(ns)
	}
	c, err := conntrack.Dial(cfg)
	if err != nil {
		return nil, fmt.Errorf("conntrack: open a ctnetlink socket: %w", err)
	}
	return &Table{c: c}, nil
}

// Check asks for a connection that cannot exist (port 0), which conntrack
// answers ENOENT when it can be queried at all: without CAP_NET_ADMIN in
// the namespace the answer is EPERM, and without ctnetlink in the kernel
// EOPNOTSUPP, and every redirected connection would be refused.
func (t *Table) Check() error {
	unspec := netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	_, _, err := t.Original(unspec, unspec)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// Close releases the socket; later queries fail.
func (t *Table) Close() error { return t.c.Close() }

// Original returns the source and destination the client of an accepted
// TCP connection sent its SYN from and to, found by the connection's reply
// tuple: from local (the listener's address) to remote (the client's as
// the accepted socket sees it). A connection conntrack does not know gives
// an error wrapping ENOENT.
func (t *Table) Original(local, remote netip.AddrPort) (src, dst netip.AddrPort, err error) {
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	var q conntrack.Flow
	q.TupleReply.IP.SourceAddress = local.Addr()
	q.TupleReply.IP.DestinationAddress = remote.Addr()
	q.TupleReply.Proto.Protocol = unix.IPPROTO_TCP
	q.TupleReply.Proto.SourcePort = local.Port()
	q.TupleReply.Proto.DestinationPort = remote.Port()
	f, err := t.c.Get(q)
	if err != nil {
		return netip.AddrPort{}, netip.AddrPort{}, fmt.Errorf("conntrack: the connection %s→%s: %w", remote, local, err)
	}
	o := f.TupleOrig
	src = netip.AddrPortFrom(o.IP.SourceAddress.Unmap(), o.Proto.SourcePort)
	dst = netip.AddrPortFrom(o.IP.DestinationAddress.Unmap(), o.Proto.DestinationPort)
	if o.Proto.Protocol != unix.IPPROTO_TCP || !src.IsValid() || !dst.IsValid() {
		return netip.AddrPort{}, netip.AddrPort{}, fmt.Errorf("conntrack: the connection %s→%s: its entry has no TCP original tuple (%s)", remote, local, o)
	}
	return src, dst, nil
}
