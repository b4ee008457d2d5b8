package supervisor

import (
	"strings"

	"github.com/airlock-sandbox/airlock/internal/nodeopts"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// nodeOptions is the NODE_OPTIONS the service's next launch gets: the
// manifest's (or a secret's: the last one set wins, as in its
// environment), its heap limit replaced by an operator's.
func (s *service) nodeOptions() string {
	opts := ""
	for _, kv := range s.env.Set {
		if v, ok := strings.CutPrefix(kv, "NODE_OPTIONS="); ok {
			opts = v
		}
	}
	s.mu.Lock()
	heap := s.heapMB
	s.mu.Unlock()
	if heap > 0 {
		opts = nodeopts.WithHeap(opts, heap)
	}
	return opts
}

// launchEnv is the environment of the service's next launch.
func (s *service) launchEnv() sandbox.EnvOptions {
	env := s.env
	s.mu.Lock()
	heap := s.heapMB
	s.mu.Unlock()
	if heap > 0 {
		env.Set = append(append([]string(nil), s.env.Set...), "NODE_OPTIONS="+s.nodeOptions())
	}
	return env
}

// memoryLimit is the memory_max of the service's next launch (0: none).
func (s *service) memoryLimit() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.memoryMax
}
