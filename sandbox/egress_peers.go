package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// peerSet is the nft set of a pod's services' ports (EgressRules.PeerTCPPorts).
const peerSet = "peer_tcp"

// DenyPeers keeps the processes of the cgroup v2 directory dir from the
// namespace's other processes: a pod's one-off, decided by its own
// preset, would otherwise use a service (one that holds credentials the
// proxy injects, say) past that preset. The table lets every process of
// the namespace reach the peer ports (a pod's services', TCP) and any
// local port over UDP or another protocol but TCP; for dir's processes
// (by the cgroup their socket was made in, dir or one below it) rules
// first in the filter chain reset TCP to the peer ports and refuse
// everything local but TCP, save UDP to the DNS port, where port 53
// lands. A service's UDP port need not be declared to be reached, so the
// one-off's own loopback UDP goes too: its TCP is held to the declared
// ports already. undo removes the rules.
func (n *Network) DenyPeers(dir string) (undo func() error, err error) {
	level, id, err := cgroupLevelID(dir)
	if err != nil {
		return nil, fmt.Errorf("keep %s from the services' ports: %w", dir, err)
	}
	// A socket for the rules and another for their removal, each closed
	// off the caller's path (closeSoon). Not one kept between them:
	// google/nftables reads one answer per message, and a reply left
	// unread (a second ACK when a batch loads a module) would be read as
	// the removal's.
	open := func() (*nftables.Conn, error) {
		conn, err := nftables.New(nftables.WithNetNSFd(int(n.NS)), nftables.AsLasting())
		if err != nil {
			return nil, fmt.Errorf("nftables: netlink socket: %w", err)
		}
		return conn, nil
	}
	conn, err := open()
	if err != nil {
		return nil, err
	}
	defer closeSoon(conn)
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: egressTable}
	chain := &nftables.Chain{Name: "filter_out", Table: table}
	tag := []byte("airlock-deny-peers " + dir)
	insert := func(verdict ...expr.Any) {
		conn.InsertRule(&nftables.Rule{Table: table, Chain: chain, UserData: tag, Exprs: slices.Concat(
			[]expr.Any{
				&expr.Socket{Key: expr.SocketKeyCgroupv2, Level: level, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint64(id)},
			},
			localDaddr(), verdict)})
	}
	// Inserted at the chain's head, so the last inserted comes first.
	insert(&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED})
	if dns := n.dnsPort(); dns != 0 {
		insert(slices.Concat(l4proto(unix.IPPROTO_UDP), dport(uint16(dns)), accept())...)
	}
	set, err := conn.GetSetByName(table, peerSet)
	switch {
	case errors.Is(err, unix.ENOENT): // no services' ports to keep it from
	case err != nil:
		return nil, fmt.Errorf("nft set %s: %w", peerSet, err)
	default:
		insert(slices.Concat(l4proto(unix.IPPROTO_TCP), []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
			&expr.Reject{Type: unix.NFT_REJECT_TCP_RST},
		})...)
	}
	if err := conn.Flush(); err != nil {
		return nil, fmt.Errorf("keep %s from the services' ports: nft rule: %w (the kernel needs nft socket cgroupv2 matching: CONFIG_NFT_SOCKET, Linux 5.13)", dir, err)
	}
	return sync.OnceValue(func() error {
		conn, err := open()
		if err != nil {
			return err
		}
		defer closeSoon(conn)
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
	}), nil
}

// closeSoon closes conn's netlink socket in the background. Its close
// waits for the kernel to free what the host's last nf_tables
// transactions removed (the socket's release flushes that work, which
// waits for an RCU grace period): 7–20 ms of each sandbox network's setup
// (its batch replaces a table) and of each one-off's end in a pod, on the
// 2-vCPU VM, which the launcher waited for.
func closeSoon(conn *nftables.Conn) { go conn.CloseLasting() }

// dnsPort is where the namespace's port 53 lands (0: nowhere).
func (n *Network) dnsPort() int {
	if len(n.DNSPackets) == 0 {
		return 0
	}
	return n.DNSPackets[0].LocalAddr().(*net.UDPAddr).Port
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
