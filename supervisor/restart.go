package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/events"
	"github.com/airlock-sandbox/airlock/internal/nodeopts"
)

// restartChange is what an operator's restart may change for the
// service's launches from now until the pod stops (POST
// /v1/services/NAME/restart's optional body). Pointers tell "not given"
// from a zero, which is refused.
type restartChange struct {
	NodeHeapMB *int   `json:"node_heap_mb"`
	MemoryMax  *int64 `json:"memory_max"`
}

// decodeRestart reads a restart's body strictly: no body is no change; an
// unknown field, a value of the wrong type or out of range is an error
// naming the field.
func decodeRestart(r *http.Request) (restartChange, error) {
	var c restartChange
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 4<<10))
	dec.DisallowUnknownFields()
	err := dec.Decode(&c)
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return restartChange{}, nil
	case errors.As(err, &typeErr):
		return c, fmt.Errorf("%s: want a whole number, got a JSON %s", typeErr.Field, typeErr.Value)
	case err != nil && strings.HasPrefix(err.Error(), "json: unknown field "):
		return c, fmt.Errorf("%s: the body takes node_heap_mb and memory_max only", strings.TrimPrefix(err.Error(), "json: "))
	case err != nil:
		return c, fmt.Errorf("the body: want a JSON object {\"node_heap_mb\": MB, \"memory_max\": BYTES}: %w", err)
	}
	if dec.Decode(&struct{}{}) != io.EOF {
		return c, errors.New("the body: want one JSON object, got more after it")
	}
	if h := c.NodeHeapMB; h != nil && (*h <= 0 || *h > nodeopts.MaxHeapMB) {
		return c, fmt.Errorf("node_heap_mb: %d: want a heap limit in MB, 1 to %d", *h, nodeopts.MaxHeapMB)
	}
	if m := c.MemoryMax; m != nil && *m <= 0 {
		return c, fmt.Errorf("memory_max: %d: want a positive memory limit in bytes", *m)
	}
	return c, nil
}

// apply makes c hold for the service's next launches, and says what
// changed ("" when nothing).
func (s *service) apply(c restartChange) string {
	var said []string
	if c.NodeHeapMB != nil {
		was := nodeopts.HeapMB(s.nodeOptions())
		s.mu.Lock()
		s.heapMB = *c.NodeHeapMB
		s.mu.Unlock()
		from := "node's default"
		if was > 0 {
			from = fmt.Sprint(was)
		}
		said = append(said, fmt.Sprintf("heap %s → %d MB", from, *c.NodeHeapMB))
	}
	if c.MemoryMax != nil {
		s.mu.Lock()
		was := s.memoryMax
		s.memoryMax = *c.MemoryMax
		s.mu.Unlock()
		from := "none"
		if was > 0 {
			from = sizeString(was)
		}
		said = append(said, "memory limit "+from+" → "+sizeString(*c.MemoryMax))
	}
	return strings.Join(said, ", ")
}

// sizeString is n bytes in MiB when it is whole MiB.
func sizeString(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// restart asks the loop for a restart now (an operator's request), with
// c's change for this launch and the later ones. A parked service is
// started again.
func (s *service) restart(c restartChange) error {
	p := s.pod
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	if err := p.restartable(); err != nil {
		return err
	}
	detail := "restart requested by an operator"
	if s.parked {
		detail = "revived by an operator (" + s.status().State + ")"
		s.parked = false
	}
	if change := s.apply(c); change != "" {
		detail += ": " + change
	}
	// On record before the loop can act on it (and write its restart).
	p.event("restart_requested", events.Info, s.name, detail)
	if s.status().State == statePending {
		// Not launched yet (waiting for the services it comes after):
		// its launch, which reads the change, is the restart. Woken, the
		// loop would stop that first launch at once.
		return nil
	}
	select {
	case s.restartReq <- struct{}{}:
	default: // one is already pending: it launches with the change
	}
	return nil
}
