package budget

import (
	"errors"
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/internal/trusted"
	"github.com/airlock-sandbox/airlock/internal/yamlobj"
)

// ErrAboveLimit: the limit asked of a spawn (Budget.Daily, its
// --daily-tokens) is above the one the operator's limit file sets, which
// only the operator changes: a spawn may lower the day's limit, never
// raise it.
var ErrAboveLimit = errors.New("above the daily limit the home sets")

// The limit file is the operator's (the home's budget.yaml):
//
//	daily_tokens: 200000
//
// It takes the day's limit out of the hands of whoever runs a spawn (an
// agent told its budget is spent may well ask for more): where it exists,
// its limit is the day's, and Daily may only lower it. It must be
// trusted.Path's (no other user could have written it), or nothing is
// reserved.

// Limit is the day's limit in tokens: the limit file's, or Daily's where
// that is lower or there is no file. A caller learns from it that it
// cannot reserve (ErrAboveLimit, ErrUnusable) before it writes anything.
func (b Budget) Limit() (int64, error) {
	daily, err := b.ceiling()
	if err != nil || b.LimitFile == "" || daily == b.Daily {
		return daily, err
	}
	if b.Daily > daily {
		return 0, fmt.Errorf("%w: %d tokens asked, and %s sets %d: only its operator raises it", ErrAboveLimit, b.Daily, b.LimitFile, daily)
	}
	if b.Daily > 0 {
		return b.Daily, nil
	}
	return daily, nil
}

// ceiling is the operator's limit: the limit file's, Daily where there is
// no file. What a spawn lowers the day's limit to (Daily) binds what it
// may reserve, not what its sub-agent is charged.
func (b Budget) ceiling() (int64, error) {
	if b.LimitFile == "" {
		return b.Daily, nil
	}
	data, err := os.ReadFile(b.LimitFile)
	if errors.Is(err, os.ErrNotExist) {
		return b.Daily, nil
	}
	if err == nil {
		err = trusted.Path(b.LimitFile)
	}
	if err != nil {
		return 0, fmt.Errorf("budget limit %s: refusing (fix it, or remove it for --daily-tokens to set the limit): %w: %w", b.LimitFile, ErrUnusable, err)
	}
	d := yamlobj.NewDecoder(b.LimitFile)
	var daily int64 = -1
	if doc := d.Document(data); doc != nil {
		o := d.Object(doc, "")
		if n, path := o.Get("daily_tokens", true); n != nil {
			if v, ok := d.Integer(n, path); ok && v < 0 {
				d.Errorf(n.Line, path, "%d: want 0 (refuse every spawn) or more", v)
			} else if ok {
				daily = v
			}
		}
		o.End()
	}
	if err := d.Err(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnusable, err)
	}
	return daily, nil
}
