package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// Seeds live in testdata/fuzz/<FuzzName>/ and run with every `go test`;
// `make fuzz` explores beyond them.

// A CONNECT request-target is refused, or read as exactly the host and
// port of its authority form (RFC 9110 9.3.6: host ":" port, port all
// digits), and the proxy's decision is the policy's for that host and port
// as `airlock policy eval` reads them. A target that is not host:port is
// never allowed.
func FuzzConnectTarget(f *testing.F) {
	fx := newFuzzFixture(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, target string) {
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("CONNECT " + target + " HTTP/1.1\r\nHost: x\r\n\r\n")))
		if err != nil {
			return // net/http answers 400 itself
		}
		req, why := connectTarget(r.RequestURI)
		oracleHost, oraclePort, ok := authority(target)
		if why != "" {
			if ok && r.RequestURI == target {
				if _, err := policies.CanonicalHost(oracleHost); err == nil && oraclePort >= 1 && oraclePort <= 65535 {
					t.Fatalf("CONNECT %q refused (%s), but it is host %q port %d", target, why, oracleHost, oraclePort)
				}
			}
			return
		}
		got := fx.p.decide(ctx, fx.cc, req).d
		if !ok || r.RequestURI != target {
			if got.Allow || got.Reason != policies.ReasonInvalidRequest {
				t.Fatalf("CONNECT %q, not host:port, read as %s:%d and decided %+v", target, req.Host, req.Port, got)
			}
			return
		}
		if req.Host != oracleHost || req.Port != oraclePort || req.Phase != policies.PhaseConnect {
			t.Fatalf("CONNECT %q read as %+v, want host %q port %d", target, req, oracleHost, oraclePort)
		}
		want := fx.eval(policies.Request{Phase: policies.PhaseConnect, Host: oracleHost, Port: oraclePort})
		if got.Allow != want.Allow || got.Reason != want.Reason || got.Rule != want.Rule {
			t.Fatalf("CONNECT %q: proxy decided %+v, policy eval %+v", target, got, want)
		}
	})
}

// authority splits an authority-form target the way RFC 9110 spells it,
// independently of the proxy: a host (an IPv6 literal in brackets) and a
// port of digits only.
func authority(target string) (host string, port int, ok bool) {
	i := strings.LastIndexByte(target, ':')
	if i < 0 || i == len(target)-1 {
		return "", 0, false
	}
	host, digits := target[:i], target[i+1:]
	port, err := strconv.Atoi(digits)
	if err != nil || strings.Trim(digits, "0123456789") != "" {
		return "", 0, false
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
		if !strings.Contains(host, ":") {
			return "", 0, false
		}
	} else if strings.ContainsAny(host, ":[]") {
		return "", 0, false
	}
	return host, port, host != ""
}

// Every audit field is written as slog's JSON handler writes it, and the
// line is one line of valid JSON whose fields decode to the values the
// sandbox sent (each byte that is not UTF-8 as U+FFFD): no value can split
// a line or forge a field.
func FuzzAuditLine(f *testing.F) {
	noBuiltins := &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey) {
			return slog.Attr{}
		}
		return a
	}}
	f.Fuzz(func(t *testing.T, host, path, exe, detail string) {
		for _, s := range []string{host, path, exe, detail} {
			var want bytes.Buffer
			slog.New(slog.NewJSONHandler(&want, noBuiltins)).LogAttrs(context.Background(), slog.LevelInfo, "", slog.String("k", s))
			got := append([]byte{'{'}, jsonString(nil, "k", s)[1:]...)
			got = append(got, "}\n"...)
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("jsonString(%q) = %s, slog writes %s", s, got, want.Bytes())
			}
		}
		dc := &decision{start: time.Now()}
		dc.in.Sandbox = policies.Sandbox{ID: "fuzz", Preset: "fuzz"}
		dc.in.Process = policies.Process{PID: 1, Exe: exe}
		dc.in.Request = policies.Request{Phase: policies.PhaseRequest, Host: host, Port: 443, Method: "GET", Path: path}
		dc.d = policies.Decision{Reason: policies.ReasonPathNotAllowed}
		dc.detail = detail
		var line bytes.Buffer
		(&Proxy{audit: newAuditLog(&line, nil)}).record(dc, 403, 0, 0)
		if bytes.IndexByte(line.Bytes(), '\n') != line.Len()-1 {
			t.Fatalf("audit line is not one line: %q", line.String())
		}
		var fields map[string]any
		if err := json.Unmarshal(line.Bytes(), &fields); err != nil {
			t.Fatalf("audit line %q: %v", line.String(), err)
		}
		for key, sent := range map[string]string{"host": host, "path": path, "binary": exe, "detail": detail} {
			if key == "detail" && sent == "" {
				continue // omitted when empty
			}
			if got, want := fields[key], string([]rune(sent)); got != want {
				t.Fatalf("audit %s decodes to %q, want %q (sent %q)", key, got, want, sent)
			}
		}
		if fields["msg"] != AuditMessage || fields["decision"] != "deny" || fields["reason"] != string(policies.ReasonPathNotAllowed) {
			t.Fatalf("audit line %s: fields forged or lost", line.String())
		}
	})
}
