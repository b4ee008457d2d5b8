package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/airlock-sandbox/airlock/policies"
)

// Denial is the JSON body of every 403 (and 421): enough for an agent to
// tell whether its binary or its endpoint failed, and what to change.
type Denial struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
	Rule   string `json:"rule,omitempty"`
	Binary string `json:"binary,omitempty"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	Hint   string `json:"hint"`
	// Sandbox and Preset say who the connection was decided as: on a
	// pod's shared listener, the service its process is in (the pod
	// itself when the process is in none).
	Sandbox string `json:"sandbox,omitempty"`
	Preset  string `json:"preset,omitempty"`
}

// ReasonHeader carries the reason code on every denial.
const ReasonHeader = "X-Airlock-Reason"

func (dc *decision) denial() Denial {
	r := &dc.in.Request
	return Denial{
		Error:   "airlock denied this " + map[bool]string{true: "connection", false: "request"}[r.Phase == "connect"],
		Reason:  string(dc.d.Reason),
		Rule:    dc.d.Rule,
		Binary:  dc.in.Process.Exe,
		Host:    r.Host,
		Port:    r.Port,
		Method:  r.Method,
		Path:    r.Path,
		Hint:    dc.hint(),
		Sandbox: dc.in.Sandbox.ID,
		Preset:  dc.in.Sandbox.Preset,
	}
}

// status is the HTTP status of a denial: 400 when the request's framing
// cannot be trusted, 421 when the request names another host than its
// tunnel, 502 when the upstream failed, 503 when the sandbox is at its
// connection limit or its decision could not be audited, 403 otherwise.
func (dc *decision) status() int {
	if dc.badRequest {
		return http.StatusBadRequest
	}
	switch dc.d.Reason {
	case policies.ReasonHostMismatch:
		return http.StatusMisdirectedRequest
	case policies.ReasonUpstreamError:
		return http.StatusBadGateway
	case policies.ReasonConnectionLimit, policies.ReasonAuditUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusForbidden
}

// denialResponse is dc's denial as an http.Response.
func (dc *decision) denialResponse(req *http.Request) *http.Response {
	status := dc.status()
	body, _ := json.Marshal(dc.denial())
	body = append(body, '\n')
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(ReasonHeader, string(dc.d.Reason))
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return &http.Response{
		Status:        strconv.Itoa(status) + " " + http.StatusText(status),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
