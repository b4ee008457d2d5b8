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

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// Hook is the attached programs and the cookie → tgid map they fill.
type Hook struct {
	conns *ebpf.Map
	progs []*ebpf.Program
	links []link.Link
}

// maxEntries bounds the map; it is an LRU, so old connections age out and
// a lookup that misses falls back to the fd scan.
const maxEntries = 1 << 16

// Attach loads the programs and attaches them to cgroupDir (a cgroup v2
// directory: the sandbox's leaf). Every connect(2) made by a process in that
// cgroup, or below it, is recorded.
func Attach(cgroupDir string) (*Hook, error) {
	conns, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "airlock_conns",
		Type:       ebpf.LRUHash,
		KeySize:    8,  // socket cookie
		ValueSize:  16, // struct { u32 tgid; u32 pad; u64 boot_ns }
		MaxEntries: maxEntries,
	})
	if err != nil {
		return nil, fmt.Errorf("connhook: create map: %w", err)
	}
	h := &Hook{conns: conns}
	for _, at := range []ebpf.AttachType{ebpf.AttachCGroupInet4Connect, ebpf.AttachCGroupInet6Connect} {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "airlock_connect",
			Type:         ebpf.CGroupSockAddr,
			AttachType:   at,
			Instructions: record(conns),
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

// record is the program: conns[socket cookie] = {current tgid, boot time};
// then allow the connect (the hook observes, the network namespace decides).
// The time lets the proxy tell the connector from a later process that got
// its pid.
func record(conns *ebpf.Map) asm.Instructions {
	return asm.Instructions{
		// r1 is the bpf_sock_addr context.
		asm.FnGetSocketCookie.Call(),
		asm.StoreMem(asm.RFP, -8, asm.R0, asm.DWord),
		asm.FnGetCurrentPidTgid.Call(),
		asm.RSh.Imm(asm.R0, 32), // the upper half is the tgid
		asm.StoreMem(asm.RFP, -24, asm.R0, asm.DWord),
		asm.FnKtimeGetBootNs.Call(),
		asm.StoreMem(asm.RFP, -16, asm.R0, asm.DWord),
		asm.LoadMapPtr(asm.R1, conns.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -24),
		asm.Mov.Imm(asm.R4, 0), // BPF_ANY
		asm.FnMapUpdateElem.Call(),
		asm.Mov.Imm(asm.R0, 1),
		asm.Return(),
	}
}

// entry mirrors the map value.
type entry struct {
	TGID   uint32
	_      uint32
	BootNs uint64
}

// Lookup returns the tgid that connected the socket with this cookie and
// when, as time since boot.
func (h *Hook) Lookup(cookie uint64) (int, time.Duration, bool) {
	var e entry
	if err := h.conns.Lookup(cookie, &e); err != nil {
		return 0, 0, false
	}
	return int(e.TGID), time.Duration(e.BootNs), true
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
