package ingress

import (
	"fmt"
	"os"
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
