package spawn

import "github.com/airlock-sandbox/airlock/internal/events"

// event appends one orchestrator event to the home's inbox; failing to
// is logged, since the event reports something that already happened.
func (s *Spawner) event(kind, detail string) {
	l, err := events.Open(s.Home.Inbox(), events.Options{})
	if err == nil {
		err = l.Append(events.Event{Source: "orchestrator", Kind: kind, Severity: events.Warning, Detail: detail})
		if cerr := l.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		s.log().Error("the inbox could not be written", "path", s.Home.Inbox(), "event", kind, "err", err)
	}
}
