package fakedns

import (
	"fmt"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
	"github.com/miekg/dns"
)

// Refusal is an answer that is not an address: what the server reports
// (for the audit line) before it sends one.
type Refusal struct {
	// Name is the name asked for, canonical when it could be
	// canonicalised (the spelling rules are matched against), else as
	// asked.
	Name  string
	QType string // "A", "TXT", "TYPE65535"
	Rcode string // "NXDOMAIN", "REFUSED", "SERVFAIL"
	// Reason is host_not_allowed for NXDOMAIN, dns_query_refused for a
	// query type or class never answered, dns_pool_exhausted (SERVFAIL)
	// for a name the pool has no address for (ErrExhausted),
	// invalid_request for a name that cannot be canonicalised.
	Reason policies.Reason
	Detail string
}

// answer builds the reply to req and, for a refusal, what to report.
func (s *Server) answer(req *dns.Msg) (*dns.Msg, *Refusal) {
	m := new(dns.Msg)
	m.SetReply(req)
	// The answerer stands in for a recursive resolver: RA keeps stub
	// resolvers from warning that recursion is unavailable.
	m.RecursionAvailable = true
	// The name once, pointed to after: a long name's answer stays within
	// the 512 bytes a UDP answer to a query without EDNS may have.
	m.Compress = true
	if req.Opcode != dns.OpcodeQuery {
		// NOTIFY passes miekg/dns's accept check; nothing else is served.
		m.SetRcode(req, dns.RcodeNotImplemented)
		return m, nil
	}
	if len(req.Question) != 1 {
		// miekg/dns's accept check reads the header's count only: a
		// message that ends after its header says one question and
		// holds none.
		m.SetRcode(req, dns.RcodeFormatError)
		return m, &Refusal{Rcode: dns.RcodeToString[dns.RcodeFormatError], Reason: policies.ReasonDNSQueryRefused,
			Detail: fmt.Sprintf("%d questions in the message, not one", len(req.Question))}
	}
	q := req.Question[0]
	qtype := dns.Type(q.Qtype).String()
	refuse := func(rcode int, reason policies.Reason, name, detail string) (*dns.Msg, *Refusal) {
		m.SetRcode(req, rcode)
		return m, &Refusal{Name: name, QType: qtype, Rcode: dns.RcodeToString[rcode], Reason: reason, Detail: detail}
	}
	asked := strings.TrimSuffix(q.Name, ".")
	name, err := policies.CanonicalHost(asked)
	// The type first: whatever the name, a TXT query is never answered,
	// and the line says so rather than how the name reads.
	if q.Qclass != dns.ClassINET {
		return refuse(dns.RcodeRefused, policies.ReasonDNSQueryRefused, orAsked(name, asked),
			fmt.Sprintf("query class %s", dns.Class(q.Qclass)))
	}
	if q.Qtype != dns.TypeA && q.Qtype != dns.TypeAAAA {
		return refuse(dns.RcodeRefused, policies.ReasonDNSQueryRefused, orAsked(name, asked),
			fmt.Sprintf("query type %s", qtype))
	}
	if err != nil {
		// REFUSED, not FORMERR: the message is well formed, and the name
		// may be a valid DNS name (an escaped dot, a '*' label); it is
		// the policy that cannot read it one way only, as a CONNECT to it
		// would be refused invalid_request.
		return refuse(dns.RcodeRefused, policies.ReasonInvalidRequest, asked, err.Error())
	}
	if s.reachable != nil && !s.reachable(name) {
		// No SOA in the answer: the denial is not cached (RFC 2308), so
		// a reloaded policy that allows the name is seen at once.
		return refuse(dns.RcodeNameError, policies.ReasonHostNotAllowed, name,
			"no rule of the sandbox's policy names this host")
	}
	hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: s.ttl}
	a, err := s.pool.Addr(name, q.Qtype == dns.TypeAAAA)
	if err != nil {
		// Fail closed: no address rather than one a client may still
		// hold for another name.
		return refuse(dns.RcodeServerFailure, policies.ReasonDNSPoolExhausted, name, err.Error())
	}
	if q.Qtype == dns.TypeA {
		m.Answer = []dns.RR{&dns.A{Hdr: hdr, A: a.AsSlice()}}
	} else {
		m.Answer = []dns.RR{&dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()}}
	}
	return m, nil
}

func orAsked(name, asked string) string {
	if name != "" {
		return name
	}
	return asked
}

// answerTTL is the TTL of an address record: well under the pool's, so a
// client's cache forgets an address long before the pool could (every use
// also refreshes it), and at most a minute, so a name the policy stops
// allowing is asked for again soon.
func answerTTL(pool time.Duration) uint32 {
	return uint32(max(min(pool/10, time.Minute), time.Second) / time.Second)
}
