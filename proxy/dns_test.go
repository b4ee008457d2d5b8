package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy/certs"
	"github.com/airlock-sandbox/airlock/proxy/egress"
	"github.com/airlock-sandbox/airlock/proxy/fakedns"
	"github.com/miekg/dns"
)

// denyAll is a Decider for a proxy whose DNS alone is tested.
type denyAll struct{}

func (denyAll) Decide(context.Context, *policies.Input) policies.Decision { return policies.Decision{} }

// dnsProxy is a Proxy answering one sandbox's DNS on loopback UDP and TCP.
type dnsProxy struct {
	p        *Proxy
	udp, tcp string
	served   chan error
}

// denyingProxy is a Proxy whose policy denies everything, with its own CA
// and an SSRF guard that allows nothing but the public internet; cfg gives
// the rest.
func denyingProxy(t *testing.T, cfg Config) *Proxy {
	t.Helper()
	ca, err := certs.LoadOrCreate(t.TempDir(), 16)
	if err != nil {
		t.Fatal(err)
	}
	guard, err := egress.New(egress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Decider, cfg.CA, cfg.Guard, cfg.Metrics, cfg.Logger = denyAll{}, ca, guard, NewMetrics(ca), slog.New(slog.DiscardHandler)
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newDNSProxy(t *testing.T, audit io.Writer, failOpen bool, sb Sandbox) *dnsProxy {
	t.Helper()
	p := denyingProxy(t, Config{Audit: audit, AuditFailOpen: failOpen})
	pool, err := fakedns.NewPool(fakedns.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dnsProxy{p: p, udp: pc.LocalAddr().String(), tcp: ln.Addr().String(), served: make(chan error, 1)}
	go func() { d.served <- p.ServeDNS(sb, pool, []net.PacketConn{pc}, []net.Listener{ln}) }()
	t.Cleanup(func() { d.shutdown(t) })
	return d
}

func (d *dnsProxy) shutdown(t *testing.T) {
	t.Helper()
	if d.served == nil {
		return
	}
	if err := d.p.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-d.served; err != nil {
		t.Errorf("ServeDNS after Shutdown = %v; want nil", err)
	}
	d.served = nil
}

func (d *dnsProxy) ask(t *testing.T, network, name string, qtype uint16) int {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	addr := d.udp
	if network == "tcp" {
		addr = d.tcp
	}
	r, _, err := (&dns.Client{Net: network}).Exchange(q, addr)
	if err != nil {
		t.Fatalf("%s %s %s: %v", network, dns.Type(qtype), name, err)
	}
	return r.Rcode
}

func (d *dnsProxy) metrics(t *testing.T) string {
	t.Helper()
	rec := httptest.NewRecorder()
	d.p.cfg.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

var sandboxDNS = Sandbox{ID: "coder-1", Kind: "coder", Preset: "coder",
	Reachable: func(host string) bool { return host == "api.allowed.test" }}

// Every refusal is on an audit line of its own, with the sandbox, the
// name, the query type, the rcode and the reason; answers are counted by
// rcode; Shutdown ends ServeDNS.
func TestServeDNSAuditsRefusals(t *testing.T) {
	var audit testutil.Buffer
	d := newDNSProxy(t, &audit, false, sandboxDNS)
	for _, q := range []struct {
		network, name string
		qtype         uint16
		rcode         int
	}{
		{"udp", "api.allowed.test.", dns.TypeA, dns.RcodeSuccess},
		{"tcp", "api.allowed.test.", dns.TypeAAAA, dns.RcodeSuccess},
		{"udp", "Blocked.test.", dns.TypeA, dns.RcodeNameError},
		{"tcp", "api.allowed.test.", dns.TypeTXT, dns.RcodeRefused},
	} {
		if got := d.ask(t, q.network, q.name, q.qtype); got != q.rcode {
			t.Errorf("%s %s %s = %s; want %s", q.network, dns.Type(q.qtype), q.name, dns.RcodeToString[got], dns.RcodeToString[q.rcode])
		}
	}
	lines := auditLines(t, []byte(audit.String()))
	want := []map[string]any{
		{"level": "WARN", "msg": DNSAuditMessage, "sandbox": "coder-1", "kind": "coder", "preset": "coder",
			"name": "blocked.test", "qtype": "A", "rcode": "NXDOMAIN", "reason": "host_not_allowed"},
		{"level": "WARN", "msg": DNSAuditMessage, "sandbox": "coder-1", "kind": "coder", "preset": "coder",
			"name": "api.allowed.test", "qtype": "TXT", "rcode": "REFUSED", "reason": "dns_query_refused", "detail": "query type TXT"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d audit lines; want %d:\n%s", len(lines), len(want), []byte(audit.String()))
	}
	for i, w := range want {
		for k, v := range w {
			if lines[i][k] != v {
				t.Errorf("line %d: %s = %v; want %v (%v)", i, k, lines[i][k], v, lines[i])
			}
		}
		if id, _ := lines[i]["id"].(string); id == "" || lines[i]["detail"] == "" || lines[i]["time"] == "" {
			t.Errorf("line %d: %v lacks an id, a time or a detail", i, lines[i])
		}
	}
	if lines[0]["id"] == lines[1]["id"] {
		t.Errorf("two refusals share id %v", lines[0]["id"])
	}
	m := d.metrics(t)
	for _, w := range []string{
		`airlock_proxy_dns_answers_total{rcode="NOERROR",sandbox="coder-1"} 2`,
		`airlock_proxy_dns_answers_total{rcode="NXDOMAIN",sandbox="coder-1"} 1`,
		`airlock_proxy_dns_answers_total{rcode="REFUSED",sandbox="coder-1"} 1`,
	} {
		if !strings.Contains(m, w) {
			t.Errorf("metrics lack %s", w)
		}
	}
	d.shutdown(t)
	if _, _, err := new(dns.Client).Exchange(new(dns.Msg).SetQuestion("api.allowed.test.", dns.TypeA), d.tcp); err == nil {
		t.Errorf("a TCP query after Shutdown was answered")
	}
}

// A refusal whose line cannot be written is not given: SERVFAIL, the
// failure counted; with --audit-failure=warn the refusal is given. Those
// of a flood too: past maxDNSLines, where they would be on record only in
// a summary line, they fail as their own lines do, and a sandbox cannot
// learn what its policy refuses by asking fast while nothing is written. A
// pod's answerer (no preset) leaves the preset out of the line.
func TestServeDNSAuditFailure(t *testing.T) {
	defer func(d time.Duration) { dnsFloodInterval = d }(dnsFloodInterval)
	dnsFloodInterval = time.Hour
	full := devFull(t)
	for _, failOpen := range []bool{false, true} {
		d := newDNSProxy(t, full, failOpen, sandboxDNS)
		want := dns.RcodeServerFailure
		if failOpen {
			want = dns.RcodeNameError
		}
		for i := range 2 * maxDNSLines {
			if got := d.ask(t, "udp", "blocked.test.", dns.TypeA); got != want {
				t.Fatalf("fail open %v: refusal %d with the audit log full = %s; want %s", failOpen, i+1, dns.RcodeToString[got], dns.RcodeToString[want])
			}
		}
		if got := d.ask(t, "udp", "api.allowed.test.", dns.TypeA); got != dns.RcodeSuccess {
			t.Errorf("fail open %v: an address with the audit log full = %s; want NOERROR (no line to write)", failOpen, dns.RcodeToString[got])
		}
		if m := d.metrics(t); !strings.Contains(m, fmt.Sprintf("airlock_proxy_audit_write_errors_total %d", maxDNSLines)) {
			t.Errorf("fail open %v: the write failure is not counted", failOpen)
		}
	}
	var audit testutil.Buffer
	pod := Sandbox{ID: "pod-1"}
	d := newDNSProxy(t, &audit, false, pod)
	if got := d.ask(t, "tcp", "any.name.test.", dns.TypeA); got != dns.RcodeSuccess {
		t.Errorf("without Reachable: %s; want NOERROR (every name resolves)", dns.RcodeToString[got])
	}
	d.ask(t, "tcp", "any.name.test.", dns.TypeSRV)
	if lines := auditLines(t, []byte(audit.String())); len(lines) != 1 || lines[0]["sandbox"] != "pod-1" || lines[0]["preset"] != nil || lines[0]["kind"] != nil {
		t.Errorf("a pod's refusal: %v; want one line with the sandbox and neither kind nor preset", lines)
	}
}

// ServeDNS after Shutdown serves nothing and closes what it was given.
func TestServeDNSAfterShutdown(t *testing.T) {
	d := newDNSProxy(t, io.Discard, false, sandboxDNS)
	d.ask(t, "udp", "api.allowed.test.", dns.TypeA) // serving
	d.shutdown(t)
	pool, _ := fakedns.NewPool(fakedns.PoolConfig{})
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.p.ServeDNS(sandboxDNS, pool, []net.PacketConn{pc}, nil); !errors.Is(err, fakedns.ErrServerClosed) {
		t.Errorf("ServeDNS after Shutdown = %v; want fakedns.ErrServerClosed", err)
	}
	if _, err := pc.WriteTo([]byte{0}, pc.LocalAddr()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("its socket: %v; want it closed", err)
	}
}

// A flood of refusals writes maxDNSLines lines one by one per interval;
// the rest are summed up, one line per rcode and reason carrying their
// count, and every refusal is still answered and counted in the metrics.
func TestServeDNSSummarisesRefusalFloods(t *testing.T) {
	defer func(d time.Duration) { dnsFloodInterval = d }(dnsFloodInterval)
	dnsFloodInterval = time.Hour // ends only when the server stops
	var audit testutil.Buffer
	d := newDNSProxy(t, &audit, false, sandboxDNS)
	const txt, nx = 3 * maxDNSLines, 20
	for range txt {
		if got := d.ask(t, "udp", "api.allowed.test.", dns.TypeTXT); got != dns.RcodeRefused {
			t.Fatalf("TXT = %s; want REFUSED", dns.RcodeToString[got])
		}
	}
	for range nx {
		if got := d.ask(t, "udp", "blocked.test.", dns.TypeA); got != dns.RcodeNameError {
			t.Fatalf("blocked.test = %s; want NXDOMAIN", dns.RcodeToString[got])
		}
	}
	if n := len(auditLines(t, []byte(audit.String()))); n != maxDNSLines {
		t.Errorf("%d audit lines for a flood of %d refusals; want maxDNSLines = %d", n, txt+nx, maxDNSLines)
	}
	d.shutdown(t)
	lines := auditLines(t, []byte(audit.String()))
	if len(lines) != maxDNSLines+2 {
		t.Fatalf("%d audit lines after the server stopped; want %d and one summary per rcode:\n%s", len(lines), maxDNSLines, []byte(audit.String()))
	}
	got := map[string]float64{}
	for _, l := range lines[maxDNSLines:] {
		if l["msg"] != DNSAuditMessage || l["sandbox"] != "coder-1" || l["name"] != nil || l["detail"] == "" {
			t.Errorf("summary line %v; want the sandbox's, with a detail and no name", l)
		}
		count, _ := l["count"].(float64)
		got[l["rcode"].(string)+" "+l["reason"].(string)] = count
	}
	want := map[string]float64{"REFUSED dns_query_refused": txt - maxDNSLines, "NXDOMAIN host_not_allowed": nx}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("summed up %v; want %v", got, want)
	}
	m := d.metrics(t)
	for _, w := range []string{
		fmt.Sprintf(`airlock_proxy_dns_answers_total{rcode="REFUSED",sandbox="coder-1"} %d`, txt),
		fmt.Sprintf(`airlock_proxy_dns_answers_total{rcode="NXDOMAIN",sandbox="coder-1"} %d`, nx),
	} {
		if !strings.Contains(m, w) {
			t.Errorf("metrics lack %s", w)
		}
	}
}

// An interval's end writes its summary while the server goes on: bursts
// of refusals are sent, unanswered reads, until one interval held more
// than maxDNSLines of them and its summary line appears.
func TestServeDNSSummaryAtIntervalEnd(t *testing.T) {
	defer func(d time.Duration) { dnsFloodInterval = d }(dnsFloodInterval)
	dnsFloodInterval = 50 * time.Millisecond
	var audit testutil.Buffer
	d := newDNSProxy(t, &audit, false, sandboxDNS)
	c, err := net.Dial("udp4", d.udp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	txt, err := new(dns.Msg).SetQuestion("api.allowed.test.", dns.TypeTXT).Pack()
	if err != nil {
		t.Fatal(err)
	}
	for burst := 0; !bytes.Contains([]byte(audit.String()), []byte(`"count":`)); burst++ {
		if burst == 1000 {
			t.Fatalf("no summary line after %d bursts of refusals", burst)
		}
		for range 2 * maxDNSLines {
			c.Write(txt)
		}
		buf := make([]byte, 512)
		for range 2 * maxDNSLines { // answered: the burst's lines are written
			c.SetReadDeadline(time.Now().Add(100 * time.Millisecond)) // some may have been dropped
			if _, err := c.Read(buf); err != nil {
				break
			}
		}
	}
}

// devFull is /dev/full, where every write fails: no space left.
func devFull(t *testing.T) *os.File {
	t.Helper()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { full.Close() })
	return full
}

// A refusal's line stays small whatever name the sandbox asks: a name of
// 253 backslashes, escaped by DNS's presentation format, quoted in the
// detail, then escaped as JSON, was 3.3 KB a line, at up to 64 lines a
// second from one sandbox. The name and the detail are cut, marked so.
func TestDNSRefusalLineIsBounded(t *testing.T) {
	var audit testutil.Buffer
	d := newDNSProxy(t, &audit, false, sandboxDNS)
	label := strings.Repeat(`\092`, 63) // 63 backslash bytes, as miekg/dns writes them
	name := label + "." + label + "." + label + "." + strings.Repeat(`\092`, 61) + "."
	d.ask(t, "udp", name, dns.TypeA)
	d.shutdown(t)
	line := strings.TrimSpace(audit.String())
	if len(line) > 2048 || !strings.Contains(line, "bytes)") {
		t.Fatalf("the refusal's line is %d bytes: %.300s…; want at most 2048, its name cut", len(line), line)
	}
}
