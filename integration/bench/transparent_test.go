package main

import (
	"context"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// The bench reads the proxy's CPU at each Ready line, lets the client go,
// and records each result as its rate and its CPU per operation.
func TestTransparentSamplesRead(t *testing.T) {
	tests := []struct {
		name       string
		lines      string
		wantValues map[string]map[string][]float64
		wantFailed map[string]map[string][]string
		wantGo     int
		wantErr    string
	}{
		{
			// 500 tunnels in 1s, while the proxy's CPU went 1.125s → 1.25s
			// (each reading adds 125ms): 250 µs each; the client's 0.5s
			// and the origin's 0.25s: 1500 µs each.
			name: "a result",
			lines: `{"step":"tunnels","path":"transparent","ready":true}
{"step":"tunnels","path":"transparent","ops":500,"elapsed":1000000000,"cpu":500000000}`,
			wantValues: map[string]map[string][]float64{
				"new TLS tunnels/s (+GET)": {"transparent": {500}},
				"proxy CPU per new tunnel": {"transparent": {250}},
				"ends' CPU per new tunnel": {"transparent": {1500}},
			},
			wantFailed: map[string]map[string][]string{},
			wantGo:     1,
		},
		{
			name: "a failure marks the rate and the CPU",
			lines: `{"step":"dns-same","path":"transparent","ready":true}
{"step":"dns-same","path":"transparent","err":"lookup w0.bench.test.: no such host"}
{"step":"keep-alive","path":"explicit","ready":true}
{"step":"keep-alive","path":"explicit","elapsed":1000000000}`,
			wantValues: map[string]map[string][]float64{},
			wantFailed: map[string]map[string][]string{
				"DNS answers/s, same names":       {"transparent": {"lookup w0.bench.test.: no such host"}},
				"proxy CPU per DNS answer, same":  {"transparent": {"lookup w0.bench.test.: no such host"}},
				"client CPU per DNS answer, same": {"transparent": {"lookup w0.bench.test.: no such host"}},
				"keep-alive req/s in a tunnel":    {"explicit": {"no operation completed"}},
				"proxy CPU per keep-alive req":    {"explicit": {"no operation completed"}},
				"ends' CPU per keep-alive req":    {"explicit": {"no operation completed"}},
			},
			wantGo: 2,
		},
		{name: "an unknown step", lines: `{"step":"bulk","path":"explicit","ops":1,"elapsed":1}`, wantErr: "unknown step", wantGo: 0},
		{name: "not JSON", lines: "panic: oops", wantErr: `"panic: oops"`, wantGo: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTransparentSamples()
			var goAhead strings.Builder
			proxy, origin := time.Second, time.Second
			err := s.read(strings.NewReader(tt.lines), &goAhead,
				func() time.Duration { proxy += 125 * time.Millisecond; return proxy },
				func() time.Duration { origin += 250 * time.Millisecond; return origin })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("read = %v, want an error with %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatalf("read = %v", err)
			}
			if got := strings.Count(goAhead.String(), "\n"); got != tt.wantGo {
				t.Errorf("go-aheads = %d, want %d", got, tt.wantGo)
			}
			if tt.wantErr != "" {
				return
			}
			if !reflect.DeepEqual(s.values, tt.wantValues) {
				t.Errorf("values = %v, want %v", s.values, tt.wantValues)
			}
			if !reflect.DeepEqual(s.failed, tt.wantFailed) {
				t.Errorf("failed = %v, want %v", s.failed, tt.wantFailed)
			}
		})
	}
}

// A lookup counts only if the proxy answered it: every address synthetic,
// and one IPv4 to dial.
func TestLookupSynthetic(t *testing.T) {
	answers := map[string][]netip.Addr{
		"both.test.":    {netip.MustParseAddr("198.18.0.7"), netip.MustParseAddr("fd61:6972:6c6b:5300::7")},
		"real.test.":    {netip.MustParseAddr("10.0.0.1")},
		"v6-only.test.": {netip.MustParseAddr("fd61:6972:6c6b:5300::8")},
	}
	server := serveDNS(t, answers)
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return net.Dial("udp", server)
	}}
	tests := []struct {
		host    string
		want    []netip.Addr
		wantErr string
	}{
		{host: "both.test", want: []netip.Addr{netip.MustParseAddr("198.18.0.7")}},
		{host: "real.test", wantErr: "10.0.0.1 is not a synthetic address"},
		{host: "v6-only.test", wantErr: "no IPv4 answer"},
		{host: "none.test", wantErr: "no such host"},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			got, err := lookupSynthetic(r, tt.host)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("lookupSynthetic(%q) = %v, %v, want an error with %q", tt.host, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || len(got) != len(tt.want) || got[0] != tt.want[0] {
				t.Fatalf("lookupSynthetic(%q) = %v, %v, want %v", tt.host, got, err, tt.want)
			}
		})
	}
}

// serveDNS answers A and AAAA queries over UDP on loopback from answers
// (NXDOMAIN for a name not in it) and returns its address.
func serveDNS(t *testing.T, answers map[string][]netip.Addr) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			addrs, known := answers[q.Name.String()]
			h.Response, h.Authoritative = true, true
			if !known {
				h.RCode = dnsmessage.RCodeNameError
			}
			b := dnsmessage.NewBuilder(nil, h)
			b.EnableCompression()
			b.StartQuestions()
			b.Question(q)
			b.StartAnswers()
			rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}
			for _, a := range addrs {
				switch {
				case a.Is4() && q.Type == dnsmessage.TypeA:
					b.AResource(rh, dnsmessage.AResource{A: a.As4()})
				case a.Is6() && q.Type == dnsmessage.TypeAAAA:
					b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
				}
			}
			out, err := b.Finish()
			if err == nil {
				pc.WriteTo(out, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

// A row shows each path's median and their ratio; a path whose rounds all
// failed says error, one with some failed rounds marks its median.
func TestTransparentPrint(t *testing.T) {
	s := newTransparentSamples()
	s.values = map[string]map[string][]float64{
		"new TLS tunnels/s (+GET)":     {"explicit": {800, 700, 900}, "transparent": {880, 770, 990}},
		"inspected keep-alive req/s":   {"explicit": {5000}, "transparent": {4000}},
		"DNS answers/s, unique names":  {"transparent": {9000}},
		"keep-alive req/s in a tunnel": {"explicit": {100}},
	}
	s.failed = map[string]map[string][]string{
		"inspected keep-alive req/s":   {"transparent": {"status 403 identity_unknown"}},
		"keep-alive req/s in a tunnel": {"transparent": {"EOF", "EOF"}},
	}
	var out strings.Builder
	s.print(&out)
	for _, want := range []string{
		"new TLS tunnels/s (+GET)                  800          880                  1.10x\n",
		"inspected keep-alive req/s               5000        4000*                  0.80x\n",
		"keep-alive req/s in a tunnel              100        error                      —\n",
		"DNS answers/s, unique names                 —         9000                      —\n",
		"* some rounds failed",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, out.String())
		}
	}
}
