package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The spawn overhead (scenario "spawn", root only): from `airlock spawn`
// starting to the sub-agent's first instruction, on the local substrate,
// less the same for `airlock launch` with the same preset. The sub-agent is
// bash whose first instruction writes $EPOCHREALTIME (a builtin: no fork
// before the stamp), so both figures end at the same instruction and the
// difference is what the spawn adds: the kind checked, the budget
// reserved, the ledger written, the task rendered (the sandbox is launched
// in the spawn's own process, with the engine it verified, as `airlock
// launch` launches its own). Runs alternate, spawn and launch, so that the
// machine's load weighs on both alike.

var spawnRuns = flag.Int("spawn-runs", 7, "samples of spawn and of launch, alternated")

// spawnTarget is the target for the overhead.
const spawnTarget = 100 * time.Millisecond

// spawnPreset serves both sandboxes: the embedded bundle's preset with no
// rule, so the figure is the orchestrator's, not a policy's.
const spawnPreset = "strict"

func runSpawn() error {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "spawn: not measured: airlock launch needs root")
		return nil
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		return fmt.Errorf("spawn: %w", err)
	}
	dir, err := os.MkdirTemp("", "airlock-spawnbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755) // the sandbox's uid traverses it to its work dir
	home := filepath.Join(dir, "home")
	os.MkdirAll(filepath.Join(home, "kinds"), 0o755)
	kind := fmt.Sprintf(`name: first
binary: {path: %s}
args: ["-c", "echo $EPOCHREALTIME > {{.Dir}}/first; echo '{}'"]
preset: %s
substrate: local
timeout: 1m
tokens: 1
prompt: "{{.Text}}"
`, bash, spawnPreset)
	task := filepath.Join(dir, "task")
	os.WriteFile(task, []byte("go"), 0o644)
	if err := os.WriteFile(filepath.Join(home, "kinds", "first.yaml"), []byte(kind), 0o644); err != nil {
		return err
	}
	ca := filepath.Join(dir, "ca")
	spawnOnce := func() (time.Duration, error) {
		start := time.Now()
		out, err := exec.Command(*airlock, "spawn", "--home", home, "--kind", "first", "--task-file", task,
			"--substrate", "local", "--daily-tokens", "1000000", "--ca-dir", ca, "--log-level", "error").CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("airlock spawn: %v: %s", err, out)
		}
		matches, _ := filepath.Glob(filepath.Join(home, "subagents", "*", "work", "first"))
		if len(matches) != 1 {
			return 0, fmt.Errorf("airlock spawn: %d first-instruction stamps; want 1", len(matches))
		}
		defer os.RemoveAll(filepath.Join(home, "subagents"))
		return stampSince(matches[0], start)
	}
	work := filepath.Join(dir, "work")
	launchOnce := func() (time.Duration, error) {
		os.RemoveAll(work)
		os.Mkdir(work, 0o755)
		os.Chown(work, 998, 998)
		start := time.Now()
		out, err := exec.Command(*airlock, "launch", "--preset", spawnPreset, "--ca-dir", ca, "--audit-log", filepath.Join(dir, "audit.jsonl"),
			"--rw", work, "--log-level", "error", "--", bash, "-c", "echo $EPOCHREALTIME > "+work+"/first").CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("airlock launch: %v: %s", err, out)
		}
		return stampSince(filepath.Join(work, "first"), start)
	}
	// One of each first, unmeasured: the CA is made, the caches warm.
	if _, err := spawnOnce(); err != nil {
		return err
	}
	if _, err := launchOnce(); err != nil {
		return err
	}
	// A dry run is the spawn's own work before anything is reserved:
	// its process, the bundle verified and compiled, the kind checked.
	dryOnce := func() (time.Duration, error) {
		start := time.Now()
		out, err := exec.Command(*airlock, "spawn", "--home", home, "--kind", "first", "--dry-run", "--log-level", "error").CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("airlock spawn --dry-run: %v: %s", err, out)
		}
		return time.Since(start), nil
	}
	var spawns, launches, dries []float64
	for i := 0; i < max(*spawnRuns, 5); i++ {
		s, err := spawnOnce()
		if err != nil {
			return err
		}
		l, err := launchOnce()
		if err != nil {
			return err
		}
		d, err := dryOnce()
		if err != nil {
			return err
		}
		spawns, launches = append(spawns, float64(s.Microseconds())), append(launches, float64(l.Microseconds()))
		dries = append(dries, float64(d.Microseconds()))
	}
	ms := func(us float64) string { return fmt.Sprintf("%.1f ms", us/1000) }
	over := median(spawns) - median(launches)
	fmt.Printf("\nspawn overhead (local substrate, preset %s, median of %d)\n", spawnPreset, len(spawns))
	fmt.Printf("%-44s %10s\n", "airlock launch to first instruction", ms(median(launches)))
	fmt.Printf("%-44s %10s\n", "airlock spawn to first instruction", ms(median(spawns)))
	fmt.Printf("%-44s %10s\n", "  of which airlock spawn --dry-run, whole", ms(median(dries)))
	verdict := "within"
	if time.Duration(over)*time.Microsecond > spawnTarget {
		verdict = "OVER"
	}
	fmt.Printf("%-44s %10s  (%s the %v target)\n", "spawn overhead beyond the launcher's start", ms(over), verdict, spawnTarget)
	return nil
}

// stampSince reads a $EPOCHREALTIME stamp ("seconds.micros") and returns
// how long after start it was taken.
func stampSince(path string, start time.Time) (time.Duration, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	sec, frac, ok := strings.Cut(strings.TrimSpace(string(raw)), ".")
	s, err1 := strconv.ParseInt(sec, 10, 64)
	us, err2 := strconv.ParseInt(frac, 10, 64)
	if !ok || err1 != nil || err2 != nil || len(frac) != 6 {
		return 0, fmt.Errorf("%s: %q is not $EPOCHREALTIME", path, raw)
	}
	return time.Unix(s, us*1000).Sub(start), nil
}
