package budget_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/orchestrator/budget"
)

// The home's limit file sets the day's limit; a spawn's own (--daily-tokens)
// may lower it and never raise it; a file that cannot be believed refuses
// every reservation, naming why, rather than fall back to the spawn's.
func TestLimitFile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		file  string // "": none
		mode  os.FileMode
		daily int64
		fits  int64 // the largest reservation that fits, when no err
		err   error
		says  string
	}{
		{name: "no file: the spawn's", daily: 500, fits: 500},
		{name: "no file, no limit", err: budget.ErrExhausted, says: "limit 0 tokens"},
		{name: "the file's", file: "daily_tokens: 1000\n", fits: 1000},
		{name: "lowered by the spawn", file: "daily_tokens: 1000\n", daily: 400, fits: 400},
		{name: "raised by the spawn", file: "daily_tokens: 1000\n", daily: 5000, err: budget.ErrAboveLimit, says: "5000 tokens asked"},
		{name: "zero: every spawn refused", file: "daily_tokens: 0\n", daily: 0, err: budget.ErrExhausted, says: "limit 0 tokens"},
		{name: "writable by others", file: "daily_tokens: 1000\n", mode: 0o666, daily: 500, err: budget.ErrUnusable, says: "writable by group or others"},
		{name: "misspelt", file: "daily_token: 1000\n", daily: 500, err: budget.ErrUnusable, says: "unknown field"},
		{name: "negative", file: "daily_tokens: -5\n", daily: 500, err: budget.ErrUnusable, says: "want 0"},
		{name: "not a number", file: "daily_tokens: lots\n", daily: 500, err: budget.ErrUnusable, says: "daily_tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			b := budget.Budget{Dir: filepath.Join(dir, "budget"), Daily: tc.daily, LimitFile: filepath.Join(dir, "budget.yaml")}
			if tc.file != "" {
				if err := os.WriteFile(b.LimitFile, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
				if tc.mode != 0 {
					os.Chmod(b.LimitFile, tc.mode)
				}
			}
			if tc.err == nil {
				if _, err := b.Reserve("over", tc.fits+1); !errors.Is(err, budget.ErrExhausted) {
					t.Fatalf("reserving %d: %v; want the limit %d to refuse it", tc.fits+1, err, tc.fits)
				}
				if _, err := b.Reserve("fits", tc.fits); err != nil {
					t.Fatalf("reserving %d: %v", tc.fits, err)
				}
				if day, err := b.Today(); err != nil || day.Limit != tc.fits {
					t.Errorf("Today = %+v, %v; want limit %d", day, err, tc.fits)
				}
				return
			}
			_, err := b.Reserve("any", 1)
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("reserving 1: %v; want %v saying %q", err, tc.err, tc.says)
			}
		})
	}
}

// A spawn that lowers the day's limit (its --daily-tokens) binds what it
// may reserve, not what its sub-agent is charged: a report above the
// lowered limit is charged up to the operator's, so a later spawn finds
// the day as spent as it was reported.
func TestLoweredLimitChargesWhatWasReported(t *testing.T) {
	dir := t.TempDir()
	limit := filepath.Join(dir, "budget.yaml")
	if err := os.WriteFile(limit, []byte("daily_tokens: 100000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lowered := budget.Budget{Dir: filepath.Join(dir, "budget"), Daily: 40000, LimitFile: limit}
	r, err := lowered.Reserve("a", 40000)
	if err != nil {
		t.Fatal(err)
	}
	if err := lowered.Settle(r, 100000); err != nil {
		t.Fatal(err)
	}
	day, err := budget.Budget{Dir: lowered.Dir, LimitFile: limit}.Today()
	if err != nil || day.Spent != 100000 {
		t.Fatalf("the day %+v, %v; want the 100000 reported spent", day, err)
	}
	if _, err := (budget.Budget{Dir: lowered.Dir, LimitFile: limit}).Reserve("b", 1); !errors.Is(err, budget.ErrExhausted) {
		t.Fatalf("a reservation on a day reported spent: %v; want ErrExhausted", err)
	}
}
