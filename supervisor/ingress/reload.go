package ingress

import (
	"context"
	"fmt"
	"os"
	"time"
)

// keySet is the keys a route admits with, or why it admits no one.
type keySet struct {
	keys  *Keys
	err   error
	stamp fileStamp // of the file keys (or err) came from
}

// currentKeys is the route's keys as its key file now holds them. The file
// is looked at on every request (one stat): `airlock ingress key
// --replace` must end an old key's use at once, without a restart of the
// pod and its services. A file changed into one that cannot be used
// (malformed, gone, writable by others) admits no one until it is mended:
// keeping the last good keys would keep admitting the very key an
// operator removed.
func (s *Server) currentKeys() (*Keys, error) {
	path := s.route.Keys.Path()
	cur := s.keys.Load()
	st, err := os.Stat(path)
	if err == nil && stampOf(st) == cur.stamp {
		return cur.keys, cur.err
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if cur = s.keys.Load(); err == nil {
		if st, err = os.Stat(path); err == nil && stampOf(st) == cur.stamp {
			return cur.keys, cur.err // another request reloaded it
		}
	}
	next := &keySet{}
	if err != nil {
		next.err = fmt.Errorf("ingress key file: %w", err)
	} else if next.keys, next.err = LoadKeys(path); next.err == nil {
		next.stamp = next.keys.stamp
	} else {
		next.stamp = stampOf(st)
	}
	s.keys.Store(next)
	s.revoke(next.keys)
	if next.err != nil {
		if cur.err == nil || cur.err.Error() != next.err.Error() {
			s.log.Error("ingress key file changed and cannot be used: every request is refused until it is mended", "err", next.err)
			if s.keysChanged != nil {
				s.keysChanged(0, next.err)
			}
		}
		return nil, next.err
	}
	s.log.Info("ingress key file reloaded", "keys", next.keys.Len())
	if s.keysChanged != nil {
		s.keysChanged(next.keys.Len(), nil)
	}
	return next.keys, nil
}

// admission is an allowed request in flight: the key it was let in with,
// and what ends it.
type admission struct {
	key, operator string
	end           context.CancelFunc
}

// hold registers an allowed request until drop, with the context it is
// forwarded with: a key removed from the file ends what it let in, a
// stream or WebSocket included, not only its next request.
func (s *Server) hold(ctx context.Context, key, operator string) (context.Context, *admission) {
	ctx, end := context.WithCancel(ctx)
	a := &admission{key: key, operator: operator, end: end}
	s.admittedMu.Lock()
	s.admitted[a] = struct{}{}
	s.admittedMu.Unlock()
	return ctx, a
}

func (s *Server) drop(a *admission) {
	s.admittedMu.Lock()
	delete(s.admitted, a)
	s.admittedMu.Unlock()
	a.end()
}

// revoke ends every request in flight that keys (nil: a file that cannot
// be used) no longer admit as the same operator.
func (s *Server) revoke(keys *Keys) {
	s.admittedMu.Lock()
	defer s.admittedMu.Unlock()
	for a := range s.admitted {
		if keys != nil {
			if op, ok := keys.Operator(a.key); ok && op == a.operator {
				continue
			}
		}
		s.log.Info("ingress key no longer admits: its request in flight is ended", "operator", a.operator)
		a.end()
	}
}

// keyRecheck is how often the key file is looked at while requests are in
// flight: a key removed while nothing new arrives still ends the streams
// it let in.
const keyRecheck = time.Second

// watchKeys looks at the key file every keyRecheck while requests are in
// flight, until ctx ends (Shutdown).
func (s *Server) watchKeys(ctx context.Context) {
	t := time.NewTicker(keyRecheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.admittedMu.Lock()
		n := len(s.admitted)
		s.admittedMu.Unlock()
		if n > 0 {
			s.currentKeys()
		}
	}
}
