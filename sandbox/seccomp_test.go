package sandbox

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The filter's socket rules, run in a BPF VM on the calls a program makes:
// only the families and inet protocols and types the sandbox's network and
// Landlock's rules account for, whatever this kernel has loaded (SCTP,
// SMC, DCCP are refused here even where the kernel lacks them anyway).
func TestSeccompSocketRules(t *testing.T) {
	prog, err := seccompProgram(true)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	const allow = secRetAllow
	refused := func(e unix.Errno) int { return secRetErrno | int(e) }
	for _, tc := range []struct {
		nr               uint32
		domain, typ, pro uint64
		want             int
	}{
		{unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 0, allow},
		{unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM | unix.SOCK_CLOEXEC | unix.SOCK_NONBLOCK, unix.IPPROTO_UDP, allow},
		{unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP, allow},
		{unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_ICMPV6, allow},
		{unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_SEQPACKET, 0, allow},
		{unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE, allow},
		{unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM, 0, allow},
		{unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_SEQPACKET, 0, refused(unix.EPROTONOSUPPORT)}, // SCTP
		{unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DCCP, 0, refused(unix.EPROTONOSUPPORT)},
		{unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP, refused(unix.EPROTONOSUPPORT)},
		{unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 256, refused(unix.EPROTONOSUPPORT)}, // SMC
		{unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM, unix.IPPROTO_SCTP, refused(unix.EPROTONOSUPPORT)},
		{unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET, 0, refused(unix.EAFNOSUPPORT)},
		{unix.SYS_SOCKET, unix.AF_SMC, unix.SOCK_STREAM, 0, refused(unix.EAFNOSUPPORT)},
		{unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0, refused(unix.EAFNOSUPPORT)},
		{unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT, refused(unix.EPERM)},
		{unix.SYS_SOCKETPAIR, unix.AF_TIPC, unix.SOCK_SEQPACKET, 0, refused(unix.EAFNOSUPPORT)},
	} {
		// struct seccomp_data, each 32-bit word the filter loads in the
		// VM's byte order (network order), which the kernel loads in the
		// host's: the number, the arch, each argument's low half.
		data := make([]byte, 64)
		binary.BigEndian.PutUint32(data[offNr:], tc.nr)
		binary.BigEndian.PutUint32(data[offArch:], auditArch)
		for i, a := range []uint64{tc.domain, tc.typ, tc.pro} {
			binary.BigEndian.PutUint32(data[offArg(i):], uint32(a))
		}
		got, err := vm.Run(data)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s(%d, %#x, %d) = %#x; want %#x", map[uint32]string{unix.SYS_SOCKET: "socket", unix.SYS_SOCKETPAIR: "socketpair"}[tc.nr], tc.domain, tc.typ, tc.pro, got, tc.want)
		}
	}
}
