package spawn

// event appends one orchestrator event to the home's inbox; failing to
// is logged, since the event reports something that already happened.
func (s *Spawner) event(kind, detail string) {
	if err := s.Home.Notify(kind, detail); err != nil {
		s.log().Error("the inbox could not be written", "path", s.Home.Inbox(), "event", kind, "err", err)
	}
}
