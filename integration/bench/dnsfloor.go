package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"

	"github.com/miekg/dns"
)

var serveDNSFloor = flag.Bool("dns-floor", false, "internal: run as the DNS floor on fd 3 (the bench starts it)")

// The floor's rows, printed under the transparent table.
const (
	floorRate = "DNS floor answers/s"
	floorCPU  = "DNS floor CPU per answer"
	pathFloor = "floor"
)

// dnsFloor is the floor for the sandbox's DNS answerer, as go-relay is for
// the tunnels: the least a DNS server written with miekg/dns (the library
// airlock's answerer uses) can do, every A and AAAA query answered with one
// fixed synthetic address, no pool, policy, metrics or audit. The bench
// runs itself in this mode (-dns-floor, on the UDP socket it passes as fd
// 3), measures it with the same client as the transparent DNS rows, on
// loopback without the sandbox's redirect, and reads its CPU per answer.
func dnsFloor() {
	pc, err := net.FilePacketConn(os.NewFile(3, "dns-floor"))
	if err != nil {
		os.Exit(1)
	}
	answer := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		hdr := dns.RR_Header{Name: q.Question[0].Name, Class: dns.ClassINET, Ttl: 5}
		switch q.Question[0].Qtype {
		case dns.TypeA:
			hdr.Rrtype = dns.TypeA
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.IPv4(198, 18, 0, 1)})
		case dns.TypeAAAA:
			hdr.Rrtype = dns.TypeAAAA
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.ParseIP("fd61:6972:6c6b:5300::1")})
		}
		w.WriteMsg(m)
	})
	(&dns.Server{PacketConn: pc, Handler: answer}).ActivateAndServe()
	os.Exit(1)
}

// measureDNSFloor starts the floor and measures lookups against it, each
// client its own name: answers/s and the floor's CPU per answer.
func measureDNSFloor() (rate, cpuPerAnswer float64, err error) {
	self, err := os.Executable()
	if err != nil {
		return 0, 0, err
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	defer pc.Close()
	f, err := pc.(*net.UDPConn).File()
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	cmd := exec.Command(self, "-dns-floor")
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	addr := pc.LocalAddr().String()
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	// The socket is bound already: the first query waits in it until the
	// floor reads.
	if _, err := lookupSynthetic(r, benchHost); err != nil {
		return 0, 0, fmt.Errorf("dns floor on %s: %w", addr, err)
	}
	before := cpuTime(cmd)
	res := lookups(r, func(w int) string { return fmt.Sprintf("w%d.%s", w, benchHost) })
	spent := cpuTime(cmd) - before
	if res.err != nil {
		return 0, 0, res.err
	}
	return res.rate(), float64(spent.Microseconds()) / float64(res.ops), nil
}
