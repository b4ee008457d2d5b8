package watchdogs

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// samples flattens metric families into `name{label="v"}` → value, the
// source and service labels (checked on every sample) left out; a
// histogram gives its _count and _sum.
func samples(t *testing.T, fams map[string]*dto.MetricFamily) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for name, mf := range fams {
		for _, mt := range mf.GetMetric() {
			var labels []string
			src, svc := "", ""
			for _, lp := range mt.GetLabel() {
				switch lp.GetName() {
				case "source":
					src = lp.GetValue()
				case "service":
					svc = lp.GetValue()
				default:
					labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
				}
			}
			if src != "watchdog-shim" || svc != "shim" {
				t.Errorf("%s: source %q, service %q; want watchdog-shim, shim", name, src, svc)
			}
			sort.Strings(labels)
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = mt.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = mt.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key+"_count"] = float64(mt.GetHistogram().GetSampleCount())
				out[key+"_sum"] = mt.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

func gathered(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		fams[mf.GetName()] = mf
	}
	return samples(t, fams)
}

func checkSamples(t *testing.T, step string, got, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s: %s = %v (present %v), want %v", step, k, g, ok, v)
		}
	}
}

const (
	pre           = "airlock_watchdog_"
	mUp           = pre + "up"
	mStrikes      = pre + "strikes"
	mInWindow     = pre + "restarts_in_window"
	mGivenUp      = pre + "given_up"
	mGaveUpTotal  = pre + "gave_up_total"
	mRecoveries   = pre + "recovery_seconds_count"
	mShimDead     = pre + `faults_total{kind="shim_dead"}`
	mRestartsOK   = pre + `restarts_total{result="recovered"}`
	mRestartsFail = pre + `restarts_total{result="failed"}`
	mLastRound    = pre + "last_round_timestamp_seconds"
)

func rounds(outcome string) string { return pre + `rounds_total{outcome="` + outcome + `"}` }

// One Metrics (a daemon's) through a real shim's life: healthy, a timeout,
// killed and restarted, then a crash loop given up on.
func TestMetricsFollowTheRounds(t *testing.T) {
	e := newShimEnv(t)
	m := NewMetrics("watchdog-shim", "shim")
	if got := gathered(t, m); got[rounds("healthy")] != 0 || got[mRestartsOK] != 0 {
		t.Errorf("before a round: %v", got)
	}
	if _, ok := gathered(t, m)[mUp]; ok {
		t.Errorf("before a round: up is set; want no gauge until a round says it")
	}
	now := time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)
	run := func(cmd string, want Outcome) {
		t.Helper()
		w := e.watchdog(cmd, 3, Budget{Max: 2, Window: time.Hour})
		w.Now = func() time.Time { return now }
		if cmd == e.crash {
			w.Settle = 500 * time.Millisecond // the crashing shim never answers
		}
		w.Observe = m.Observe
		before := time.Now()
		e.once(w, want)
		if ts := gathered(t, m)[mLastRound]; ts < float64(before.UnixNano())/1e9 || ts > float64(time.Now().UnixNano())/1e9 {
			t.Errorf("after a %v round: %s = %v, not within the round", want, mLastRound, ts)
		}
		now = now.Add(time.Minute)
	}
	kill := func() {
		e.signal(syscall.SIGKILL)
		testutil.WaitFor(t, "the killed shim to stop answering", func() bool { return !e.answers() })
	}

	for _, step := range []struct {
		name string
		do   func()
		want map[string]float64
	}{
		{"healthy", func() { run(e.start, Healthy) },
			map[string]float64{rounds("healthy"): 1, mUp: 1, mStrikes: 0, mGivenUp: 0, mInWindow: 0}},
		{"a timeout", func() {
			e.signal(syscall.SIGSTOP)
			run(e.start, Suspect)
			e.signal(syscall.SIGCONT)
		}, map[string]float64{rounds("suspect"): 1, mUp: 0, mStrikes: 1}},
		{"healthy again", func() { run(e.start, Healthy) },
			map[string]float64{rounds("healthy"): 2, mUp: 1, mStrikes: 0}},
		{"killed, restarted", func() { kill(); run(e.start, Recovered) },
			map[string]float64{rounds("recovered"): 1, mShimDead: 1, mRestartsOK: 1, mRestartsFail: 0, mRecoveries: 1, mUp: 1, mInWindow: 1}},
		{"killed, crashing", func() { kill(); run(e.crash, Failed) },
			map[string]float64{rounds("failed"): 1, mShimDead: 2, mRestartsOK: 1, mRestartsFail: 1, mRecoveries: 1, mUp: 0, mInWindow: 2, mGaveUpTotal: 0}},
		{"given up", func() { run(e.crash, GaveUp) },
			map[string]float64{rounds("gave_up"): 1, mShimDead: 3, mRestartsFail: 1, mGaveUpTotal: 1, mGivenUp: 1, mUp: 0, mInWindow: 2}},
		{"still given up", func() { run(e.crash, GaveUp) },
			map[string]float64{rounds("gave_up"): 2, mShimDead: 4, mRestartsFail: 1, mGaveUpTotal: 1, mGivenUp: 1, rounds("healthy"): 2}},
	} {
		step.do()
		checkSamples(t, step.name, gathered(t, m), step.want)
	}
	if got := gathered(t, m); got[pre+"recovery_seconds_sum"] <= 0 {
		t.Errorf("recovery_seconds_sum = %v, want the recovery's time", got[pre+"recovery_seconds_sum"])
	}
}

// Each one-shot run is a fresh process: a fresh Watchdog and Metrics, one
// state file. The textfile's counters go on from the run before.
func TestTextfileKeepsCountingAcrossOneShotRuns(t *testing.T) {
	e := newShimEnv(t)
	dir := t.TempDir()
	prom := filepath.Join(dir, "watchdog-shim.prom")
	var prev map[string]float64
	for i, step := range []struct {
		do   func()
		want Outcome
		vals map[string]float64
	}{
		{func() {}, Healthy, map[string]float64{rounds("healthy"): 1, rounds("recovered"): 0, mUp: 1}},
		{func() {
			e.signal(syscall.SIGKILL)
			testutil.WaitFor(t, "the killed shim to stop answering", func() bool { return !e.answers() })
		}, Recovered, map[string]float64{rounds("healthy"): 1, rounds("recovered"): 1, mShimDead: 1, mRestartsOK: 1, mRecoveries: 1, mUp: 1, mInWindow: 1}},
		{func() {}, Healthy, map[string]float64{rounds("healthy"): 2, rounds("recovered"): 1, mShimDead: 1, mRestartsOK: 1, mRecoveries: 1, mUp: 1}},
	} {
		step.do()
		m := NewMetrics("watchdog-shim", "shim")
		w := e.watchdog(e.start, 3, wideBudget)
		w.Observe = m.Observe
		e.once(w, step.want)
		if err := m.WriteTextfile(prom); err != nil {
			t.Fatal(err)
		}

		got := parseTextfile(t, prom)
		checkSamples(t, fmt.Sprintf("run %d", i+1), got, step.vals)
		for k, v := range prev {
			if counter(k) && got[k] < v {
				t.Errorf("run %d: %s went down from %v to %v", i+1, k, v, got[k])
			}
		}
		prev = got
	}
	// The round's own state is still there beside the counters.
	st, err := LoadState(e.statePath)
	if err != nil || len(st.Restarts) != 1 || st.Metrics == nil {
		t.Errorf("state = %+v, %v; want the restart and the counters", st, err)
	}
	fi, err := os.Stat(prom)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("textfile: %v, %v; want mode 0644 for node_exporter's user", fi, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("textfile directory holds %v, want the .prom file alone", entries)
	}
}

func counter(sample string) bool {
	name, _, _ := strings.Cut(sample, "{")
	return strings.HasSuffix(name, "_total") || strings.HasSuffix(name, "_count") || strings.HasSuffix(name, "_sum")
}

func parseTextfile(t *testing.T, path string) map[string]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(f)
	if err != nil {
		t.Fatalf("%s does not parse as the text format: %v", path, err)
	}
	return samples(t, fams)
}

// Counts kept by a version with other buckets start the histogram afresh
// instead of putting old counts under the wrong bounds; the other
// counters go on.
func TestCountsWithOtherBuckets(t *testing.T) {
	kept := Counts{Rounds: map[string]uint64{"healthy": 7}, Recovery: RecoveryHistogram{Count: 2, Sum: 3, Buckets: []uint64{1, 2}}}
	m := NewMetrics("watchdog-shim", "shim")
	m.Observe(Result{Outcome: Healthy}, &State{Metrics: &kept})
	checkSamples(t, "loaded", gathered(t, m), map[string]float64{rounds("healthy"): 8, mRecoveries: 0, pre + "recovery_seconds_sum": 0})
}
