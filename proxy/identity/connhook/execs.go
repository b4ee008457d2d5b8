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
	"golang.org/x/sys/unix"
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
// one: refused, not let through). Ended at sched_process_exec, once the
// process's other threads are gone, and at the syscall's exit, which a
// failed exec (ENOENT) passes too, so that one is not running for good;
// the exit alone would miss a 64-bit exec of a 32-bit program, whose
// return the syscall tracepoints skip as a compat syscall's. Running is a
// count, not a begin later than the end: a sibling's exec that fails at
// once ends while a slow one runs on. Each end takes back only its own
// thread's begin (inexec, by task, which an exec from a thread other than
// the main one keeps while it takes the main thread's pid): an exit with
// no entry (an execve the thread's own seccomp filter refuses runs no
// entry tracepoint, but its exit one) must not end a sibling's exec, and a
// thread that dies inside an exec it cannot return from (a 32-bit program
// that fails to load) ends its exec as it exits.
//
// The entry goes when the process's last thread exits (sched_process_exit's
// group_dead), not its main thread: an exec from another thread kills the
// main thread and takes its pid. Where the event has no group_dead, no
// exit is known to be the last, and the entry goes when a sweep finds no
// process of its pid (sweepDead): taken out at the main thread's exit, a
// sibling's exec begun on the record just before would end on none, and an
// end on none is a lost exec's, which refuses every connector without a
// record. Meanwhile the record is a later process's of that pid only until
// that one executes a program, and the resolver ignores an exec begun
// before the process it describes started.
//
// A hash, not an LRU: a flood of execs elsewhere on the host must not push
// a live process's record out. When it is full, an exec not recorded sets
// lost to the time (at its entry and at its end, which inexec tells it
// of: an end with no entry seen is a process's to make at will), and a
// connector without a record that connected before it cannot be told from
// one whose record was lost. An exec that finds inexec full is counted
// with no way to take it back: its process is running one until it
// exits. One table and its programs serve every hook of the process, as
// connectFDs.
type execTable struct {
	execs, inexec, lost *ebpf.Map
	progs               []*ebpf.Program
	links               []link.Link
	// groupDead is nil when the exit program sees a process's last thread
	// exit, else why not.
	groupDead error
	// stop ends the sweep (sweepDead), which closes swept as it returns;
	// both nil when the exit program takes every record out itself.
	stop, swept chan struct{}
}

// execRecord mirrors the table's value.
type execRecord struct {
	Began, Ended uint64 // boot_ns
	Running      uint64 // threads inside an exec; a count that went below 0 counts as running
}

// execTimes is the process's table, kept for its life, as connectFDs'.
var execTimes = sync.OnceValues(func() (*execTable, error) {
	off, missing := groupDeadOffset() // -1 without: the main thread's rule
	t, err := newExecTable(off)
	if t != nil {
		t.groupDead = missing
		keep(t.links...)
	}
	return t, err
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
	if t.inexec, err = ebpf.NewMap(&ebpf.MapSpec{
		Name:       "airlock_inexec",
		Type:       ebpf.Hash,
		KeySize:    8, // the task_struct's address
		ValueSize:  4, // its tgid
		MaxEntries: 1 << 16,
	}); err != nil {
		return fail(fmt.Errorf("connhook: in-exec map: %w", err))
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
	begin, err := load("exec", beginExec(t.execs, t.inexec, t.lost))
	if err != nil {
		return fail(err)
	}
	end, err := load("exec's return", endExec(t.execs, t.inexec, t.lost))
	if err != nil {
		return fail(err)
	}
	forget, err := load("exit", forgetExec(t.execs, t.inexec, groupDead))
	if err != nil {
		return fail(err)
	}
	for _, at := range []struct {
		group, name string
		prog        *ebpf.Program
	}{
		// Ends first: an exec whose begin is seen must have its end seen.
		{"sched", "sched_process_exit", forget},
		{"sched", "sched_process_exec", end},
		{"syscalls", "sys_exit_execve", end},
		{"syscalls", "sys_exit_execveat", end},
		{"syscalls", "sys_enter_execve", begin},
		{"syscalls", "sys_enter_execveat", begin},
	} {
		l, err := link.Tracepoint(at.group, at.name, at.prog, nil)
		if err != nil {
			return fail(fmt.Errorf("connhook: attach to %s:%s (tracefs mounted at /sys/kernel/tracing?): %w", at.group, at.name, err))
		}
		t.links = append(t.links, l)
	}
	if groupDead < 0 {
		t.stop, t.swept = make(chan struct{}), make(chan struct{})
		go t.sweepDead()
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
	if t.stop != nil {
		// Done before the maps close: their descriptors' numbers may be
		// another file's next.
		close(t.stop)
		<-t.swept
	}
	for _, l := range t.links {
		l.Close()
	}
	for _, p := range t.progs {
		p.Close()
	}
	for _, m := range []*ebpf.Map{t.execs, t.inexec, t.lost} {
		if m != nil {
			m.Close()
		}
	}
}

// of is what the table knows of tgid's execs, a record read twice: a
// lookup copies it with no order among its fields, so one may see an
// exec's Running taken back and an Ended from before it; a second, a
// system call later, is past that reordering, and the answer refuses what
// either read refuses. No record at the first read is none to reorder (an
// exec that begins after it began after the lookup): the lost time is
// read instead.
func (t *execTable) of(tgid int) identity.Execs {
	var e identity.Execs
	for range 2 {
		var r execRecord
		if t.execs.Lookup(uint32(tgid), &r) != nil {
			break
		}
		e.Recorded = true
		e.Began = max(e.Began, time.Duration(r.Began))
		e.Ended = max(e.Ended, time.Duration(r.Ended))
		e.Running = e.Running || r.Running != 0
	}
	if !e.Recorded {
		var lost uint64
		t.lost.Lookup(uint32(0), &lost)
		e.Lost = time.Duration(lost)
	}
	return e
}

// sweepInterval is how often sweepDead looks: a host whose processes leave
// records behind fills the table no faster than it makes processes.
const sweepInterval = time.Second

// sweepDead sweeps the table (sweep) until stop is closed: without
// group_dead it is what takes a dead process's record out, and without it
// the table would fill, and with it full an exec not recorded refuses
// every connector without a record.
func (t *execTable) sweepDead() {
	defer close(t.swept)
	tick := time.NewTicker(sweepInterval)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
			t.sweep()
		}
	}
}

// sweep takes out the records of pids no process has. One of a live
// process taken out would forget its execs, and its pid may be handed
// out between the look and the delete: the kernel hands pids out in turn
// after ns_last_pid, so a pid more than half the pid space ahead of it is
// handed out only once the cursor has moved that far, which is checked
// once the delete is done. When it has (or the cursor cannot be read, or
// the look took long enough for it to wrap unseen), and a process has
// that pid now, it may have begun an exec before the delete: lost is set,
// as for an exec the table had no room for.
func (t *execTable) sweep() {
	pidMax, err := readInt("/proc/sys/kernel/pid_max")
	if err != nil {
		return
	}
	var tgids []uint32
	var key uint32
	var r execRecord
	for it := t.execs.Iterate(); it.Next(&key, &r); {
		tgids = append(tgids, key)
	}
	ahead := func(from, to int) int { return ((to-from)%pidMax + pidMax) % pidMax }
	for _, tgid := range tgids {
		pid := int(tgid)
		if !gone(pid) {
			continue
		}
		began := time.Now()
		last, err := readInt("/proc/sys/kernel/ns_last_pid")
		// The cursor's own pid was handed out last: the next is after it.
		if a := ahead(last, pid); err == nil && a > 0 && a <= pidMax/2 {
			continue
		}
		// Looked at again: the cursor rules out only what came after it.
		if !gone(pid) || t.execs.Delete(tgid) != nil {
			continue
		}
		now, errNow := readInt("/proc/sys/kernel/ns_last_pid")
		unsure := err != nil || errNow != nil || ahead(last, now) >= ahead(last, pid) || time.Since(began) > 100*time.Millisecond
		if unsure && !gone(pid) {
			t.noteLost()
		}
	}
}

// gone says no process or thread has pid.
func gone(pid int) bool { return unix.Kill(pid, 0) == unix.ESRCH }

// noteLost is lost[0] = now, unless it is later already.
func (t *execTable) noteLost() {
	var lost uint64
	t.lost.Lookup(uint32(0), &lost)
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	t.lost.Update(uint32(0), max(lost, uint64(ts.Nano())), ebpf.UpdateAny)
}

// readInt reads a number from a file of /proc/sys.
func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// The programs' stack: the tgid (the table's key, and inexec's value for
// an exec counted in Running) at -8, the current task (inexec's key) at
// -16, a new record at -40, the lost array's key at -48 and its value at
// -56, and inexec's value for an exec counted in none (0) at -64.
const (
	stackTGID      = -8
	stackTask      = -16
	stackRecord    = -40
	stackLostK     = -48
	stackLostV     = -56
	stackUncounted = -64
)

// beginExec is the program at an exec's entry: execs[current tgid].Began
// = boot time, inexec[current task] = tgid and Running + 1, the record
// made when there is none; when the table is full, lost[0] = that time
// and inexec[current task] = 0, so that its end notes it lost too (a
// connect made while it ran) while an end with no begin, which a process
// can make at will (an execve its own seccomp filter refuses), notes
// nothing. With no room in inexec either, only the begin notes it.
func beginExec(execs, inexec, lost *ebpf.Map) asm.Instructions {
	insns := currentExec()
	insns = append(insns, mapLookup(execs, stackTGID)...)
	insns = append(insns,
		asm.JNE.Imm(asm.R0, 0, "begin"),
		asm.StoreMem(asm.RFP, stackRecord, asm.R6, asm.DWord),
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.RFP, stackRecord+8, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, stackRecord+16, asm.R1, asm.DWord),
	)
	insns = append(insns, mapUpdate(execs, stackTGID, stackRecord, bpfNoExist)...)
	// Made now, or meanwhile by another thread of the process; or no room.
	insns = append(insns, mapLookup(execs, stackTGID)...)
	insns = append(insns, asm.JNE.Imm(asm.R0, 0, "begin"))
	insns = append(insns, noteLost(lost)...)
	insns = append(insns, asm.StoreImm(asm.RFP, stackUncounted, 0, asm.Word))
	insns = append(insns, mapUpdate(inexec, stackTask, stackUncounted, bpfAny)...)
	insns = append(insns,
		asm.Ja.Label("done"),
		asm.Mov.Reg(asm.R7, asm.R0).WithSymbol("begin"),
		asm.StoreMem(asm.R7, 0, asm.R6, asm.DWord),
	)
	// Counted whether or not inexec has room: one it has none for is never
	// taken back, and its process is refused until it exits.
	insns = append(insns, mapUpdate(inexec, stackTask, stackTGID, bpfAny)...)
	return append(insns,
		asm.Mov.Imm(asm.R1, 1),
		asm.FetchAdd.Mem(asm.R7, asm.R1, asm.DWord, 16),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("done"),
		asm.Return(),
	)
}

// endExec is the program at an exec's end (sched_process_exec) and its
// return, done or failed: execs[current tgid].Ended = boot time, then,
// when the current task's inexec entry was there to take out and its
// begin counted it, Running - 1 (in that order, and fully ordered: a
// record read between the two says the exec ran past the connect, not
// that it never did). An exec whose begin was seen and that has no record
// now (no room at the entry) sets lost[0] = that time. An end without its
// begin (an execve refused before the entry tracepoint, one under way
// when the programs were attached, the return after sched_process_exec,
// or a helper the kernel runs, such as core_pattern's) leaves Running,
// and lost: a process could move it at will.
func endExec(execs, inexec, lost *ebpf.Map) asm.Instructions {
	insns := takeInExec(execs, inexec)
	insns = append(insns,
		asm.JEq.Imm(asm.R0, 0, "lost"),
		asm.StoreMem(asm.R0, 8, asm.R6, asm.DWord),
		asm.JSLE.Imm(asm.R8, 0, "done"),
		asm.Mov.Imm(asm.R1, -1),
		asm.FetchAdd.Mem(asm.R0, asm.R1, asm.DWord, 16),
		asm.Ja.Label("done"),
		asm.JEq.Imm(asm.R8, -1, "done").WithSymbol("lost"),
	)
	insns = append(insns, noteLost(lost)...)
	return append(insns, asm.Mov.Imm(asm.R0, 0).WithSymbol("done"), asm.Return())
}

// forgetExec is the exit's program. A thread that exits inside an exec its
// begin counted (one that failed past the point of no return, which the
// syscall's exit tracepoint may not see) ends it as endExec does. Then
// the process's last thread exiting takes its entry out (its pid may be
// another process's next). Without group_dead (groupDead < 0) none is
// known to be the last: the sweep takes the entry out.
func forgetExec(execs, inexec *ebpf.Map, groupDead int) asm.Instructions {
	var insns asm.Instructions
	if groupDead >= 0 {
		// r1 is the record.
		insns = append(insns, asm.LoadMem(asm.R9, asm.R1, int16(groupDead), asm.Byte))
	}
	insns = append(insns, takeInExec(execs, inexec)...)
	insns = append(insns,
		asm.JSLE.Imm(asm.R8, 0, "exited"),
		asm.JEq.Imm(asm.R0, 0, "exited"),
		asm.StoreMem(asm.R0, 8, asm.R6, asm.DWord),
		asm.Mov.Imm(asm.R1, -1),
		asm.FetchAdd.Mem(asm.R0, asm.R1, asm.DWord, 16),
	)
	if groupDead < 0 {
		return append(insns, asm.Mov.Imm(asm.R0, 0).WithSymbol("exited"), asm.Return())
	}
	insns = append(insns, asm.JEq.Imm(asm.R9, 0, "done").WithSymbol("exited"))
	insns = append(insns, mapDelete(execs, stackTGID)...)
	return append(insns, asm.Mov.Imm(asm.R0, 0).WithSymbol("done"), asm.Return())
}

// takeInExec is currentExec, then takes the current task's inexec entry
// out, leaving in r8 its value (the tgid: counted in Running; 0: not) or
// -1 when there was none, and in r0 the tgid's record, or 0.
func takeInExec(execs, inexec *ebpf.Map) asm.Instructions {
	insns := currentExec()
	insns = append(insns, mapLookup(inexec, stackTask)...)
	insns = append(insns,
		asm.Mov.Imm(asm.R8, -1),
		asm.JEq.Imm(asm.R0, 0, "taken"),
		asm.LoadMem(asm.R8, asm.R0, 0, asm.Word),
	)
	insns = append(insns, mapDelete(inexec, stackTask)...)
	lookup := mapLookup(execs, stackTGID)
	lookup[0] = lookup[0].WithSymbol("taken")
	return append(insns, lookup...)
}

// currentExec stores the current tgid at stackTGID and task at stackTask,
// and leaves the boot time in r6.
func currentExec() asm.Instructions {
	return asm.Instructions{
		asm.FnGetCurrentPidTgid.Call(),
		asm.RSh.Imm(asm.R0, 32), // the upper half is the tgid
		asm.StoreMem(asm.RFP, stackTGID, asm.R0, asm.Word),
		asm.FnGetCurrentTask.Call(),
		asm.StoreMem(asm.RFP, stackTask, asm.R0, asm.DWord),
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
