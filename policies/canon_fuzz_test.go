package policies

import (
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// Seeds live in testdata/fuzz/<FuzzName>/ and run with every `go test`;
// `make fuzz` explores beyond them.

// A host is refused as invalid_request or canonicalised to a spelling that
// is its own canonical form, lower case, without a trailing dot, and never
// a numeric IPv4 spelling left as a name.
func FuzzCanonicalHost(f *testing.F) {
	f.Fuzz(func(t *testing.T, host string) {
		c, err := CanonicalHost(host)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("CanonicalHost(%q) error %v is not ErrInvalidRequest", host, err)
			}
			return
		}
		again, err := CanonicalHost(c)
		if err != nil || again != c {
			t.Fatalf("CanonicalHost(%q) = %q, but CanonicalHost(%q) = %q, %v: not idempotent", host, c, c, again, err)
		}
		if c == "" || c != strings.ToLower(c) || strings.HasSuffix(c, ".") {
			t.Fatalf("CanonicalHost(%q) = %q: not lower case without a trailing dot", host, c)
		}
		if strings.ContainsFunc(c, func(r rune) bool { return !strings.ContainsRune("abcdefghijklmnopqrstuvwxyz0123456789-_.:", r) }) {
			t.Fatalf("CanonicalHost(%q) = %q: not ASCII letters, digits, '-', '_', '.' or ':'", host, c)
		}
		if a, err := netip.ParseAddr(c); err == nil {
			if a.Is4In6() || a.String() != c {
				t.Fatalf("CanonicalHost(%q) = %q: an address not in its canonical form", host, c)
			}
			return
		}
		if _, numeric, _ := parseInetAton(c); numeric {
			t.Fatalf("CanonicalHost(%q) = %q: a numeric IPv4 spelling passed as a name", host, c)
		}
	})
}

// A path is refused as invalid_request or canonicalised to an absolute path
// with no dot-segment, no empty segment and no control character or
// backslash, which canonicalises to itself. A '%' left by decoding (the
// path held %25) is the one exception to idempotence: decoding is done once,
// and a second pass would decode again (Canonicalize refuses escaped escapes
// before the policy sees them).
func FuzzCanonicalPath(f *testing.F) {
	f.Fuzz(func(t *testing.T, p string) {
		c, err := CanonicalPath(p)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("CanonicalPath(%q) error %v is not ErrInvalidRequest", p, err)
			}
			return
		}
		if c == "*" {
			if p != "*" {
				t.Fatalf("CanonicalPath(%q) = \"*\"", p)
			}
			return
		}
		if !strings.HasPrefix(c, "/") {
			t.Fatalf("CanonicalPath(%q) = %q: not absolute", p, c)
		}
		segs := strings.Split(c[1:], "/")
		for i, s := range segs {
			if s == "." || s == ".." || (s == "" && i != len(segs)-1) {
				t.Fatalf("CanonicalPath(%q) = %q: segment %d is %q", p, c, i, s)
			}
		}
		if strings.ContainsFunc(c, func(r rune) bool { return r < ' ' || r == 0x7f || r == '\\' }) {
			t.Fatalf("CanonicalPath(%q) = %q: a control character or backslash", p, c)
		}
		if strings.Contains(c, "%") {
			return
		}
		if again, err := CanonicalPath(c); err != nil || again != c {
			t.Fatalf("CanonicalPath(%q) = %q, but CanonicalPath(%q) = %q, %v: not idempotent", p, c, c, again, err)
		}
	})
}

// A path Canonicalize lets through (neither the ambiguity refusal nor the
// canonicaliser refuses it) has no dot-segment in any reading a server may
// make of it, and the policy decided on the one reading that needs no
// second decoding.
func FuzzAmbiguousPath(f *testing.F) {
	f.Fuzz(func(t *testing.T, escaped string) {
		in := Input{Request: Request{Phase: PhaseRequest, Host: "fuzz.test", Port: 443, Method: "GET", Path: escaped}}
		if err := in.Canonicalize(); err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("Canonicalize(path %q) error %v is not ErrInvalidRequest", escaped, err)
			}
			return
		}
		for _, r := range testutil.ServerReadings(escaped) {
			if seg := testutil.DotSegment(r); seg != "" {
				t.Fatalf("path %q passed (policy reads %q) but a server reading %q has the dot-segment %q", escaped, in.Request.Path, r, seg)
			}
		}
		once, _ := url.PathUnescape(escaped)
		if twice, err := url.PathUnescape(once); err == nil && twice != once {
			t.Fatalf("path %q passed (policy reads %q) but decodes again to %q behind a second decoding hop", escaped, in.Request.Path, twice)
		}
	})
}
