package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM: debugging other processes (ptrace and
// what needs its access: another's memory, its descriptors by
// pidfd_getfd, which would hand a binary another's allowed connection,
// their comparison), loading kernel code, new mounts, namespace games,
// keyrings, and the async interfaces that bypass syscall filtering.
var deniedSyscalls = []uint32{
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_PIDFD_GETFD, unix.SYS_PROCESS_MADVISE, unix.SYS_KCMP,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE,
	unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR,
	unix.SYS_SETNS, unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY, unix.SYS_USERFAULTFD,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE,
	unix.SYS_DELETE_MODULE, unix.SYS_REBOOT, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT,
	unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_QUOTACTL, unix.SYS_VHANGUP,
	unix.SYS_SYSLOG,
}

const (
	secRetAllow  = 0x7fff0000 // SECCOMP_RET_ALLOW
	secRetErrno  = 0x00050000 // SECCOMP_RET_ERRNO
	secRetKill   = 0x80000000 // SECCOMP_RET_KILL_PROCESS
	x32SyscallNr = 0x40000000 // __X32_SYSCALL_BIT

	offNr   = 0
	offArch = 4
)

func offArg(i int) uint32 { return 16 + 8*uint32(i) } // low 32 bits (little endian)

// seccompProgram is the filter: check the architecture (anything else is
// killed), refuse the x32 ABI, then the deny list and the argument checks.
// Not full (--seccomp off), only the terminal's: the sandbox may share the
// user's terminal, and what TIOCSTI types there the user's shell runs, as
// root when the launcher is.
func seccompProgram(full bool) ([]bpf.Instruction, error) {
	p := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArch, SkipTrue: 1},
		bpf.RetConstant{Val: secRetKill},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32SyscallNr, SkipFalse: 1},
		errnoRet(unix.EPERM),
	}
	// ioctl: no TIOCSTI or TIOCLINUX, which push keystrokes into the
	// terminal the sandbox shares with the user's shell: the shell would
	// read and run them after the sandbox exits. The kernel reads the
	// request as 32 bits, so only those are compared.
	p = append(p, refuseWhen(unix.SYS_IOCTL, argIs{arg: 1, test: bpf.JumpEqual, vals: []uint32{unix.TIOCSTI, unix.TIOCLINUX}})...)
	if !full {
		return append(p, bpf.RetConstant{Val: secRetAllow}), nil
	}
	for _, nr := range deniedSyscalls {
		p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipFalse: 1}, errnoRet(unix.EPERM))
	}
	// clone3 passes its flags in memory a filter cannot read: ENOSYS makes
	// libc fall back to clone, whose flags it can.
	p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_CLONE3, SkipFalse: 1}, errnoRet(unix.ENOSYS))
	// unshare and clone may not create a user namespace (nor, for
	// unshare, any namespace a capability-less process could use).
	for _, nr := range []uint32{unix.SYS_UNSHARE, unix.SYS_CLONE} {
		p = append(p, refuseWhen(nr, argIs{arg: 0, test: bpf.JumpBitsSet, vals: []uint32{unix.CLONE_NEWUSER}})...)
	}
	// No thread with a file table of its own: the proxy finds a
	// socket's holders by their processes' tables (/proc/PID/fd), which
	// show the main thread's, and a table only a thread holds would keep
	// a holder out of its sight (a process not allowed to connect, using
	// a socket it passed to one that is).
	p = append(p, refuseWhen(unix.SYS_UNSHARE, argIs{arg: 0, test: bpf.JumpBitsSet, vals: []uint32{unix.CLONE_FILES}})...)
	// close_range's CLOSE_RANGE_UNSHARE gives the calling thread a table
	// of its own too.
	p = append(p, refuseWhen(unix.SYS_CLOSE_RANGE, argIs{arg: 2, test: bpf.JumpBitsSet, vals: []uint32{unix.CLOSE_RANGE_UNSHARE}})...)
	p = append(p, refuseWhen(unix.SYS_CLONE,
		argIs{arg: 0, test: bpf.JumpBitsSet, vals: []uint32{unix.CLONE_THREAD}}, argIs{arg: 0, test: bpf.JumpBitsNotSet, vals: []uint32{unix.CLONE_FILES}})...)
	// No signal the Go runtime would take for a fault of its own (see
	// runtimeFaultSignals) sent any way that does not say it was sent:
	// queued (rt_sigqueueinfo, rt_tgsigqueueinfo, pidfd_send_signal),
	// or raised by the kernel for a descriptor's owner (F_SETSIG), to
	// any target: the init is pid 1 inside, but a thread id of the init
	// (/proc/1/task) reaches its whole process, and so does F_SETOWN.
	p = append(p, refuseWhen(unix.SYS_RT_SIGQUEUEINFO, argIs{arg: 1, test: bpf.JumpEqual, vals: runtimeFaultSignals})...)
	p = append(p, refuseWhen(unix.SYS_RT_TGSIGQUEUEINFO, argIs{arg: 2, test: bpf.JumpEqual, vals: runtimeFaultSignals})...)
	p = append(p, refuseWhen(unix.SYS_PIDFD_SEND_SIGNAL, argIs{arg: 1, test: bpf.JumpEqual, vals: runtimeFaultSignals})...)
	p = append(p, refuseWhen(unix.SYS_FCNTL,
		argIs{arg: 1, test: bpf.JumpEqual, vals: []uint32{unix.F_SETSIG}}, argIs{arg: 2, test: bpf.JumpEqual, vals: runtimeFaultSignals})...)
	// socket: only the families and protocols programs use, each of
	// which the sandbox's network, nft table and Landlock rules account
	// for. Any other is kernel surface (ALG, TIPC, RDS, SCTP), a way
	// past the namespace (packet, vsock), or a stream Landlock's TCP
	// rules do not see (MPTCP; SMC, which binds a TCP socket of its own
	// within): EAFNOSUPPORT and EPROTONOSUPPORT, as where the kernel
	// lacks them, so that programs fall back. Netlink only for routing.
	p = append(p, refuseWith(unix.EAFNOSUPPORT, unix.SYS_SOCKET, argIs{arg: 0, test: jumpNone, vals: socketFamilies})...)
	p = append(p, refuseWith(unix.EAFNOSUPPORT, unix.SYS_SOCKETPAIR, argIs{arg: 0, test: jumpNone, vals: []uint32{unix.AF_UNIX}})...)
	p = append(p, refuseWhen(unix.SYS_SOCKET,
		argIs{arg: 0, test: bpf.JumpEqual, vals: []uint32{unix.AF_NETLINK}}, argIs{arg: 2, test: bpf.JumpNotEqual, vals: []uint32{unix.NETLINK_ROUTE}})...)
	p = append(p, refuseWith(unix.EPROTONOSUPPORT, unix.SYS_SOCKET,
		argIs{arg: 0, test: bpf.JumpEqual, vals: []uint32{unix.AF_INET, unix.AF_INET6}}, argIs{arg: 2, test: jumpNone, vals: inetProtocols})...)
	// And of their types only stream, datagram and raw: protocol 0 is the
	// type's first protocol, SCTP for SOCK_SEQPACKET, DCCP for SOCK_DCCP.
	p = append(p, refuseWith(unix.EPROTONOSUPPORT, unix.SYS_SOCKET,
		argIs{arg: 0, test: bpf.JumpEqual, vals: []uint32{unix.AF_INET, unix.AF_INET6}},
		argIs{arg: 1, test: jumpNone, vals: inetTypes, mask: 0xf})...)
	p = append(p, bpf.RetConstant{Val: secRetAllow})
	return p, nil
}

// inetTypes are the socket types (the type argument's low four bits; the
// rest is SOCK_NONBLOCK and SOCK_CLOEXEC) an inet socket may be.
var inetTypes = []uint32{unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_RAW}

// errnoRet fails the syscall with e.
func errnoRet(e unix.Errno) bpf.Instruction { return bpf.RetConstant{Val: secRetErrno | uint32(e)} }

// runtimeFaultSignals are the signals the Go runtime keeps its own handler
// for even when a program ignores them all (as the init does), and takes
// for a fault of its own, crashing, unless their si_code says kill(2) or
// tkill(2) sent them: a SIGSEGV queued with SI_QUEUE, or raised with
// SI_SIGIO, would kill the init and the sandbox with it. Landlock's signal
// scope (Linux 6.12) stops any signal to the init; this stops these on
// older kernels too.
var runtimeFaultSignals = []uint32{
	uint32(unix.SIGILL), uint32(unix.SIGTRAP), uint32(unix.SIGBUS), uint32(unix.SIGFPE),
	uint32(unix.SIGSEGV), uint32(unix.SIGSTKFLT), uint32(unix.SIGSYS),
}

// socketFamilies are the socket families a sandbox may open.
var socketFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// inetProtocols are the protocols of the inet families a sandbox may open:
// the default of the type (0), TCP, UDP and the two ICMPs (ping).
var inetProtocols = []uint32{0, unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6}

// argIs holds when argument arg of a syscall (its low 32 bits, masked)
// passes test against any of vals (so JumpNotEqual wants one value); with jumpNone,
// when it equals none of vals.
type argIs struct {
	arg  int
	test bpf.JumpTest
	vals []uint32
	mask uint32 // when set, the argument is ANDed with it first
}

// jumpNone is argIs's test of an argument equal to none of its values.
const jumpNone bpf.JumpTest = 0xff

// refuseWhen fails syscall nr with EPERM when every condition holds; it
// leaves the syscall number loaded for the checks after it.
func refuseWhen(nr uint32, conds ...argIs) []bpf.Instruction {
	return refuseWith(unix.EPERM, nr, conds...)
}

// refuseWith is refuseWhen failing with e.
func refuseWith(e unix.Errno, nr uint32, conds ...argIs) []bpf.Instruction {
	n := 1 // the syscall number's test
	for _, c := range conds {
		n += 1 + len(c.vals)
		if c.mask != 0 {
			n++
		}
	}
	reload := n + 1 // after the refusal, at n
	if reload > 255 {
		panic("sandbox: a seccomp block too long for its jumps")
	}
	// Another syscall skips the block: the number is still loaded.
	p := []bpf.Instruction{bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipFalse: uint8(reload)}}
	for _, c := range conds {
		p = append(p, bpf.LoadAbsolute{Off: offArg(c.arg), Size: 4})
		if c.mask != 0 {
			p = append(p, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: c.mask})
		}
		next := len(p) + len(c.vals) // the next condition, or the refusal
		for i, v := range c.vals {
			at := len(p)
			if c.test == jumpNone {
				// One equal: the condition fails; none: the next.
				p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: v, SkipTrue: uint8(reload - at - 1)})
				continue
			}
			j := bpf.JumpIf{Cond: c.test, Val: v, SkipTrue: uint8(next - at - 1)}
			if i == len(c.vals)-1 {
				j.SkipFalse = uint8(reload - at - 1)
			}
			p = append(p, j)
		}
	}
	return append(p, errnoRet(e), bpf.LoadAbsolute{Off: offNr, Size: 4})
}

// loadSeccomp installs the filter (seccompProgram) on every thread
// (TSYNC). It needs no_new_privs first.
func loadSeccomp(full bool) error {
	prog, err := seccompProgram(full)
	if err != nil {
		return err
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return fmt.Errorf("seccomp: assemble: %w", err)
	}
	filters := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filters[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filters)), Filter: &filters[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER, TSYNC): %w", errno)
	}
	return nil
}
