package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/events"
)

// A sandbox's start (scenario "start", root only): /bin/true in a
// bubblewrap sandbox (every namespace, no capability), in `airlock launch`
// with no network and with its own proxy (the strict preset), and as a
// one-off sandbox joining a running pod (`airlock launch --pod-socket`:
// the pod's proxy, its policy already compiled). Runs alternate, so that
// the machine's load weighs on each alike; wall time from the start of the
// command to its exit, CPU from the children's rusage (the command and the
// descendants it waited for), plus, for the join, the pod's own CPU
// meanwhile: what the pod spends on the sandbox is the join's cost too.

var startRuns = flag.Int("start-runs", 15, "samples of each sandbox start, alternated")

// The targets: the bare launch within 2× bwrap's wall time in the
// same run, a join within 50 ms.
const (
	bareFactor = 2.0
	joinTarget = 50 * time.Millisecond
)

// startUID is no host account's: launch warns about a uid that is one.
const startUID = "61000"

// starter is one way of starting a sandbox that runs /bin/true.
type starter struct {
	name string
	argv []string
	pod  *upRun // the pod joined, whose CPU counts too
}

type startSample struct{ wall, cpu time.Duration }

func runStart() error {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "start: not measured: airlock launch needs root")
		return nil
	}
	dir, err := os.MkdirTemp("", "airlock-startbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	launch := []string{*airlock, "launch", "--user", startUID, "--log-level", "error"}
	var starters []starter
	var missing []string
	if bwrap, err := exec.LookPath("bwrap"); err == nil {
		starters = append(starters, starter{name: "bwrap --unshare-all --cap-drop ALL",
			argv: []string{bwrap, "--unshare-all", "--cap-drop", "ALL", "--ro-bind", "/", "/", "/bin/true"}})
	} else {
		missing = append(missing, "bwrap: not measured: bubblewrap not installed (apt-get install bubblewrap)")
	}
	starters = append(starters,
		starter{name: "airlock launch --net none", argv: append(append([]string{}, launch...), "--net", "none", "--", "/bin/true")},
		starter{name: "airlock launch --net proxy --preset strict", argv: append(append([]string{}, launch...), "--net", "proxy", "--preset", "strict",
			"--ca-dir", filepath.Join(dir, "ca"), "--audit-log", filepath.Join(dir, "audit.jsonl"), "--", "/bin/true")})
	const joinName = "airlock launch --pod-socket (join a pod)"
	if ok, err := launchJoins(); err != nil {
		return err
	} else if !ok {
		missing = append(missing, joinName+": not measured: this airlock launch has no --pod-socket")
	} else {
		pod, err := startIdlePod(filepath.Join(dir, "pod"))
		if err != nil {
			return err
		}
		defer pod.stop()
		starters = append(starters, starter{name: joinName, pod: pod,
			argv: append(append([]string{}, launch...), "--pod-socket", pod.socket, "--preset", "strict", "--", "/bin/true")})
	}
	// One run of each first, unmeasured: the CA is made, the caches warm.
	// One that fails is left out, named, and fails the bench; the others
	// are still measured.
	var failed error
	ready := starters[:0]
	for _, s := range starters {
		if _, err := s.run(); err != nil {
			missing = append(missing, s.name+": not measured: "+err.Error())
			failed = errors.Join(failed, fmt.Errorf("start: %w", err))
			continue
		}
		ready = append(ready, s)
	}
	starters = ready
	samples := make([][]startSample, len(starters))
	for i := 0; i < *startRuns; i++ {
		for j, s := range starters {
			v, err := s.run()
			if err != nil {
				return err
			}
			samples[j] = append(samples[j], v)
		}
	}
	printStart(os.Stdout, starters, samples, missing)
	return failed
}

// launchJoins says whether this airlock's launch can join a pod.
func launchJoins() (bool, error) {
	out, err := exec.Command(*airlock, "launch", "--help").CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("airlock launch --help: %v: %s", err, out)
	}
	return bytes.Contains(out, []byte("--pod-socket")), nil
}

// startIdlePod runs `airlock up` with one idle service and waits for READY.
func startIdlePod(dir string) (*upRun, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	state := filepath.Join(dir, "state")
	manifest := filepath.Join(dir, "pod.yaml")
	spec := fmt.Sprintf("name: bench-start\nstate_dir: %s\nservices:\n  - {name: idle, command: [/usr/bin/sleep, infinity], preset: strict}\n", state)
	if err := os.WriteFile(manifest, []byte(spec), 0o644); err != nil {
		return nil, err
	}
	p, err := startUp(state, "up", manifest)
	if err != nil {
		return nil, err
	}
	if _, _, err := p.await(0, func(e events.Event) bool { return e.Kind == "ready" }); err != nil {
		p.stop()
		return nil, fmt.Errorf("start: the pod to join: %w", err)
	}
	return p, nil
}

// run starts the sandbox once and waits for its exit, which must be 0.
func (s starter) run() (startSample, error) {
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var podBefore time.Duration
	if s.pod != nil {
		podBefore = treeCPU(s.pod.cmd.Process.Pid)
	}
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil {
		return startSample{}, fmt.Errorf("%s: %v: %s", strings.Join(s.argv, " "), err, strings.TrimSpace(out.String()))
	}
	v := startSample{wall: wall, cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
	if s.pod != nil {
		v.cpu += treeCPU(s.pod.cmd.Process.Pid) - podBefore
	}
	return v, nil
}

// treeCPU is the user+system time of pid and of the children it has
// waited for (a pod's sandboxes, once reaped).
func treeCPU(pid int) time.Duration { return procCPU(pid, 11, 12, 13, 14) } // utime, stime, cutime, cstime

// startVerdict judges the start targets: the bare launch within
// bareFactor × bwrap's wall time, a join within joinTarget. ok is false
// when the figure it needs is missing.
func startVerdict(name string, wall, bwrap time.Duration) (target string, met, ok bool) {
	switch {
	case strings.HasPrefix(name, "airlock launch --net none"):
		if bwrap == 0 {
			return fmt.Sprintf("≤ %gx bwrap", bareFactor), false, false
		}
		limit := time.Duration(bareFactor * float64(bwrap))
		return fmt.Sprintf("≤ %gx bwrap (%.1f ms)", bareFactor, ms(limit)), wall <= limit, true
	case strings.Contains(name, "--pod-socket"):
		return fmt.Sprintf("≤ %v", joinTarget), wall <= joinTarget, true
	}
	return "", false, false
}

// ms is d in milliseconds, to the µs.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func printStart(w io.Writer, starters []starter, samples [][]startSample, missing []string) {
	fmt.Fprintf(w, "\n%-44s %10s %10s  %-26s %s\n", fmt.Sprintf("sandbox start of /bin/true, median of %d", *startRuns), "wall", "CPU", "target", "verdict")
	var bwrap time.Duration
	for i, s := range starters {
		var walls, cpus []float64
		for _, v := range samples[i] {
			walls, cpus = append(walls, float64(v.wall)), append(cpus, float64(v.cpu))
		}
		wall, cpu := time.Duration(median(walls)), time.Duration(median(cpus))
		if strings.HasPrefix(s.name, "bwrap") {
			bwrap = wall
		}
		fmt.Fprintf(w, "%-44s %7.1f ms %7.1f ms", s.name, ms(wall), ms(cpu))
		if target, met, ok := startVerdict(s.name, wall, bwrap); target != "" {
			verdict := "not measured"
			if ok && met {
				verdict = "met"
			} else if ok {
				verdict = "NOT met"
			}
			fmt.Fprintf(w, "  %-26s %s", target, verdict)
		}
		fmt.Fprintln(w)
	}
	for _, m := range missing {
		fmt.Fprintln(w, m)
	}
	fmt.Fprintln(w, "(wall: the command's start to its exit; CPU: its rusage with its waited-for descendants, and for the join the pod's own CPU meanwhile; launches as uid "+startUID+")")
}
