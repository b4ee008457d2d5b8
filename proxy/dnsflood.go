package proxy

import (
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// A sandbox's DNS refusals are written one by one up to maxDNSLines per
// dnsFloodInterval; past that they are counted, and summed up in one line
// per rcode and reason when the interval ends. A flood of queries would
// otherwise write tens of thousands of lines a second into the audit log
// every sandbox shares, each under its lock. Every refusal is still
// counted in the metrics as it is answered.
const maxDNSLines = 64

// dnsFloodInterval is a variable for the tests, which need an interval
// that cannot end before they look.
var dnsFloodInterval = time.Second

type dnsFloodKey struct {
	rcode  string
	reason policies.Reason
}
