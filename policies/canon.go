package policies

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// ErrInvalidRequest marks input that cannot be canonicalised. Such a request
// is denied (reason invalid_request): a name or path the engine cannot read
// the way the upstream will is never matched against a rule.
var ErrInvalidRequest = errors.New("invalid request")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
}

// idnaProfile maps Unicode names to punycode the way a resolver would, and
// rejects names that are not valid hostnames.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.StrictDomainName(false), // underscores appear in real service names
	idna.Transitional(false),
)

// CanonicalHost returns the one spelling of host that rules are matched
// against: lower case, no trailing dot, IDNA punycode, and IP literals in
// their canonical form (odd IPv4 spellings such as 127.1, 0x7f.0.0.1 and
// 2130706433 included, IPv4-mapped IPv6 unmapped). Anything else that could
// be read two ways is refused.
func CanonicalHost(host string) (string, error) {
	if host == "" {
		return "", invalid("empty host")
	}
	// IDNA would map the bytes to U+FFFD and punycode that: a name the
	// client never sent, and one that does not canonicalise again.
	if !utf8.ValidString(host) {
		return "", invalid("host %q is not UTF-8", host)
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	for _, c := range host {
		if c <= ' ' || c == 0x7f || strings.ContainsRune("%/\\@?#[]<>\"'`{}|^", c) {
			return "", invalid("host %q contains %q", host, c)
		}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", invalid("host %q has a zone", host)
		}
		return a.Unmap().String(), nil
	}
	host = strings.TrimSuffix(host, ".")
	if a, ok, err := parseInetAton(host); ok {
		if err != nil {
			return "", invalid("host %q: %v", host, err)
		}
		return a.String(), nil
	}
	ascii, err := idnaProfile.ToASCII(host)
	if err != nil {
		return "", invalid("host %q: %v", host, err)
	}
	ascii = strings.ToLower(ascii)
	if ascii == "" || len(ascii) > 253 {
		return "", invalid("host %q has an invalid length", host)
	}
	labels := strings.Split(ascii, ".")
	for _, label := range labels {
		if label == "" || len(label) > 63 {
			return "", invalid("host %q has an empty or over-long label", host)
		}
		// The IDNA profile lets through ASCII a hostname never holds
		// ('!', '*', ':', '=' ...): "a:1" or "*" would be matched as
		// names, and mean something else to a rule or a dialer.
		if strings.Trim(label, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return "", invalid("host %q has a character that is not a letter, digit, '-' or '_'", host)
		}
	}
	// A name ending in a number is read as an IPv4 address by browsers and
	// some resolvers (WHATWG URL); one that is not a valid address is
	// ambiguous, so it is refused rather than matched as a name.
	if isNumericPart(labels[len(labels)-1]) {
		return "", invalid("host %q ends in a number but is not an IPv4 address", host)
	}
	return ascii, nil
}

// parseInetAton reads the IPv4 spellings inet_aton(3) accepts (1 to 4 parts,
// each decimal, octal with a leading 0, or hex with 0x; the last part fills
// the remaining bytes). ok reports whether host looks numeric at all, so that
// a malformed number is an error rather than a hostname.
func parseInetAton(host string) (netip.Addr, bool, error) {
	parts := strings.Split(host, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false, nil
	}
	for _, p := range parts {
		if p == "" || !isNumericPart(p) {
			return netip.Addr{}, false, nil
		}
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 0, 32)
		if err != nil {
			return netip.Addr{}, true, fmt.Errorf("bad IPv4 part %q", p)
		}
		vals[i] = v
	}
	var n uint64
	for i, v := range vals[:len(vals)-1] {
		if v > 0xff {
			return netip.Addr{}, true, fmt.Errorf("IPv4 part %d out of range", i)
		}
		n |= v << (8 * (3 - i))
	}
	last := vals[len(vals)-1]
	if last >= 1<<(8*(5-len(vals))) {
		return netip.Addr{}, true, errors.New("IPv4 address out of range")
	}
	n |= last
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true, nil
}

func isNumericPart(p string) bool {
	s := strings.ToLower(p)
	if strings.HasPrefix(s, "0x") {
		s = s[2:]
		return strings.Trim(s, "0123456789abcdef") == ""
	}
	return strings.Trim(s, "0123456789") == ""
}

// maxPathBytes and maxPathSegments bound the path a decision reads, as
// sent (escaped). A decision's cost grows faster than the path's segments
// (about 3 ms for 1,024 of them, 15 ms for 2,048, over 100 ms for
// 100,000), every distinct path misses the decision cache, and one
// sandbox's requests would spend the CPU of a proxy others share. No
// honest path comes near them: common servers refuse a request line
// past 8 KiB, and Node a whole header past 16 KiB.
const (
	maxPathBytes    = 16 << 10
	maxPathSegments = 1024
)

// checkPathSize refuses a path longer than maxPathBytes or with more than
// maxPathSegments segments, an encoded slash (%2F) counted as the
// separator it decodes to. It reads the path before anything else does.
func checkPathSize(raw string) error {
	if len(raw) > maxPathBytes {
		return invalid("path is %d bytes long, more than the %d a decision reads", len(raw), maxPathBytes)
	}
	if n := strings.Count(raw, "/") + strings.Count(raw, "%2F") + strings.Count(raw, "%2f"); n > maxPathSegments {
		return invalid("path has %d segments, more than the %d a decision reads", n, maxPathSegments)
	}
	return nil
}

// maxQueryParams and maxQueryBytes bound the query a decision reads, as
// the path's are bounded, and for the same reasons: every value of every
// param is read under each of the rule's query conditions, each name
// folded (_param_key), so a decision's cost grows with the query (about
// 5 ms for 256 params, 15 ms with non-ASCII names, near a second for
// 10,000), every distinct query misses the decision cache, and the CPU is
// a proxy's that sandboxes share. An honest query rarely comes near
// them: an API that takes a long list mostly takes it in a body.
const (
	maxQueryParams = 256
	maxQueryBytes  = 16 << 10
)

// checkQuerySize refuses a query with more than maxQueryParams params (a
// name given twice counts twice: each value is read) or whose names and
// values come to more than maxQueryBytes, the bound CanonicalQuery puts
// on a raw query, which decoding never lengthens.
func checkQuerySize(q map[string][]string) error {
	params, size := 0, 0
	for k, vs := range q {
		params += max(len(vs), 1)
		size += len(k)
		for _, v := range vs {
			size += len(v)
		}
	}
	if params > maxQueryParams {
		return invalid("query has %d parameters, more than the %d a decision reads", params, maxQueryParams)
	}
	if size > maxQueryBytes {
		return invalid("query's names and values are %d bytes long, more than the %d a decision reads", size, maxQueryBytes)
	}
	return nil
}

// CanonicalPath returns the path rules are matched against: percent-escapes
// decoded (so %2F is a separator and %2e%2e is a dot-segment), "." and ".."
// resolved, repeated slashes collapsed, a trailing slash kept. It refuses
// control characters, backslashes and malformed escapes, which upstream
// servers disagree about.
func CanonicalPath(p string) (string, error) {
	if p == "" {
		return "/", nil
	}
	if p == "*" { // OPTIONS * HTTP/1.1
		return p, nil
	}
	if !strings.HasPrefix(p, "/") {
		return "", invalid("path %q is not absolute", p)
	}
	dec, err := url.PathUnescape(p)
	if err != nil {
		return "", invalid("path %q: %v", p, err)
	}
	for _, c := range dec {
		if c < ' ' || c == 0x7f || c == '\\' {
			return "", invalid("path %q contains %q", p, c)
		}
	}
	segs := strings.Split(dec, "/")
	out := make([]string, 0, len(segs))
	for _, s := range segs[1:] {
		switch s {
		case "", ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, s)
		}
	}
	res := "/" + strings.Join(out, "/")
	last := segs[len(segs)-1]
	if len(out) > 0 && (last == "" || last == "." || last == "..") {
		res += "/"
	}
	return res, nil
}

// CanonicalMethod upper-cases an HTTP method and refuses anything that is not
// an RFC 9110 token: some servers treat "get" as GET, so rules must too.
func CanonicalMethod(m string) (string, error) {
	if m == "" {
		return "", invalid("empty method")
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return "", invalid("method %q is not a token", m)
		}
	}
	return strings.ToUpper(m), nil
}

// CanonicalQuery parses a raw query. A query the parser cannot read whole
// (for example one using ';') is refused rather than half-read: a deny rule
// on a parameter must not be evadable by a malformed neighbour.
func CanonicalQuery(raw string) (map[string][]string, error) {
	// A request-target has no fragment, and the parser keeps "#x" in the
	// value; a server whose URL parser splits one off reads the value
	// without it (service=git-receive-pack#x). No client sends a raw "#".
	if strings.Contains(raw, "#") {
		return nil, invalid("query: a raw '#', which servers may read as the start of a fragment")
	}
	if len(raw) > maxQueryBytes { // before it is parsed
		return nil, invalid("query is %d bytes long, more than the %d a decision reads", len(raw), maxQueryBytes)
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, invalid("query: %v", err)
	}
	if err := checkQuery(q); err != nil {
		return nil, err
	}
	return q, nil
}

// checkQuery refuses a query value that is one thing to a rule and another
// to a server: a NUL or another control character, where a server may stop
// (service=git-receive-pack%00), or bytes that are not UTF-8, which it may
// map. The value is not quoted: query values stay out of logs. Of the bad
// keys the least is named, so that the error, which the decision carries,
// names the same key every time; a good query, every request's, is
// checked without sorting or copying its keys.
func checkQuery(q map[string][]string) error {
	bad, found := "", false
	for k, vs := range q {
		if (!found || k < bad) && (!readable(k) || slices.ContainsFunc(vs, unreadable)) {
			bad, found = k, true
		}
	}
	if found {
		return invalid("query parameter %q has a control character or is not UTF-8", strings.ToValidUTF8(strings.Map(printable, bad), "?"))
	}
	return nil
}

// readable: UTF-8 without control characters.
func readable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f })
}

func unreadable(s string) bool { return !readable(s) }

// printable replaces control characters, for naming a query key in an error.
func printable(r rune) rune {
	if r < ' ' || r == 0x7f {
		return '?'
	}
	return r
}
