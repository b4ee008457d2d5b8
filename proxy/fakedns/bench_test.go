package fakedns

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"
)

// BenchmarkDNSAnswer is one client asking A queries over loopback UDP, one
// at a time, as a stub resolver does: answers/s is the figure `make bench`
// reports beside the proxy's tunnels. Names cycle through 1000, so the
// pool is exercised on both its paths (new name, remembered name).
func BenchmarkDNSAnswer(b *testing.B) {
	fx := newDNSFixture(b)
	c := new(dns.Client)
	conn, err := c.Dial(fx.udp)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("n%d.wild.test.", i)
	}
	q := new(dns.Msg)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		q.SetQuestion(names[i%len(names)], dns.TypeA)
		r, _, err := c.ExchangeWithConn(q, conn)
		if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			b.Fatalf("query %d: %v, %v", i, r, err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "answers/s")
}
