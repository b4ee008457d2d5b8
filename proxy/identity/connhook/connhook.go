// Package connhook records which process opened each TCP connection of a
// sandbox, at connect(2) time, with cgroup BPF programs (connect4 and
// connect6) attached to the sandbox's cgroup v2 directory. The proxy then
// finds a connection's owner by its socket cookie, which sock_diag reports,
// in O(1) instead of scanning every process's file descriptors.
package connhook

import (
	"errors"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/proxy/identity"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// Hook is the attached programs and the cookie → connector map they fill.
type Hook struct {
	conns *ebpf.Map
	progs []*ebpf.Program
	links []link.Link
	// FDs is nil when the hook records the descriptor each connection was
	// made on, else why it does not (no tracefs, no syscall tracepoints):
	// a lookup then checks that the connector still holds the socket by
	// reading its whole fd table instead of one entry.
	FDs error
	// execs is when each process began and ended executing programs
	// (execTimes); Execs is nil when it is known, else why not: a
	// connector that executed another program since it connected is then
	// described as that one.
	execs *execTable
	Execs error
	// GroupDead is nil when the exec table sees a process's last thread
	// exit, else why not (an older kernel's sched_process_exit has no
	// group_dead): a record then goes when the process's main thread
	// exits with no exec running, and one that outlives its process is
	// left for the resolver to tell from a later process of that pid.
	GroupDead error
}

// MaxEntries bounds the map; it is an LRU, so old connections age out, and
// a lookup that misses is refused (identity_unknown): a miss is a record
// pushed out, and the fd scan would name whoever holds the socket now.
const MaxEntries = identity.HookEntries

// Attach loads the programs and attaches them to cgroupDir (a cgroup v2
// directory: the sandbox's leaf). Every connect(2) made by a process in that
// cgroup, or below it, is recorded.
func Attach(cgroupDir string) (*Hook, error) {
	conns, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "airlock_conns",
		Type:       ebpf.LRUHash,
		KeySize:    8,  // socket cookie
		ValueSize:  16, // struct { u32 tgid; u32 fd + 1, or 0; u64 boot_ns }
		MaxEntries: MaxEntries,
	})
	if err != nil {
		return nil, fmt.Errorf("connhook: create map: %w", err)
	}
	fds, fdErr := connectFDs()
	execs, execErr := execTimes()
	h := &Hook{conns: conns, FDs: fdErr, execs: execs, Execs: execErr}
	if execs != nil {
		h.GroupDead = execs.groupDead
	}
	for _, at := range []ebpf.AttachType{ebpf.AttachCGroupInet4Connect, ebpf.AttachCGroupInet6Connect} {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "airlock_connect",
			Type:         ebpf.CGroupSockAddr,
			AttachType:   at,
			Instructions: record(conns, fds),
			License:      "Dual MIT/GPL",
		})
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("connhook: load program: %w", err)
		}
		h.progs = append(h.progs, prog)
		l, err := link.AttachCgroup(link.CgroupOptions{Path: cgroupDir, Attach: at, Program: prog})
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("connhook: attach to %s: %w", cgroupDir, err)
		}
		h.links = append(h.links, l)
	}
	return h, nil
}

// record is the program: conns[socket cookie] = {current tgid, the fd the
// thread passed to connect(2) (fds, filled at the syscall's entry; 0 when
// not known), boot time}; then allow the connect (the hook observes, the
// network namespace decides). The time lets the proxy tell the connector
// from a later process that got its pid; the fd lets it check that the
// connector still holds the socket with one readlink.
func record(conns, fds *ebpf.Map) asm.Instructions {
	insns := asm.Instructions{
		// r1 is the bpf_sock_addr context.
		asm.FnGetSocketCookie.Call(),
		asm.StoreMem(asm.RFP, -8, asm.R0, asm.DWord),
		asm.FnGetCurrentPidTgid.Call(),
		asm.StoreMem(asm.RFP, -32, asm.R0, asm.DWord), // fds' key: the thread
		asm.RSh.Imm(asm.R0, 32),                       // the upper half is the tgid
		asm.StoreMem(asm.RFP, -24, asm.R0, asm.Word),
		asm.StoreImm(asm.RFP, -20, 0, asm.Word),
		asm.FnKtimeGetBootNs.Call(),
		asm.StoreMem(asm.RFP, -16, asm.R0, asm.DWord),
	}
	if fds != nil {
		insns = append(insns, mapLookup(fds, -32)...)
		insns = append(insns,
			asm.JEq.Imm(asm.R0, 0, "update"),
			asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
			asm.Add.Imm(asm.R1, 1),
			asm.StoreMem(asm.RFP, -20, asm.R1, asm.Word),
		)
		// Taken: a later connect on this thread that the tracepoint does
		// not see (io_uring) must not inherit it.
		insns = append(insns, mapDelete(fds, -32)...)
	}
	update := append(mapUpdate(conns, -8, -24, bpfAny), asm.Mov.Imm(asm.R0, 1), asm.Return())
	update[0] = update[0].WithSymbol("update")
	return append(insns, update...)
}

// The flags of bpf_map_update_elem.
const (
	bpfAny     = 0 // whatever was there
	bpfNoExist = 1 // only where nothing was
)

// mapUpdate is m[*(fp+key)] = *(fp+value); r0 is 0 when it was done.
func mapUpdate(m *ebpf.Map, key, value, flags int32) asm.Instructions {
	return asm.Instructions{
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, key),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, value),
		asm.Mov.Imm(asm.R4, flags),
		asm.FnMapUpdateElem.Call(),
	}
}

// mapLookup is r0 = &m[*(fp+key)], or 0 when there is none.
func mapLookup(m *ebpf.Map, key int32) asm.Instructions {
	return mapByKey(asm.FnMapLookupElem, m, key)
}

// mapDelete is delete(m, *(fp+key)); r0 is 0 when there was one.
func mapDelete(m *ebpf.Map, key int32) asm.Instructions {
	return mapByKey(asm.FnMapDeleteElem, m, key)
}

// mapByKey calls fn(m, fp+key).
func mapByKey(fn asm.BuiltinFunc, m *ebpf.Map, key int32) asm.Instructions {
	return asm.Instructions{
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, key),
		fn.Call(),
	}
}

// entry mirrors the map value.
type entry struct {
	TGID   uint32
	FD1    uint32 // the fd + 1; 0: not known
	BootNs uint64
}

// Lookup returns the tgid that connected the socket with this cookie, the
// descriptor it connected it on (-1 when not known) and when, as time since
// boot.
func (h *Hook) Lookup(cookie uint64) (tgid, fd int, at time.Duration, ok bool) {
	var e entry
	if err := h.conns.Lookup(cookie, &e); err != nil {
		return 0, -1, 0, false
	}
	return int(e.TGID), int(e.FD1) - 1, time.Duration(e.BootNs), true
}

// ExecsOf is what the hook knows of the programs process tgid executed
// (nothing when Execs is not nil).
func (h *Hook) ExecsOf(tgid int) identity.Execs {
	if h.execs == nil {
		return identity.Execs{}
	}
	return h.execs.of(tgid)
}

// Blind says the hook has recorded no connect at all: a kernel that does
// not match sockets to cgroup v2 (before 5.14, with cgroup v1's net_cls or
// net_prio in use) never runs its programs. A hook that sees connects
// always holds the latest, the one being looked up among them.
func (h *Hook) Blind() bool {
	var k uint64
	return errors.Is(h.conns.NextKey(nil, &k), ebpf.ErrKeyNotExist)
}

// Close detaches the programs and frees the map.
func (h *Hook) Close() error {
	var errs []error
	for _, l := range h.links {
		errs = append(errs, l.Close())
	}
	for _, p := range h.progs {
		errs = append(errs, p.Close())
	}
	errs = append(errs, h.conns.Close())
	return errors.Join(errs...)
}
