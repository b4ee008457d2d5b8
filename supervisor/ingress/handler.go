package ingress

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cginame"
	"github.com/airlock-sandbox/airlock/internal/clip"
)

// OperatorHeader tells the service which operator called. A client's own
// is removed: only the ingress sets it.
const OperatorHeader = "X-Airlock-Operator"

// keyHeaders carry an operator's key; they never reach the service.
var keyHeaders = []string{"Authorization", "X-Api-Key"}

// ownHeaders are the headers the ingress sets or takes away: who called
// (the operator, and the client's address, which it sets as
// X-Forwarded-For), and the key. A client's of these, or of any
// X-Forwarded- header, would be believed by the service as the ingress's.
var ownHeaders = append([]string{OperatorHeader, "Forwarded", "X-Real-Ip",
	// The client's address under the names applications read before
	// X-Forwarded-For (PHP's HTTP_CLIENT_IP, Rails' CLIENT_IP once the
	// loopback in X-Forwarded-For is taken for a trusted proxy, CDNs').
	"Client-Ip", "X-Client-Ip", "True-Client-Ip", "X-Cluster-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip",
	"X-Original-Forwarded-For"}, keyHeaders...)

// forwardedPrefix begins the proxies' headers about the client
// (X-Forwarded-For, -Host, -Proto, -Port, -Prefix...).
const forwardedPrefix = "X-Forwarded-"

// ownHeader says whether a header name is, under a service's reading of
// it, one the ingress sets or takes away. A CGI-style service (PHP, WSGI,
// Rack behind lighttpd or FastCGI) reads X.Airlock.Operator,
// X_Airlock_Operator and X-Airlock-Operator alike, and the last of them
// written wins: Go writes headers sorted by name, and '.' (0x2E) and '_'
// (0x5F) sort after '-' (0x2D), so the client's would follow the
// ingress's.
func ownHeader(name string) bool {
	return cginame.OneOf(name, ownHeaders) || cginame.HasPrefix(name, forwardedPrefix)
}

// Refusal is the JSON body of a 401 or 502.
type Refusal struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
	Route  string `json:"route"`
}

type lineKey struct{}

// maxLoggedPath is as much of a request's path as its audit line holds:
// anyone who reaches the port, with no key, writes a line per request.
const maxLoggedPath = 1 << 10

// ServeHTTP authenticates the request, forwards it, and audits it: one
// line, written when the request ends, whatever way it ends (a refusal, an
// upstream failure, a stream the client left).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	line := &auditLine{
		Route: s.route.Name, Service: s.route.Service, Operator: UnknownOperator,
		Remote: r.RemoteAddr, Method: r.Method, Path: clip.String(r.URL.Path, maxLoggedPath),
	}
	sw := &statusWriter{ResponseWriter: w}
	// Its connection is not evicted while the request is checked; it is
	// evictable again if the request is refused, and never once admitted.
	conn := connOf(r.Context())
	conn.check()
	defer conn.checked()
	counted := s.begin()
	defer func() {
		line.Status = sw.final()
		s.record(line, start)
		if counted {
			s.reqs.Done()
		}
	}()
	if !counted {
		line.Reason = ReasonShuttingDown
		s.refuse(sw, http.StatusServiceUnavailable, line.Reason, "the ingress is shutting down")
		return
	}

	keys, err := s.currentKeys()
	if err != nil {
		line.Reason = ReasonKeysUnavailable
		s.refuse(sw, http.StatusServiceUnavailable, line.Reason, "the route's key file changed and cannot be used: no key is accepted until it is mended (the pod's log says why)")
		return
	}
	key, reason, msg := presentedKey(r.Header)
	if reason == "" {
		if op, ok := keys.Operator(key); ok {
			line.Operator, line.Allowed, line.Reason = op, true, ReasonAllowed
		} else {
			reason, msg = ReasonKeyUnknown, "the key is not one of this route's operator keys"
		}
	}
	if !line.Allowed {
		line.Reason = reason
		sw.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
		s.refuse(sw, http.StatusUnauthorized, reason, msg)
		return
	}
	if !conn.prove() {
		// Evicted between its header's arrival and this handler, or cut
		// as the route stops: the client has no connection left to be
		// answered on.
		line.Allowed, line.Reason = false, cmp.Or(conn.cutReason(), ReasonEvicted)
		s.refuse(sw, http.StatusServiceUnavailable, line.Reason, "the connection was closed to make room for new ones before its request was admitted")
		return
	}
	if err := s.audit.admit(line, start); err != nil {
		s.log.Error("ingress audit write failed", "err", err, "line", AuditAdmitMessage, "operator", line.Operator,
			"method", line.Method, "path", line.Path, "fail_open", s.failOpen)
		if !s.failOpen {
			line.Allowed, line.Reason = false, ReasonAuditUnavailable
			s.refuse(sw, http.StatusServiceUnavailable, line.Reason, "the audit log cannot be written: no request is let in unrecorded")
			return
		}
	}
	ctx, a := s.hold(r.Context(), key, line.Operator)
	defer s.drop(a)
	s.proxy.ServeHTTP(sw, r.WithContext(context.WithValue(ctx, lineKey{}, line)))
}

// record writes a request's line, unless it is a refusal for want of a key
// beyond the interval's lines, which is summed up when the interval ends.
func (s *Server) record(line *auditLine, start time.Time) {
	unkeyed := line.Status == http.StatusUnauthorized
	if unkeyed {
		if write, _ := s.unkeyed.Admit(line.Reason); !write {
			return
		}
	}
	err := s.audit.write(line, start)
	if unkeyed {
		s.unkeyed.Wrote(err)
	}
	if err != nil {
		s.log.Error("ingress audit write failed", "err", err, "operator", line.Operator,
			"method", line.Method, "path", line.Path, "status", line.Status, "reason", line.Reason)
	}
}

// presentedKey finds the key in `Authorization: Bearer KEY` or
// `X-Api-Key: KEY`. Both may be sent if they carry the same key; anything
// ambiguous (two different keys, a header given twice) is refused rather
// than guessed at.
func presentedKey(h http.Header) (key, reason, msg string) {
	auth, api := h.Values("Authorization"), h.Values("X-Api-Key")
	if len(auth) > 1 || len(api) > 1 {
		return "", ReasonKeyUnknown, "more than one Authorization or X-Api-Key header"
	}
	var bearer, apiKey string
	if len(auth) == 1 {
		scheme, token, _ := strings.Cut(strings.TrimSpace(auth[0]), " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return "", ReasonKeyMissing, "Authorization is not a Bearer token; send `Authorization: Bearer KEY` or `X-Api-Key: KEY`"
		}
		bearer = strings.TrimSpace(token)
	}
	if len(api) == 1 {
		apiKey = strings.TrimSpace(api[0])
	}
	switch {
	case bearer != "" && apiKey != "" && bearer != apiKey:
		return "", ReasonKeyUnknown, "Authorization and X-Api-Key carry different keys"
	case bearer != "":
		return bearer, "", ""
	case apiKey != "":
		return apiKey, "", ""
	}
	return "", ReasonKeyMissing, "this route needs an operator key: `Authorization: Bearer KEY` or `X-Api-Key: KEY`"
}

func (s *Server) refuse(w http.ResponseWriter, status int, reason, msg string) {
	body, _ := json.Marshal(Refusal{Error: msg, Reason: reason, Route: s.route.Name})
	body = append(body, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	// The connection ends with the refusal: a client with no key holds
	// none open, with one of the route's connections, for the idle time.
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	w.Write(body)
	// Sent now, not when the handler has returned: its connection is
	// evictable again from then on (connLimit), and under a flood would
	// be closed before net/http flushed the answer.
	http.NewResponseController(w).Flush()
}

// newProxy forwards to the service's port on the pod's loopback through
// dial, passing streams on as they come (server-sent events) and switching
// protocols (WebSocket) as the service answers.
func (s *Server) newProxy(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *httputil.ReverseProxy {
	s.transport = &http.Transport{
		Proxy:               nil, // never an HTTP(S)_PROXY from the environment
		DialContext:         dial,
		DisableCompression:  true, // pass the service's encoding through untouched
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
	target := &url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.route.Port))}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			// Before the ingress sets its own: a spelling of them the
			// client sent could be read as theirs, and win.
			for name := range pr.Out.Header {
				if ownHeader(name) {
					delete(pr.Out.Header, name)
				}
			}
			pr.SetXForwarded()
			pr.Out.Header.Set(OperatorHeader, pr.In.Context().Value(lineKey{}).(*auditLine).Operator)
		},
		Transport:     s.transport,
		FlushInterval: -1,
		ErrorLog:      s.srv.ErrorLog,
		ErrorHandler:  s.upstreamError,
	}
}

func (s *Server) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	line := r.Context().Value(lineKey{}).(*auditLine)
	line.Reason = ReasonUpstreamError
	if errors.Is(r.Context().Err(), context.Canceled) {
		line.Reason = ReasonClientGone
	}
	s.log.Warn("ingress upstream failed", "err", err, "operator", line.Operator, "method", line.Method, "path", line.Path, "reason", line.Reason)
	s.refuse(w, http.StatusBadGateway, ReasonUpstreamError, "service "+s.route.Service+" on port "+strconv.Itoa(s.route.Port)+" did not answer: "+err.Error())
}

// statusWriter records the status the client got. A protocol switch does
// not go through WriteHeader: the proxy hijacks the connection and writes
// the 101 itself, so a hijack is what records it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Hijack hands the connection to the proxy for a switched protocol. The
// request is then no longer one http.Server.Shutdown waits for; it stays
// counted until its handler returns (the WebSocket closed or cut).
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.status = http.StatusSwitchingProtocols
	}
	return c, rw, err
}

// Unwrap lets http.ResponseController flush each event through.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) final() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
