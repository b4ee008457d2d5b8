package connhook

import (
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// execTable is what programs on execve(2) and execveat(2)'s entry fill:
// tgid → when (time since boot) it last began to execute a program, an
// entry taken out when its process exits. A process that connects, writes
// its request and then executes a program the policy allows, keeping the
// socket, would be described as that program when the proxy decides what
// it had sent: the resolver refuses a connector that executed since it
// connected. At the syscall's entry, not sched_process_exec at its end:
// /proc/PID/exe names the new program before the exec ends, and a lookup
// that saw it must see the record too (an exec that then fails counts as
// one: refused, not let through). A hash, not an LRU: a flood of execs
// elsewhere on the host must not push a live process's record out. When
// it is full, an exec not recorded sets lost to the time, and a connector
// without a record that connected before it cannot be told from one whose
// record was lost. One table and its programs serve every hook of the
// process, as connectFDs.
type execTable struct {
	execs, lost *ebpf.Map
	progs       []*ebpf.Program
	links       []link.Link
}

var execTimes = sync.OnceValues(func() (*execTable, error) {
	t := &execTable{}
	fail := func(err error) (*execTable, error) {
		t.close()
		return nil, err
	}
	var err error
	if t.execs, err = ebpf.NewMap(&ebpf.MapSpec{
		Name:       "airlock_execs",
		Type:       ebpf.Hash,
		KeySize:    4, // tgid
		ValueSize:  8, // boot_ns
		MaxEntries: 1 << 16,
	}); err != nil {
		return fail(fmt.Errorf("connhook: exec map: %w", err))
	}
	if t.lost, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "airlock_execlost", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1,
	}); err != nil {
		return fail(fmt.Errorf("connhook: exec-lost map: %w", err))
	}
	load := func(what string, insns asm.Instructions) (*ebpf.Program, error) {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name: "airlock_exec", Type: ebpf.TracePoint, Instructions: insns, License: "Dual MIT/GPL",
		})
		if err != nil {
			return nil, fmt.Errorf("connhook: load the %s program: %w", what, err)
		}
		t.progs = append(t.progs, prog)
		return prog, nil
	}
	note, err := load("exec", noteExec(t.execs, t.lost))
	if err != nil {
		return fail(err)
	}
	forget, err := load("exit", forgetExec(t.execs))
	if err != nil {
		return fail(err)
	}
	for _, at := range []struct {
		group, name string
		prog        *ebpf.Program
	}{
		{"syscalls", "sys_enter_execve", note},
		{"syscalls", "sys_enter_execveat", note},
		{"sched", "sched_process_exit", forget},
	} {
		l, err := link.Tracepoint(at.group, at.name, at.prog, nil)
		if err != nil {
			return fail(fmt.Errorf("connhook: attach to %s:%s (tracefs mounted at /sys/kernel/tracing?): %w", at.group, at.name, err))
		}
		t.links = append(t.links, l)
	}
	return t, nil // kept for the process's life, as fdTracer
})

func (t *execTable) close() {
	for _, l := range t.links {
		l.Close()
	}
	for _, p := range t.progs {
		p.Close()
	}
	for _, m := range []*ebpf.Map{t.execs, t.lost} {
		if m != nil {
			m.Close()
		}
	}
}

// last is when tgid last began an exec; lostAfter says that an exec the
// table had no room for began after at.
func (t *execTable) last(tgid int, at time.Duration) (execAt time.Duration, ok, lostAfter bool) {
	var ns, lost uint64
	if t.execs.Lookup(uint32(tgid), &ns) == nil {
		return time.Duration(ns), true, false
	}
	if t.lost.Lookup(uint32(0), &lost) == nil && time.Duration(lost) > at {
		return 0, false, true
	}
	return 0, false, false
}

// noteExec is the exec's program: execs[current tgid] = boot time; when
// the table is full, lost[0] = that time.
func noteExec(execs, lost *ebpf.Map) asm.Instructions {
	insns := asm.Instructions{
		asm.FnGetCurrentPidTgid.Call(),
		asm.RSh.Imm(asm.R0, 32), // the upper half is the tgid
		asm.StoreMem(asm.RFP, -8, asm.R0, asm.Word),
		asm.FnKtimeGetBootNs.Call(),
		asm.StoreMem(asm.RFP, -16, asm.R0, asm.DWord),
	}
	insns = append(insns, mapUpdate(execs, -8, -16)...)
	insns = append(insns,
		asm.JEq.Imm(asm.R0, 0, "done"),
		asm.StoreImm(asm.RFP, -24, 0, asm.Word),
	)
	insns = append(insns, mapUpdate(lost, -24, -16)...)
	done := asm.Mov.Imm(asm.R0, 0).WithSymbol("done")
	return append(insns, done, asm.Return())
}

// forgetExec is the exit's program: a process's main thread exiting takes
// its entry out (its pid may be another process's next).
func forgetExec(execs *ebpf.Map) asm.Instructions {
	return asm.Instructions{
		asm.FnGetCurrentPidTgid.Call(),
		asm.Mov.Reg(asm.R1, asm.R0),
		asm.RSh.Imm(asm.R1, 32), // tgid
		asm.LSh.Imm(asm.R0, 32),
		asm.RSh.Imm(asm.R0, 32), // pid
		asm.JNE.Reg(asm.R0, asm.R1, "done"),
		asm.StoreMem(asm.RFP, -8, asm.R1, asm.Word),
		asm.LoadMapPtr(asm.R1, execs.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapDeleteElem.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("done"),
		asm.Return(),
	}
}
