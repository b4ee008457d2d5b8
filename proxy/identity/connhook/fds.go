package connhook

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// connectFDs is the map a program on the connect(2) syscall's entry fills:
// thread (pid_tgid) → the fd it is connecting. The cgroup hook, which runs
// inside the same syscall on the same thread but sees no descriptor, takes
// the entry and records the fd with the connection. One program and map
// serve every hook of the process, attached on first use and kept for its
// life: the tracepoint fires on every connect(2) on the host, so one, not
// one per sandbox.
var connectFDs = sync.OnceValues(func() (*ebpf.Map, error) {
	fds, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: "airlock_cfds",
		// An LRU: entries of threads outside any sandbox (which no cgroup
		// hook takes) age out.
		Type:       ebpf.LRUHash,
		KeySize:    8, // pid_tgid
		ValueSize:  8, // fd
		MaxEntries: 1 << 12,
	})
	if err != nil {
		return nil, fmt.Errorf("connhook: fd map: %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "airlock_cfd",
		Type:         ebpf.TracePoint,
		Instructions: noteFD(fds),
		License:      "Dual MIT/GPL",
	})
	if err != nil {
		fds.Close()
		return nil, fmt.Errorf("connhook: load the connect(2) fd program: %w", err)
	}
	l, err := link.Tracepoint("syscalls", "sys_enter_connect", prog, nil)
	if err != nil {
		prog.Close()
		fds.Close()
		return nil, fmt.Errorf("connhook: attach to syscalls:sys_enter_connect (tracefs mounted at /sys/kernel/tracing?): %w", err)
	}
	keep(l)
	return fds, nil
})

// sysEnterFD is the offset of the fd argument in a syscalls:sys_enter_*
// record (events/syscalls/sys_enter_connect/format): the common header,
// __syscall_nr, then the arguments as 8-byte fields.
const sysEnterFD = 16

// noteFD is the tracepoint's program: fds[current pid_tgid] = the fd.
func noteFD(fds *ebpf.Map) asm.Instructions {
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1), // the record
		asm.FnGetCurrentPidTgid.Call(),
		asm.StoreMem(asm.RFP, -8, asm.R0, asm.DWord),
		asm.LoadMem(asm.R1, asm.R6, sysEnterFD, asm.DWord),
		asm.StoreMem(asm.RFP, -16, asm.R1, asm.DWord),
	}
	insns = append(insns, mapUpdate(fds, -8, -16, bpfAny)...)
	return append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return())
}
