package budget_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/orchestrator/budget"
)

// 20 reservations of 150 tokens against 1000: exactly 6 fit.
const (
	limit   = 1000
	each    = 150
	fitting = limit / each
)

func TestReserveConcurrentGoroutines(t *testing.T) {
	b := budget.Budget{Dir: t.TempDir(), Daily: limit}
	ok, err := reserveConcurrently(b, "t", 20, each)
	if err != nil {
		t.Fatal(err)
	}
	checkFitting(t, b, ok)
}

func TestReserveConcurrentProcesses(t *testing.T) {
	b := budget.Budget{Dir: t.TempDir(), Daily: limit}
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for p := range 4 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%d|p%d|5|%d", reserverEnv, b.Dir, limit, p, each))
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	ok := 0
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("reserver: %v", err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(outs[i].String()))
		if err != nil {
			t.Fatalf("reserver printed %q", outs[i])
		}
		ok += n
	}
	checkFitting(t, b, ok)
}

// checkFitting: exactly the reservations that fit succeeded, and the day
// holds them.
func checkFitting(t *testing.T, b budget.Budget, ok int) {
	t.Helper()
	if ok != fitting {
		t.Errorf("%d reservations succeeded, want exactly %d", ok, fitting)
	}
	day, err := b.Today()
	if err != nil {
		t.Fatal(err)
	}
	if want := (budget.Day{Limit: limit, Reserved: fitting * each}); day != want {
		t.Errorf("Today = %+v, want %+v", day, want)
	}
}

func TestExhaustedMessage(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 11, 23, 19, 0, 0, 0, time.UTC) }
	b := budget.Budget{Dir: t.TempDir(), Daily: 1000, Now: now}
	r, err := b.Reserve("a", 600)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Settle(r, 500); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reserve("b", 300); err != nil {
		t.Fatal(err)
	}
	_, err = b.Reserve("c", 201)
	const want = "daily token budget exhausted: 2026-11-23: limit 1000 tokens, 300 reserved, 500 spent; task c asked for 201"
	if !errors.Is(err, budget.ErrExhausted) || err.Error() != want {
		t.Errorf("Reserve = %v, want %q", err, want)
	}
	if _, err := b.Reserve("c", 200); err != nil {
		t.Errorf("Reserve of what is left = %v, want it to fit", err)
	}
}

func TestZeroRefusesEverything(t *testing.T) {
	b := budget.Budget{Dir: t.TempDir()}
	for _, tokens := range []int64{0, 1} {
		if _, err := b.Reserve("a", tokens); !errors.Is(err, budget.ErrExhausted) {
			t.Errorf("Reserve(%d) with no daily budget = %v, want ErrExhausted", tokens, err)
		}
	}
}

func TestSettle(t *testing.T) {
	b := budget.Budget{Dir: t.TempDir(), Daily: 1000}
	for _, tc := range []struct {
		name           string
		reserve, used  int64
		spent, nextFit int64 // after settling: spent, and the most the next reservation gets
	}{
		{"charges less than the estimate", 800, 300, 300, 700},
		{"charges more than the estimate", 100, 400, 700, 300},
		{"0 releases", 300, 0, 700, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := b.Reserve(tc.name, tc.reserve)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Settle(r, tc.used); err != nil {
				t.Fatal(err)
			}
			if day, err := b.Today(); err != nil || day.Spent != tc.spent || day.Reserved != 0 {
				t.Errorf("Today = %+v, %v; want spent %d, nothing reserved", day, err, tc.spent)
			}
			if _, err := b.Reserve(tc.name+"+1", tc.nextFit+1); !errors.Is(err, budget.ErrExhausted) {
				t.Errorf("Reserve(%d) = %v, want ErrExhausted", tc.nextFit+1, err)
			}
			// Settling again would charge twice: refused.
			if err := b.Settle(r, tc.used); err == nil || !strings.Contains(err.Error(), "holds no reservation") {
				t.Errorf("second Settle = %v, want refused", err)
			}
		})
	}
}

// A task whose usage no one can report is charged what it holds, once.
func TestSettleHeld(t *testing.T) {
	b := budget.Budget{Dir: t.TempDir()}
	r, err := (budget.Budget{Dir: b.Dir, Daily: 1000}).Reserve("t", 250)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SettleHeld(r); err != nil {
		t.Fatal(err)
	}
	if day, err := b.Today(); err != nil || day.Spent != 250 || day.Reserved != 0 {
		t.Errorf("Today = %+v, %v; want the 250 held spent, nothing reserved", day, err)
	}
	if err := b.SettleHeld(r); err == nil || !strings.Contains(err.Error(), "holds no reservation") {
		t.Errorf("second SettleHeld = %v, want refused", err)
	}
}

func TestReserveRefusesATaskTwice(t *testing.T) {
	b := budget.Budget{Dir: t.TempDir(), Daily: 1000}
	if _, err := b.Reserve("a", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reserve("a", 1); err == nil || !strings.Contains(err.Error(), "already holds a reservation") {
		t.Errorf("second Reserve(a) = %v, want refused", err)
	}
}

// TestRollover: the day is the UTC day; a task reserved before midnight
// settles on its own day.
func TestRollover(t *testing.T) {
	now := time.Date(2026, 11, 23, 23, 59, 59, 0, time.UTC)
	b := budget.Budget{Dir: t.TempDir(), Daily: 100, Now: func() time.Time { return now }}
	r, err := b.Reserve("late", 100)
	if err != nil || r.Day != "2026-11-23" {
		t.Fatalf("Reserve = %+v, %v", r, err)
	}
	if _, err := b.Reserve("later", 1); !errors.Is(err, budget.ErrExhausted) {
		t.Fatalf("Reserve on a full day = %v, want ErrExhausted", err)
	}
	// 23:30 on the 23rd in UTC-1 is 00:30 UTC: the 24th.
	now = time.Date(2026, 11, 23, 23, 30, 0, 0, time.FixedZone("UTC-1", -3600))
	if _, err := b.Reserve("later", 1); err != nil {
		t.Fatalf("Reserve on the next UTC day = %v", err)
	}
	if day, err := b.Today(); err != nil || day != (budget.Day{Limit: 100, Reserved: 1}) {
		t.Errorf("Today (24th) = %+v, %v", day, err)
	}
	if err := b.Settle(r, 40); err != nil {
		t.Fatal(err)
	}
	if day, err := b.Today(); err != nil || day.Spent != 0 {
		t.Errorf("Today (24th) after settling the 23rd's task = %+v, %v; want nothing spent today", day, err)
	}
	raw, err := os.ReadFile(filepath.Join(b.Dir, "2026-11-23.json"))
	if err != nil || !strings.Contains(string(raw), `"spent":40`) {
		t.Errorf("2026-11-23.json = %s, %v; want the 40 spent there", raw, err)
	}
}

// TestUnreadableDayRefuses: a day file that does not parse refuses rather
// than start the day afresh.
func TestUnreadableDayRefuses(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC) }
	b := budget.Budget{Dir: t.TempDir(), Daily: 1000, Now: now}
	if err := os.WriteFile(filepath.Join(b.Dir, "2026-11-23.json"), []byte(`{"spent":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reserve("a", 1); err == nil || !strings.Contains(err.Error(), "unreadable, refusing") {
		t.Errorf("Reserve = %v, want refused", err)
	}
}

// TestHugeUsage: a sub-agent reporting absurd usage spends the day, and
// no sum wraps around to reopen it (Spent, the reservations, the check).
func TestHugeUsage(t *testing.T) {
	const huge = math.MaxInt64
	for _, tc := range []struct {
		name         string
		daily, spent int64 // spent: after two huge reports
	}{
		{"small limit", 1000, 2000},
		{"limit at int64's max", huge, huge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := budget.Budget{Dir: t.TempDir(), Daily: tc.daily}
			var held []budget.Reservation
			for _, task := range []string{"a", "b"} {
				r, err := b.Reserve(task, 1)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, r)
			}
			for _, r := range held {
				if err := b.Settle(r, huge); err != nil {
					t.Fatal(err)
				}
			}
			// Each charge is capped at the limit; their sum saturates.
			if day, err := b.Today(); err != nil || day.Spent != tc.spent {
				t.Errorf("Today = %+v, %v; want spent %d (each charge capped at the limit, the sum not wrapped)", day, err, tc.spent)
			}
			for _, tokens := range []int64{1, huge} {
				if _, err := b.Reserve("c", tokens); !errors.Is(err, budget.ErrExhausted) {
					t.Errorf("Reserve(%d) after huge usage = %v, want ErrExhausted", tokens, err)
				}
			}
		})
	}
}

// TestHugeReservations: reservations whose sum passes int64's max are
// refused, not wrapped into room.
func TestHugeReservations(t *testing.T) {
	b := budget.Budget{Dir: t.TempDir(), Daily: math.MaxInt64}
	if _, err := b.Reserve("a", math.MaxInt64-1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reserve("b", math.MaxInt64); !errors.Is(err, budget.ErrExhausted) {
		t.Errorf("Reserve past int64's max = %v, want ErrExhausted", err)
	}
	if _, err := b.Reserve("c", 1); err != nil {
		t.Errorf("Reserve of the 1 token left = %v, want it to fit", err)
	}
}

// TestNegativeDayRefuses: a day file with a negative amount (which would
// widen the day) refuses.
func TestNegativeDayRefuses(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC) }
	for _, body := range []string{`{"spent":-5}`, `{"reserved":{"x":-5}}`} {
		b := budget.Budget{Dir: t.TempDir(), Daily: 1000, Now: now}
		if err := os.WriteFile(filepath.Join(b.Dir, "2026-11-23.json"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Reserve("a", 1); err == nil || !strings.Contains(err.Error(), "negative amount, refusing") {
			t.Errorf("Reserve with %s = %v, want refused", body, err)
		}
	}
}
