package watchdogs

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Gateway fault kinds, as the inbox lines name them.
const (
	// KindGatewayHeapOOM: V8 ran out of heap ("JavaScript heap out of
	// memory"); restarted with a larger --max-old-space-size.
	KindGatewayHeapOOM = "gateway_heap_oom"
	// KindGatewayOOMKill: the kernel's OOM killer killed it at its
	// cgroup's limit; restarted with a larger limit.
	KindGatewayOOMKill = "gateway_oom_kill"
	// KindGatewayCrash: it is gone, with no sign of either; restarted as
	// it was.
	KindGatewayCrash = "gateway_crash"
	// KindGatewayHung: it runs but does not answer its health URL.
	KindGatewayHung = "gateway_hung"
)

// Evidence is what a gateway's target says about it since the last look.
type Evidence struct {
	// Running: an instance runs now. Known is false when nothing can
	// tell (no pid file): the health URL decides alone then.
	Running, Known bool
	// Exited: an instance has exited since the last look (it may run
	// again: its supervisor restarts it).
	Exited bool
	// Exit says what is known of the last exit ("exit code 134").
	Exit string
	// HeapOOM is a V8 heap-exhaustion line the gateway wrote since the
	// last look, "" when none.
	HeapOOM string
	// LogNotRead says why the log was not read, when the rules it is
	// read by refuse it (a link, not a regular file, several names, one
	// its writer could not read): there is no heap evidence then, but the
	// rest is.
	LogNotRead string
	// OOMKills is how many processes the OOM killer has killed in the
	// gateway's cgroup since the last look.
	OOMKills int64
	// HeapMB is the heap the gateway runs with (--max-old-space-size),
	// 0 when not known; MemoryMax its memory limit, 0 when none.
	HeapMB    int
	MemoryMax int64
	// Healthy: its supervisor finds it healthy (a pod's own health
	// check); always true for a target with no supervisor of its own.
	Healthy bool
}

// Change is how a recovery restarts the gateway: with a larger heap or
// memory limit, or (zero) as it was.
type Change struct {
	HeapMB    int
	MemoryMax int64
}

// Target is where the gateway runs: an airlock pod (PodTarget) or a plain
// process (ProcessTarget).
type Target interface {
	// Look gathers the evidence since the last look; m is the target's
	// memory of it, advanced.
	Look(ctx context.Context, m *TargetMemory) (Evidence, error)
	// Restart replaces the gateway (killing an instance that still runs)
	// with the change, and waits until the old instance is gone.
	Restart(ctx context.Context, c Change, m *TargetMemory) error
}

// TargetMemory is what a target remembers between looks, in the state
// file: where it has read its log up to, the OOM kills and exits it has
// seen, and the heap it last gave the gateway.
type TargetMemory struct {
	Seen      bool      `json:"seen"` // a look has set the baselines below
	LogInode  uint64    `json:"log_inode,omitempty"`
	LogOffset int64     `json:"log_offset,omitempty"`
	OOMKills  int64     `json:"oom_kills,omitempty"`
	PodBooted time.Time `json:"pod_booted,omitzero"`
	Exits     int       `json:"exits,omitempty"`
	HeapMB    int       `json:"heap_mb,omitempty"`
	// Pid is the gateway's pid at the last look (ProcessTarget with a pid
	// file): another one since says it exited. 0 after the watchdog's own
	// restart.
	Pid int `json:"pid,omitempty"`
	// PidFile is the pid file as last believed: a pid taken by another
	// process since is told from the gateway's (see track).
	PidFile pidRecord `json:"pid_file,omitzero"`
	// HeapLine is V8's heap line the last look read while the gateway
	// still ran (it may have been dying, or it printed the words): the
	// next look believes it if the gateway has ended by then, else
	// forgets it.
	HeapLine string `json:"heap_line,omitempty"`
}

// Steps bounds how a limit grows: each recovery doubles it (from Start
// when the current one is not known) up to Max.
type Steps struct{ Start, Max int64 }

// next is the limit after cur: double, capped; with cur unknown, Start,
// or Max when Start is not set either. atMax reports that cur is at Max
// or above it already: it is kept (a cap never lowers a limit).
func (s Steps) next(cur int64) (next int64, atMax bool) {
	switch {
	case s.Start > 0:
		// Never below Start: a heap remembered from before an operator
		// raised it (a state file's) is not the one to double.
		cur = max(cur, s.Start)
	case cur <= 0:
		return s.Max, false
	}
	if cur >= s.Max {
		return cur, true
	}
	return min(2*cur, s.Max), false
}

// Gateway is the gateway watchdog's probe and recovery: it tells a heap
// exhaustion, a cgroup OOM kill and a crash apart from the target's
// evidence, and restarts the gateway with a larger heap, a larger memory
// limit, or as it was.
type Gateway struct {
	Target Target
	// Health probes the gateway's health URL; nil when there is none
	// (a pod's own health check then says).
	Health *HTTPProbe
	Heap   Steps // MB
	Memory Steps // bytes; Start unused: an OOM kill means there is a limit

	mem    TargetMemory
	change Change // what the last fault's recovery is to do
}

// Probe implements Probe.
func (g *Gateway) Probe(ctx context.Context) Finding {
	before := g.mem
	ev, err := g.Target.Look(ctx, &g.mem)
	if err != nil {
		// Blind: judging from half the evidence (a crash, because the
		// log was unreadable) would restart a healthy gateway. What was
		// read is read again once it can all be.
		g.mem = before
		return Finding{Kind: KindUnobservable, Blind: true, Detail: err.Error()}
	}
	f := g.judge(ctx, ev)
	if ev.LogNotRead != "" && f.Kind != "" && !f.Blind {
		// Said with each fault, not once per streak: faults are few
		// (the budget bounds them), a strike reaches no inbox, and each
		// line must say why its restart is as it was.
		f.Detail += fmt.Sprintf("; its log was not read (%s), so a heap that ran out could not be seen", ev.LogNotRead)
	}
	return f
}

// judge tells the fault, if any, from the evidence, and sets the change
// its recovery is to make.
func (g *Gateway) judge(ctx context.Context, ev Evidence) Finding {
	g.change = Change{}
	var health Finding
	if g.Health != nil {
		health = g.Health.Probe(ctx)
	}
	// Down: gone by the target's word, or, when nothing says whether it
	// runs (no pid file), refusing its health URL (not a probe that could
	// not look: that says nothing of it).
	down := ev.Known && !ev.Running || !ev.Known && health.Kind != "" && !health.Strike && !health.Blind
	// What the gateway's output says is believed with a sign it ended: a
	// running gateway can be made to print anything (a request's path it
	// logs). A line read while it still ran is kept for one more look (V8
	// writes it, then its stack, then aborts). Without a pid file nothing
	// tells a restart by its own supervisor: V8's line, at a line's start,
	// is believed alone.
	ended := ev.Exited || down || !ev.Known
	pending := g.mem.HeapLine
	g.mem.HeapLine = ""
	switch {
	case ev.HeapOOM != "" && !ended:
		g.mem.HeapLine = ev.HeapOOM
		ev.HeapOOM = ""
	case ev.HeapOOM == "" && ended:
		ev.HeapOOM = pending
	}
	switch {
	case ev.HeapOOM != "":
		// Even when it runs again (its supervisor restarted it): it
		// runs with the heap that ran out.
		cur := g.heapNow(ev)
		heap, atMax := g.Heap.next(int64(cur))
		if !atMax {
			g.change.HeapMB = int(heap)
		}
		return Finding{Kind: KindGatewayHeapOOM, Detail: fmt.Sprintf("V8 ran out of heap (%q, %s); restarting it with %s",
			ev.HeapOOM, ev.exit(), stepWords(fmt.Sprintf("%d MB", cur), fmt.Sprintf("%d MB", heap), atMax, "heap"))}
	case ev.OOMKills > 0 && (ev.Exited || down):
		if ev.MemoryMax <= 0 {
			return Finding{Kind: KindGatewayOOMKill, Detail: fmt.Sprintf("the OOM killer killed it (%s) with no memory limit of its own: the host ran out of memory; restarting it as it was", ev.exit())}
		}
		limit, atMax := g.Memory.next(ev.MemoryMax)
		if !atMax {
			g.change.MemoryMax = limit
		}
		return Finding{Kind: KindGatewayOOMKill, Detail: fmt.Sprintf("the OOM killer killed %d process(es) at its cgroup's memory limit (%s); restarting it with %s",
			ev.OOMKills, ev.exit(), stepWords(mib(ev.MemoryMax), mib(limit), atMax, "memory limit"))}
	case down:
		why := ev.exit()
		if !ev.Known {
			why = health.Detail
		}
		return Finding{Kind: KindGatewayCrash, Detail: fmt.Sprintf("it is not running (%s), with no sign of running out of memory; restarting it as it was", why)}
	case health.Blind:
		// The pod would not dial the health URL: the gateway was not
		// looked at, and the line keeps the kind that says so.
		return health
	case health.Kind != "":
		// It runs, but refuses or ignores its health URL (or may be
		// still starting): strikes, not a fault at once.
		health.Kind, health.Strike = KindGatewayHung, true
		return health
	case !ev.Healthy:
		return Finding{Kind: KindGatewayHung, Strike: true, Detail: "its supervisor does not find it healthy"}
	}
	return Finding{}
}

// Settled implements Settler: a Probe that leaves the memory (and the
// change in hand) as they were, so that a fault found while the restart
// settles is judged again, whole, by the next round.
func (g *Gateway) Settled(ctx context.Context) Finding {
	mem, change := g.mem, g.change
	defer func() { g.mem, g.change = mem, change }()
	return g.Probe(ctx)
}

// heapNow is the heap the gateway runs with, as best known.
func (g *Gateway) heapNow(ev Evidence) int {
	if ev.HeapMB > 0 {
		return ev.HeapMB
	}
	if g.mem.HeapMB > 0 {
		return g.mem.HeapMB
	}
	return int(g.Heap.Start)
}

// Recover implements Recoverer.
func (g *Gateway) Recover(ctx context.Context) error {
	return g.Target.Restart(ctx, g.change, &g.mem)
}

// Restore implements Remembering.
func (g *Gateway) Restore(raw json.RawMessage) error {
	g.mem = TargetMemory{}
	if len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, &g.mem); err != nil {
		return err
	}
	// A heap the watchdog gave the gateway before an operator raised its
	// start (--heap-mb) is not the one it restarts with: a limit never
	// goes down, but by the operator's cap (--max-heap-mb, lowered since,
	// or a state file that says more than any step could have given).
	if g.mem.HeapMB > 0 && int64(g.mem.HeapMB) < g.Heap.Start {
		g.mem.HeapMB = int(g.Heap.Start)
	}
	if g.Heap.Max > 0 && int64(g.mem.HeapMB) > g.Heap.Max {
		g.mem.HeapMB = int(g.Heap.Max)
	}
	return nil
}

// Remember implements Remembering.
func (g *Gateway) Remember() (json.RawMessage, error) { return json.Marshal(g.mem) }

func (ev Evidence) exit() string {
	if ev.Exit == "" {
		return "how it ended is not known"
	}
	return ev.Exit
}

// stepWords says a limit's step: "heap 64 MB → 128 MB", or that it is at
// its cap already.
func stepWords(from, to string, atMax bool, what string) string {
	if atMax {
		return fmt.Sprintf("the same %s, %s: it is at its cap or above already; raise the cap or find the leak", what, to)
	}
	if from == "0 MB" || from == "0 MiB" {
		return fmt.Sprintf("a %s of %s (it had no known one)", what, to)
	}
	return fmt.Sprintf("a %s of %s (was %s)", what, to, from)
}

func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }
