package connhook

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/proxy/identity"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// execTable is what programs on execve(2) and execveat(2) fill: tgid →
// when its latest exec began, when its latest one returned and how many of
// its threads are inside one, an entry taken out when its process exits.
// A process that connects, writes its request and then executes a program
// the policy allows, keeping the socket, would be described as that
// program when the proxy decides what it had sent; so would one whose
// thread connects and writes while another thread's exec runs, for the
// exec kills that thread and leaves its socket to the new program. The
// resolver refuses a connector that began an exec after it connected,
// whose exec returned after it, or that is inside one.
//
// Begun at the syscall's entry, not sched_process_exec at its end:
// /proc/PID/exe names the new program before the exec ends, and a lookup
// that saw it must see the record too (an exec that then fails counts as
// one: refused, not let through). Ended at the syscall's exit, which a
// failed exec (ENOENT) passes too, so that one is not running for good.
// Running is a count, not a begin later than the end: a sibling's exec
// that fails at once ends while a slow one runs on.
//
// The entry goes when the process's last thread exits (sched_process_exit's
// group_dead), not its main thread: an exec from another thread kills the
// main thread and takes its pid. Where the event has no group_dead, it goes
// when the main thread exits with no exec running (one is when an exec
// kills it). A main thread that exits before the others leaves
// /proc/PID/exe unreadable, so the resolver describes none of them until
// one executes a program, which is recorded anew.
//
// A hash, not an LRU: a flood of execs elsewhere on the host must not push
// a live process's record out. When it is full, an exec not recorded sets
// lost to the time (at its entry and at its return), and a connector
// without a record that connected before it cannot be told from one whose
// record was lost. One table and its programs serve every hook of the
// process, as connectFDs.
type execTable struct {
	execs, lost *ebpf.Map
	progs       []*ebpf.Program
	links       []link.Link
}

// execRecord mirrors the table's value.
type execRecord struct {
	Began, Ended uint64 // boot_ns
	Running      uint64 // threads inside an exec; a count that went below 0 counts as running
}

// execTimes is the process's table, kept for its life, as fdTracer.
var execTimes = sync.OnceValues(func() (*execTable, error) {
	off, _ := groupDeadOffset() // -1 without: the main thread's rule
	return newExecTable(off)
})

// newExecTable attaches the programs; groupDead is where the
// sched_process_exit record carries group_dead (-1: it does not).
func newExecTable(groupDead int) (*execTable, error) {
	t := &execTable{}
	fail := func(err error) (*execTable, error) {
		t.close()
		return nil, err
	}
	var err error
	if t.execs, err = ebpf.NewMap(&ebpf.MapSpec{
		Name:       "airlock_execs",
		Type:       ebpf.Hash,
		KeySize:    4,  // tgid
		ValueSize:  24, // execRecord
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
	begin, err := load("exec", beginExec(t.execs, t.lost))
	if err != nil {
		return fail(err)
	}
	end, err := load("exec's return", endExec(t.execs, t.lost))
	if err != nil {
		return fail(err)
	}
	forget, err := load("exit", forgetExec(t.execs, groupDead))
	if err != nil {
		return fail(err)
	}
	for _, at := range []struct {
		group, name string
		prog        *ebpf.Program
	}{
		{"syscalls", "sys_enter_execve", begin},
		{"syscalls", "sys_enter_execveat", begin},
		{"syscalls", "sys_exit_execve", end},
		{"syscalls", "sys_exit_execveat", end},
		{"sched", "sched_process_exit", forget},
	} {
		l, err := link.Tracepoint(at.group, at.name, at.prog, nil)
		if err != nil {
			return fail(fmt.Errorf("connhook: attach to %s:%s (tracefs mounted at /sys/kernel/tracing?): %w", at.group, at.name, err))
		}
		t.links = append(t.links, l)
	}
	return t, nil
}

// groupDeadOffset is where the sched_process_exit record carries
// group_dead, read from the event's format (the field is recent); -1 and
// why when it has none, or the format cannot be read.
func groupDeadOffset() (int, error) {
	var errs []error
	for _, tracefs := range []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"} {
		format, err := os.ReadFile(tracefs + "/events/sched/sched_process_exit/format")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return fieldOffset(string(format), "bool group_dead")
	}
	return -1, errors.Join(errs...)
}

// fieldOffset is the offset of the one-byte field ("type name") in an
// event's format.
func fieldOffset(format, field string) (int, error) {
	for line := range strings.Lines(format) {
		_, rest, ok := strings.Cut(line, "field:"+field+";")
		if !ok {
			continue
		}
		_, off, _ := strings.Cut(rest, "offset:")
		off, _, _ = strings.Cut(off, ";")
		_, size, _ := strings.Cut(rest, "size:")
		size, _, _ = strings.Cut(size, ";")
		n, err := strconv.Atoi(off)
		if err != nil || size != "1" {
			return -1, fmt.Errorf("%s: offset %q, size %q, want one byte", field, off, size)
		}
		return n, nil
	}
	return -1, fmt.Errorf("no field %s", field)
}

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

// of is what the table knows of tgid's execs: one lookup, and a second
// for a process without a record.
func (t *execTable) of(tgid int) identity.Execs {
	var r execRecord
	if t.execs.Lookup(uint32(tgid), &r) == nil {
		return identity.Execs{Recorded: true, Began: time.Duration(r.Began), Ended: time.Duration(r.Ended), Running: r.Running != 0}
	}
	var lost uint64
	t.lost.Lookup(uint32(0), &lost)
	return identity.Execs{Lost: time.Duration(lost)}
}

// The programs' stack: the tgid (the table's key) at -8, a new record at
// -32, the lost array's key at -40 and its value at -48.
const (
	stackTGID   = -8
	stackRecord = -32
	stackLostK  = -40
	stackLostV  = -48
)

// beginExec is the program at an exec's entry: execs[current tgid].Began
// = boot time and Running + 1, the record made when there is none; when
// the table is full, lost[0] = that time.
func beginExec(execs, lost *ebpf.Map) asm.Instructions {
	insns := currentTGIDAndTime()
	insns = append(insns, mapLookup(execs, stackTGID)...)
	insns = append(insns,
		asm.JNE.Imm(asm.R0, 0, "begin"),
		asm.StoreMem(asm.RFP, stackRecord, asm.R6, asm.DWord),
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.RFP, stackRecord+8, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreMem(asm.RFP, stackRecord+16, asm.R1, asm.DWord),
	)
	insns = append(insns, mapUpdate(execs, stackTGID, stackRecord, bpfNoExist)...)
	insns = append(insns, asm.JEq.Imm(asm.R0, 0, "done"))
	// Made meanwhile by another thread of the process, or no room.
	insns = append(insns, mapLookup(execs, stackTGID)...)
	insns = append(insns, asm.JNE.Imm(asm.R0, 0, "begin"))
	insns = append(insns, noteLost(lost)...)
	return append(insns,
		asm.Ja.Label("done"),
		asm.StoreMem(asm.R0, 0, asm.R6, asm.DWord).WithSymbol("begin"),
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 16),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("done"),
		asm.Return(),
	)
}

// endExec is the program at an exec's return, done or failed:
// execs[current tgid].Ended = boot time, then Running - 1 (in that order:
// a record read between the two says the exec ran past the connect, not
// that it never did); without a record (no room at the entry), lost[0] =
// that time. A return whose entry the programs missed (under way when
// they were attached) finds Running at 0 and leaves it.
func endExec(execs, lost *ebpf.Map) asm.Instructions {
	insns := currentTGIDAndTime()
	insns = append(insns, mapLookup(execs, stackTGID)...)
	insns = append(insns,
		asm.JEq.Imm(asm.R0, 0, "lost"),
		asm.StoreMem(asm.R0, 8, asm.R6, asm.DWord),
		asm.LoadMem(asm.R1, asm.R0, 16, asm.DWord),
		asm.JEq.Imm(asm.R1, 0, "done"),
		asm.Mov.Imm(asm.R1, -1),
		asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 16),
		asm.Ja.Label("done"),
	)
	lostInsns := noteLost(lost)
	lostInsns[0] = lostInsns[0].WithSymbol("lost")
	insns = append(insns, lostInsns...)
	return append(insns, asm.Mov.Imm(asm.R0, 0).WithSymbol("done"), asm.Return())
}

// forgetExec is the exit's program: the process's last thread exiting
// takes its entry out (its pid may be another process's next). Without
// group_dead (groupDead < 0), its main thread exiting with no exec running
// does.
func forgetExec(execs *ebpf.Map, groupDead int) asm.Instructions {
	var insns asm.Instructions
	if groupDead >= 0 {
		insns = asm.Instructions{
			// r1 is the record.
			asm.LoadMem(asm.R1, asm.R1, int16(groupDead), asm.Byte),
			asm.JEq.Imm(asm.R1, 0, "done"),
			asm.FnGetCurrentPidTgid.Call(),
			asm.RSh.Imm(asm.R0, 32), // the upper half is the tgid
			asm.StoreMem(asm.RFP, stackTGID, asm.R0, asm.Word),
		}
	} else {
		insns = asm.Instructions{
			asm.FnGetCurrentPidTgid.Call(),
			asm.Mov.Reg(asm.R1, asm.R0),
			asm.RSh.Imm(asm.R1, 32), // tgid
			asm.LSh.Imm(asm.R0, 32),
			asm.RSh.Imm(asm.R0, 32), // pid
			asm.JNE.Reg(asm.R0, asm.R1, "done"),
			asm.StoreMem(asm.RFP, stackTGID, asm.R1, asm.Word),
		}
		insns = append(insns, mapLookup(execs, stackTGID)...)
		insns = append(insns,
			asm.JEq.Imm(asm.R0, 0, "done"),
			// Running: another thread's exec is what kills this one.
			asm.LoadMem(asm.R1, asm.R0, 16, asm.DWord),
			asm.JNE.Imm(asm.R1, 0, "done"),
		)
	}
	insns = append(insns,
		asm.LoadMapPtr(asm.R1, execs.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stackTGID),
		asm.FnMapDeleteElem.Call(),
	)
	return append(insns, asm.Mov.Imm(asm.R0, 0).WithSymbol("done"), asm.Return())
}

// currentTGIDAndTime stores the current tgid at stackTGID and leaves the
// boot time in r6.
func currentTGIDAndTime() asm.Instructions {
	return asm.Instructions{
		asm.FnGetCurrentPidTgid.Call(),
		asm.RSh.Imm(asm.R0, 32), // the upper half is the tgid
		asm.StoreMem(asm.RFP, stackTGID, asm.R0, asm.Word),
		asm.FnKtimeGetBootNs.Call(),
		asm.Mov.Reg(asm.R6, asm.R0),
	}
}

// noteLost is lost[0] = r6.
func noteLost(lost *ebpf.Map) asm.Instructions {
	insns := asm.Instructions{
		asm.StoreImm(asm.RFP, stackLostK, 0, asm.Word),
		asm.StoreMem(asm.RFP, stackLostV, asm.R6, asm.DWord),
	}
	return append(insns, mapUpdate(lost, stackLostK, stackLostV, bpfAny)...)
}
