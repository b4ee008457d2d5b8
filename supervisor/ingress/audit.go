package ingress

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// AuditMessage is the msg of the one line each request writes when it
// ends, allowed or refused (as the proxy's CANONICAL-PROXY-DECISION is for
// egress).
const AuditMessage = "CANONICAL-INGRESS"

// AuditAdmitMessage is the msg of the line an allowed request writes
// before it is forwarded: no request reaches the service that is not on
// record (as egress's decision line is written before its dial). Its
// status is 0; the request's AuditMessage line follows when it ends.
const AuditAdmitMessage = "CANONICAL-INGRESS-ADMIT"

// Reasons, shared by the 401/502 bodies and the audit lines.
const (
	ReasonAllowed       = "ingress_allowed"
	ReasonKeyMissing    = "ingress_key_missing"
	ReasonKeyUnknown    = "ingress_key_unknown"
	ReasonUpstreamError = "ingress_upstream_error"
	ReasonClientGone    = "ingress_client_gone" // audit only: the client left before the service answered
	ReasonShuttingDown  = "ingress_shutting_down"
	// ReasonKeysUnavailable (503): the key file changed into one that
	// cannot be used; no key is accepted until it is mended.
	ReasonKeysUnavailable = "ingress_keys_unavailable"
	// ReasonAuditUnavailable: the admit line could not be written, and
	// the pod's audit_failure is closed (503).
	ReasonAuditUnavailable = "ingress_audit_unavailable"
	// ReasonEvicted: connections closed unanswered to make room for new
	// ones, none of them with a request admitted (connLimit), summed up
	// in one line per refusalInterval (status 0, their count); and (503)
	// a keyed request whose connection was evicted as it arrived, which
	// is not forwarded.
	ReasonEvicted = "ingress_connection_evicted"
)

// UnknownOperator is the operator of a request whose key named none.
const UnknownOperator = "unknown"

// auditLine is one request. It has no field a key could reach: the key
// headers are read only to find the operator, and the path is logged
// without its query.
type auditLine struct {
	Msg        string  `json:"msg"`
	TS         string  `json:"ts"`
	Route      string  `json:"route"`
	Service    string  `json:"service"`
	Operator   string  `json:"operator"`
	Remote     string  `json:"remote"`
	Method     string  `json:"method"`
	Path       string  `json:"path"`
	Status     int     `json:"status"`
	Allowed    bool    `json:"allowed"`
	Reason     string  `json:"reason"`
	DurationMS float64 `json:"duration_ms"`
	// Count is how many refusals a summary line stands for (refusalLines),
	// none of them written one by one.
	Count int64 `json:"count,omitempty"`
}

// Refusals for want of a key are written one by one up to refusalLines per
// refusalInterval, then counted and summed up in one line per reason when
// the interval ends (flood.Counter): anyone who reaches the port may send
// them, as fast as it likes, into a log the pod's proxy shares.
const refusalLines = 64

// refusalInterval is a variable for the tests, which need an interval that
// cannot end before they look.
var refusalInterval = time.Second

// auditLog writes each line with one Write, never interleaved.
type auditLog struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *auditLog) write(a *auditLine, start time.Time) error {
	a.Msg = AuditMessage
	return l.put(a, start)
}

// admit writes an allowed request's line before it is forwarded: a copy
// of a as it stands, with no status yet.
func (l *auditLog) admit(a *auditLine, start time.Time) error {
	c := *a
	c.Msg = AuditAdmitMessage
	return l.put(&c, start)
}

func (l *auditLog) put(a *auditLine, start time.Time) error {
	a.TS = start.UTC().Format(time.RFC3339Nano)
	a.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err = l.w.Write(b)
	return err
}
