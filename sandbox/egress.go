package sandbox

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// IngressSource is the address a pod's ingress connects to its services
// from, in their namespace: the table refuses it to every socket but
// root's (the supervisor's), so a service can tell a request the ingress
// forwards (its X-Airlock-Operator set by the ingress) from one another
// service of the pod sends with that header of its own.
var IngressSource = netip.MustParseAddr("127.0.0.254")

// egressTable is the nft table (family inet) that InstallEgress owns.
const egressTable = "airlock"

// EgressRules is the nft table (inet airlock) that makes the proxy a
// namespace's only way out: every TCP connection not for a local address
// is redirected to the transparent listener, port 53 (UDP and TCP, any
// address) to the DNS sockets, and everything else not for a local
// address is rejected at once.
type EgressRules struct {
	TransparentPort, DNSPort int
	// LocalTCPPorts are the loopback TCP ports a connection may reach
	// besides TransparentPort and DNSPort (where the redirect leads, always
	// reachable); AllLocalTCP allows any (the sidecar shape, where the workload's own
	// loopback services are the operator's business).
	LocalTCPPorts []int
	AllLocalTCP   bool
	// PeerTCPPorts are those of LocalTCPPorts a pod's services listen on:
	// the set (peer_tcp) DenyPeers's rules keep one-offs from.
	PeerTCPPorts []int
	// ExemptUID, when set, lets sockets of that uid pass untouched (the
	// sidecar shape: the proxy runs in the workload's namespace and its
	// own upstream dials must leave). Nil inside airlock's own sandboxes:
	// the proxy's upstream sockets are made in the host namespace.
	ExemptUID *uint32
}

// InstallEgress installs r in namespace ns (netns.None(): the calling
// thread's), replacing an earlier airlock table, atomically: one netlink
// batch, so the namespace never has half a table. Errors name what the
// kernel lacks.
//
// The table, in nft's words (U the exempt uid, D the DNS port, T the
// transparent port, P the allowed local TCP ports):
//
//	chain nat_out { type nat hook output priority -100;
//		meta skuid U ct mark set ct mark | 0xa10000 accept
//		udp dport 53 redirect to :D; tcp dport 53 redirect to :D
//		fib daddr type local accept
//		meta l4proto tcp redirect to :T }
//	chain filter_out { type filter hook output priority 0; policy drop;
//		ip saddr 127.0.0.254 meta skuid != 0 reject with icmpx admin-prohibited
//		icmpv6 type 133-136 accept
//		fib saddr type != local drop
//		meta skuid U accept
//		meta l4proto tcp ct mark & 0xa10000 == 0xa10000 meta skuid != U drop
//		meta l4proto tcp ct mark & 0xa10000 == 0xa10000 accept
//		ct state established,related ct direction reply accept
//		ct state established,related fib daddr type local accept
//		fib daddr type local tcp dport @local_tcp accept
//		fib daddr type local meta l4proto != tcp accept
//		meta l4proto tcp reject with tcp reset
//		reject with icmpx admin-prohibited }
//
// filter_out sees a redirected packet after nat: its destination is then
// 127.0.0.1 or ::1 and its port T or D, which the set always holds besides
// LocalTCPPorts. Loopback is "fib daddr type local", not 127.0.0.0/8: a
// reply to the namespace's own address (192.0.0.8) is local too.
func InstallEgress(ns netns.NsHandle, r EgressRules) error {
	if err := r.validate(); err != nil {
		return err
	}
	// Closed off the caller's path: the batch deletes a table (closeSoon).
	opts := []nftables.ConnOption{nftables.AsLasting()}
	if ns != netns.None() {
		opts = append(opts, nftables.WithNetNSFd(int(ns)))
	}
	conn, err := nftables.New(opts...)
	if err != nil {
		return fmt.Errorf("nftables: netlink socket: %w", err)
	}
	defer closeSoon(conn)
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: egressTable}
	// Add (a no-op when it exists), delete, add again: one batch
	// replaces an earlier table or makes the first.
	conn.AddTable(table)
	conn.DelTable(table)
	conn.AddTable(table)
	r.natChain(conn, table)
	if err := r.filterChain(conn, table); err != nil {
		return err
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("install nft table inet %s: %w (the kernel needs nf_tables for family inet with nat, redir, fib, ct and reject: CONFIG_NF_TABLES_INET, CONFIG_NFT_NAT, CONFIG_NFT_REDIR, CONFIG_NFT_FIB_INET, CONFIG_NFT_CT, CONFIG_NFT_REJECT_INET)", egressTable, err)
	}
	return nil
}

func (r EgressRules) validate() error {
	for _, p := range append([]int{r.TransparentPort, r.DNSPort}, r.LocalTCPPorts...) {
		if p < 1 || p > 65535 {
			return fmt.Errorf("egress rules: port %d is out of range: want 1 to 65535", p)
		}
	}
	return nil
}

func (r EgressRules) natChain(conn *nftables.Conn, table *nftables.Table) {
	chain := conn.AddChain(&nftables.Chain{
		Name: "nat_out", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest,
	})
	var rules [][]expr.Any
	if r.ExemptUID != nil {
		// The nat chain sees a flow's first packet only: the mark says,
		// for the rest of the flow, that the exempt uid began it
		// (filter_out).
		rules = append(rules, slices.Concat(skuid(expr.CmpOpEq, *r.ExemptUID), markExempt(), accept()))
	}
	rules = append(rules,
		slices.Concat(l4proto(unix.IPPROTO_UDP), dport(53), redirect(r.DNSPort)),
		slices.Concat(l4proto(unix.IPPROTO_TCP), dport(53), redirect(r.DNSPort)),
		slices.Concat(localDaddr(), accept()),
		slices.Concat(l4proto(unix.IPPROTO_TCP), redirect(r.TransparentPort)),
	)
	for _, e := range rules {
		conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: e})
	}
}

func (r EgressRules) filterChain(conn *nftables.Conn, table *nftables.Table) error {
	chain := conn.AddChain(&nftables.Chain{
		Name: "filter_out", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter,
		Policy: new(nftables.ChainPolicyDrop),
	})
	// IngressSource is root's alone: a service trusts what comes from it
	// as the ingress's (X-Airlock-Operator).
	rules := [][]expr.Any{slices.Concat([]expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: IngressSource.AsSlice()},
	}, skuid(expr.CmpOpNeq, 0), []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}})}
	rules = append(rules,
		// Neighbour discovery is the kernel's, sent from no socket (no
		// uid), from a link-local address or none (::, while an address
		// is checked for duplicates): without it no IPv6 packet leaves,
		// the exempt uid's neither. A process would need CAP_NET_RAW to
		// send these types itself.
		slices.Concat(neighbourDiscovery(), accept()),
		// A packet from an address that is not the namespace's own: a
		// socket bound with IP_FREEBIND (no capability needed) to an
		// address outside, sending to a local one, would have the
		// answer routed out as the reply of a flow let through (below),
		// past the redirect.
		slices.Concat(notLocalSaddr(), drop()),
	)
	if r.ExemptUID != nil {
		rules = append(rules,
			slices.Concat(skuid(expr.CmpOpEq, *r.ExemptUID), accept()),
			// What the kernel sends of the exempt uid's TCP flow once
			// its socket is closed (the data still queued, the FIN,
			// TIME_WAIT's ACKs) comes from no socket, and no uid. A
			// socket of the workload's own on the flow is refused: one
			// bound to the same address and port, connecting to the same
			// peer once the exempt socket is gone (the peer reset it),
			// would take over the flow, marked, never redirected. TCP
			// only: a UDP flow of the exempt uid could be joined without
			// taking it over.
			slices.Concat(l4proto(unix.IPPROTO_TCP), markedExempt(), skuid(expr.CmpOpNeq, *r.ExemptUID), drop()),
			slices.Concat(l4proto(unix.IPPROTO_TCP), markedExempt(), accept()),
		)
	}
	// What belongs to a flow already let through: answers to one that
	// came in (a service's replies), and the rest only to the
	// namespace's own addresses. A flow the exempt uid began to the
	// outside (the proxy's UDP lookup of the real resolver, in a
	// sidecar's namespace) stays established in conntrack after its
	// socket closes, and a process of the workload that bound the same
	// port would ride it out past the redirect, which sees only a flow's
	// first packet.
	rules = append(rules, slices.Concat(established(), replyDirection(), accept()))
	rules = append(rules, slices.Concat(established(), localDaddr(), accept()))
	if r.AllLocalTCP {
		rules = append(rules, slices.Concat(localDaddr(), l4proto(unix.IPPROTO_TCP), accept()))
	} else {
		set := &nftables.Set{Table: table, ID: 1, Name: "local_tcp", Constant: true, KeyType: nftables.TypeInetService}
		elems := portElems(slices.Concat([]int{r.TransparentPort, r.DNSPort}, r.LocalTCPPorts))
		if err := conn.AddSet(set, elems); err != nil {
			return fmt.Errorf("nft set local_tcp: %w", err)
		}
		if len(r.PeerTCPPorts) > 0 {
			if err := conn.AddSet(&nftables.Set{Table: table, ID: 2, Name: peerSet, Constant: true, KeyType: nftables.TypeInetService}, portElems(r.PeerTCPPorts)); err != nil {
				return fmt.Errorf("nft set %s: %w", peerSet, err)
			}
		}
		rules = append(rules, slices.Concat(localDaddr(), l4proto(unix.IPPROTO_TCP), []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
		}, accept()))
	}
	rules = append(rules,
		// Loopback UDP (and anything but TCP) between the namespace's
		// processes stays as it was without the table.
		slices.Concat(localDaddr(), []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		}, accept()),
		// A locally sent SYN that meets a reset is a refused connect,
		// at once; anything else gets an ICMP error its sender sees.
		slices.Concat(l4proto(unix.IPPROTO_TCP), []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}}),
		[]expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}},
	)
	for _, e := range rules {
		conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: e})
	}
	return nil
}

// portElems are ports as the elements of a set of inet services, each
// once.
func portElems(ports []int) []nftables.SetElement {
	var elems []nftables.SetElement
	for _, p := range slices.Compact(slices.Sorted(slices.Values(ports))) {
		elems = append(elems, nftables.SetElement{Key: binaryutil.BigEndian.PutUint16(uint16(p))})
	}
	return elems
}

func accept() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}} }

func drop() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}} }

func skuid(op expr.CmpOp, uid uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: binaryutil.NativeEndian.PutUint32(uid)},
	}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

// dport matches the transport header's destination port (after l4proto:
// TCP and UDP keep it at the same offset).
func dport(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(p)},
	}
}

// localDaddr is "fib daddr type local": an address of the namespace's own.
func localDaddr() []expr.Any { return fibLocal(&expr.Fib{FlagDADDR: true}, expr.CmpOpEq) }

// notLocalSaddr matches a packet whose source is not one of the
// namespace's own addresses.
func notLocalSaddr() []expr.Any { return fibLocal(&expr.Fib{FlagSADDR: true}, expr.CmpOpNeq) }

// fibLocal compares the type of the address fib looks up with local.
func fibLocal(fib *expr.Fib, op expr.CmpOp) []expr.Any {
	fib.Register, fib.ResultADDRTYPE = 1, true
	return []expr.Any{fib, &expr.Cmp{Op: op, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)}}
}

func established() []expr.Any {
	return ctBits(expr.CtKeySTATE, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED, expr.CmpOpNeq, 0)
}

// ctBits matches a packet whose flow's conntrack key, masked, compares
// with want.
func ctBits(key expr.CtKey, mask uint32, op expr.CmpOp, want uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: key},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(mask),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: op, Register: 1, Data: binaryutil.NativeEndian.PutUint32(want)},
	}
}

// exemptMark are the bits of a flow's conntrack mark that say the exempt
// uid began it; the other bits are left to whoever else marks flows in
// the namespace.
const exemptMark = 0x00a1_0000

// markExempt sets exemptMark on the packet's flow.
func markExempt() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(^uint32(exemptMark)),
			Xor:  binaryutil.NativeEndian.PutUint32(exemptMark)},
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK, SourceRegister: true},
	}
}

// markedExempt matches a packet of a flow markExempt marked: all of
// exemptMark's bits, not one of them another's rules may set.
func markedExempt() []expr.Any {
	return ctBits(expr.CtKeyMARK, exemptMark, expr.CmpOpEq, exemptMark)
}

// neighbourDiscovery matches ICMPv6's router solicitations and
// advertisements and neighbour solicitations and advertisements (types
// 133 to 136).
func neighbourDiscovery() []expr.Any {
	return slices.Concat(l4proto(unix.IPPROTO_ICMPV6), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: []byte{133}, ToData: []byte{136}},
	})
}

// replyDirection matches a packet that answers its flow's first one.
func replyDirection() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyDIRECTION},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{1}}, // IP_CT_DIR_REPLY,
	}
}

// redirect is "redirect to :port": the packet goes to the namespace's own
// loopback (127.0.0.1 or ::1), at port.
func redirect(port int) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(uint16(port))},
		&expr.Redir{RegisterProtoMin: 1},
	}
}
