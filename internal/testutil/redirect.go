package testutil

import (
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// RedirectTCP installs, in the network namespace nsFD, the least table
// that redirects: TCP to each of ports → :to, in the output hook, as
// sandbox.InstallEgress does for every port. Tests of what reads a
// redirected connection (origdst, the transparent listener) use it
// without the rest of the sandbox's table.
func RedirectTCP(nsFD, to int, ports ...int) error {
	conn, err := nftables.New(nftables.WithNetNSFd(nsFD))
	if err != nil {
		return err
	}
	table := conn.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "airlock_test"})
	chain := conn.AddChain(&nftables.Chain{
		Name: "out", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest,
	})
	for _, from := range ports {
		conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(from >> 8), byte(from)}},
			&expr.Immediate{Register: 1, Data: []byte{byte(to >> 8), byte(to)}},
			&expr.Redir{RegisterProtoMin: 1},
		}})
	}
	return conn.Flush()
}

// ReuseAddr, as a net.Dialer's Control, lets a client socket bind a port
// another socket holds: two connections from one source port, which the
// redirect's NAT must tell apart.
var ReuseAddr = SocketOption(unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)

// SocketOption is a net.Dialer's or net.ListenConfig's Control that sets
// one integer socket option before the socket binds.
func SocketOption(level, opt, value int) func(_, _ string, rc syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, value) }); err != nil {
			return err
		}
		return serr
	}
}
