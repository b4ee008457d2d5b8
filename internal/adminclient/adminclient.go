// Package adminclient speaks HTTP to a pod's admin socket (the supervisor's
// admin API): the CLI's status, restart and events, and the host
// watchdogs' restarts and probes of the pod's services (Dial), which sit
// below the supervisor and cannot import it.
package adminclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrNoPod: the pod's admin socket does not answer (no pod, or not this
// one): nothing can be said of its services.
var ErrNoPod = errors.New("the pod's admin socket does not answer")

// RestartPath is the API path that restarts service.
func RestartPath(service string) string {
	return "/v1/services/" + url.PathEscape(service) + "/restart"
}

// RestartOptions change a service's launches, from the restart on until
// the pod stops; a zero field changes nothing.
type RestartOptions struct {
	// NodeHeapMB sets --max-old-space-size in the service's NODE_OPTIONS.
	NodeHeapMB int `json:"node_heap_mb,omitempty"`
	// MemoryMax replaces the service's memory limit (bytes).
	MemoryMax int64 `json:"memory_max,omitempty"`
}

// Restart restarts service in the pod on socket now, with o's change. A
// service the pod had stopped supervising (given up on, or exited for
// good) is started again.
func Restart(ctx context.Context, socket, service string, o RestartOptions) error {
	body, err := json.Marshal(o)
	if err != nil {
		return err
	}
	resp, err := do(ctx, socket, http.MethodPost, RestartPath(service), bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Do sends one request to the pod on socket. A transport error comes back
// as it is (the caller says what no answer means to its user); an answer
// of status 300 or more is an error naming the request, the status and
// the API's own error.
func Do(ctx context.Context, socket, method, path string) (*http.Response, error) {
	return do(ctx, socket, method, path, nil)
}

func do(ctx context.Context, socket, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://pod"+path, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// A transport per request, so no kept connections: one kept idle
	// would stay open in both processes for good (a watchdog daemon asks
	// every round), with the transport's goroutines.
	client := &http.Client{Transport: &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialPod(ctx, socket)
		},
	}}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, statusError(method+" "+path, resp)
	}
	return resp, nil
}

// StatusError is an answer of the API that refuses the request. It wraps
// the errno the API named (a failed dial's), if any: errors.Is(err,
// syscall.ECONNREFUSED) holds as for a dial on the host.
type StatusError struct {
	// Status is the answer's HTTP status.
	Status int
	msg    string
	errno  syscall.Errno
}

func (e *StatusError) Error() string { return e.msg }

func (e *StatusError) Unwrap() error {
	if e.errno == 0 {
		return nil
	}
	return e.errno
}

// statusError is resp's refusal of what, with the API's own error.
func statusError(what string, resp *http.Response) *StatusError {
	var e struct{ Error, Rule, Errno string }
	json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e)
	msg := fmt.Sprintf("%s: %s: %s", what, resp.Status, e.Error)
	if e.Rule != "" {
		msg += " (rule " + e.Rule + ")"
	}
	return &StatusError{Status: resp.StatusCode, msg: msg, errno: errnoValue(e.Errno)}
}

// errnoValue is the errno named name (as unix.ErrnoName says it), 0 when
// none is.
func errnoValue(name string) syscall.Errno {
	if name == "" {
		return 0
	}
	for e := syscall.Errno(1); e < 256; e++ {
		if unix.ErrnoName(e) == name {
			return e
		}
	}
	return 0
}
