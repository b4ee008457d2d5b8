package orchestrator

import "github.com/airlock-sandbox/airlock/internal/events"

// Notify appends one orchestrator event (a warning: kind, detail) to the
// home's inbox, the operator's one place to look.
func (h Home) Notify(kind, detail string) error {
	l, err := events.Open(h.Inbox(), events.Options{})
	if err != nil {
		return err
	}
	err = l.Append(events.Event{Source: "orchestrator", Kind: kind, Severity: events.Warning, Detail: detail})
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	return err
}
