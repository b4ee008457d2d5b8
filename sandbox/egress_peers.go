package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// peerSet is the nft set of a pod's services' ports (EgressRules.PeerTCPPorts).
const peerSet = "peer_tcp"

// DenyPeers keeps the processes of the cgroup v2 directory dir from the
// namespace's peer ports (a pod's services', TCP and UDP), which its table
// lets every process of the namespace reach: a pod's one-off, decided by its own
// preset, would otherwise use a service (one that holds credentials the
// proxy injects, say) past that preset. The rule, first in the filter
// chain, rejects their connections by the cgroup their socket was made in,
// dir or one below it; undo removes it. A namespace without peer ports
// needs none.
func (n *Network) DenyPeers(dir string) (undo func() error, err error) {
	level, id, err := cgroupLevelID(dir)
	if err != nil {
		return nil, fmt.Errorf("keep %s from the services' ports: %w", dir, err)
	}
	conn, err := nftables.New(nftables.WithNetNSFd(int(n.NS)))
	if err != nil {
		return nil, fmt.Errorf("nftables: netlink socket: %w", err)
	}
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: egressTable}
	set, err := conn.GetSetByName(table, peerSet)
	if errors.Is(err, unix.ENOENT) {
		return func() error { return nil }, nil
	}
	if err != nil {
		return nil, fmt.Errorf("nft set %s: %w", peerSet, err)
	}
	chain := &nftables.Chain{Name: "filter_out", Table: table}
	tag := []byte("airlock-deny-peers " + dir)
	// TCP reset, UDP refused: a service listens on its ports either way.
	for _, proto := range []struct {
		l4     byte
		reject *expr.Reject
	}{
		{unix.IPPROTO_TCP, &expr.Reject{Type: unix.NFT_REJECT_TCP_RST}},
		{unix.IPPROTO_UDP, &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_PORT_UNREACH}},
	} {
		conn.InsertRule(&nftables.Rule{Table: table, Chain: chain, UserData: tag, Exprs: slices.Concat(
			[]expr.Any{
				&expr.Socket{Key: expr.SocketKeyCgroupv2, Level: level, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint64(id)},
			},
			localDaddr(), l4proto(proto.l4),
			[]expr.Any{
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
				proto.reject,
			})})
	}
	if err := conn.Flush(); err != nil {
		return nil, fmt.Errorf("keep %s from the services' ports: nft rule: %w (the kernel needs nft socket cgroupv2 matching: CONFIG_NFT_SOCKET, Linux 5.13)", dir, err)
	}
	return func() error {
		rules, err := conn.GetRules(table, chain)
		if err != nil {
			return fmt.Errorf("nft rules of %s: %w", chain.Name, err)
		}
		for _, r := range rules {
			if bytes.Equal(r.UserData, tag) {
				if err := conn.DelRule(r); err != nil {
					return err
				}
			}
		}
		return conn.Flush()
	}, nil
}

// cgroupLevelID is dir's depth below the cgroup v2 root (the root's is 0)
// and its id, the inode of its directory: what nft's socket cgroupv2
// expression compares.
func cgroupLevelID(dir string) (uint32, uint64, error) {
	path, err := cgroup2.Path(dir)
	if err != nil {
		return 0, 0, err
	}
	if path == "/" {
		return 0, 0, fmt.Errorf("%s is the cgroup v2 root, every process's", dir)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, 0, &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	return uint32(strings.Count(path, "/")), st.Ino, nil
}
