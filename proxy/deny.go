package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

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

// hint is the denial's hint, from its reason's template in
// policies.Reasons: the detail is the proxy's, which for a policy's own
// denial is the policy's error.
func (dc *decision) hint() string { return dc.d.HintDetail(&dc.in, dc.detail) }

// status is the HTTP status of a denial, its reason's in
// policies.Reasons, unless the request could not be read: then the status
// an HTTP server answers it (serverStatus: 400, 431).
func (dc *decision) status() int {
	if dc.serverStatus != 0 {
		return dc.serverStatus
	}
	return dc.d.Reason.Status()
}

// denialResponse is dc's denial as an http.Response. Its status line
// carries the reason and hint, since for a refused CONNECT that line is
// all most clients show (curl -v, Python's "Tunnel connection failed",
// Node's statusMessage, Go's error). A git smart-HTTP request gets the
// denial as text/plain, which git prints line by line as "remote: ...";
// it drops any other body. Every other client gets the JSON Denial.
func (dc *decision) denialResponse(req *http.Request) *http.Response {
	status := dc.status()
	d := dc.denial()
	h := http.Header{}
	h.Set(ReasonHeader, d.Reason)
	var body []byte
	if op, _ := policies.GitOperation(&dc.in.Request); op != "" {
		h.Set("Content-Type", "text/plain; charset=utf-8")
		body = gitBody(d)
	} else {
		h.Set("Content-Type", "application/json")
		body, _ = json.Marshal(d)
		body = append(body, '\n')
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return &http.Response{
		Status:        strconv.Itoa(status) + " " + reasonPhrase(d),
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

// maxReasonPhrase bounds a status line's reason phrase: clients read the
// line whole (Python up to 64 KiB, Node's parser within its 16 KiB of
// head), and a terminal shows it on one line.
const maxReasonPhrase = 400

// reasonPhrase is "airlock: REASON: HINT" as RFC 9110's reason-phrase
// allows it (tabs, spaces and visible characters): printable ASCII only,
// so that no client's parser refuses the line, and at most
// maxReasonPhrase bytes.
func reasonPhrase(d Denial) string {
	p := []byte(oneLine("airlock: " + d.Reason + ": " + d.Hint))
	for i, c := range p {
		if c < ' ' || c > '~' {
			p[i] = '?'
		}
	}
	if len(p) > maxReasonPhrase {
		p = append(p[:maxReasonPhrase-3], "..."...)
	}
	return string(p)
}

// oneLine is s with its line breaks and tabs as spaces, and an ellipsis
// spelt in ASCII.
var oneLine = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ", "\t", " ", "…", "...").Replace

// gitBody is the denial as the lines git shows its user, each prefixed
// "remote: " by git: the hint, then the fields an agent matches on.
func gitBody(d Denial) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "airlock: %s\n", oneLine(d.Hint))
	fmt.Fprintf(&b, "airlock: reason=%s rule=%q binary=%s sandbox=%s preset=%s\n", d.Reason, d.Rule, d.Binary, d.Sandbox, d.Preset)
	return b.Bytes()
}
