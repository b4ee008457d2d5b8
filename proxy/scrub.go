package proxy

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
)

// scrubber masks the secrets injected into one request wherever its
// response carries them back: an upstream that echoes request headers (a
// debugging endpoint, an error page quoting the request) would otherwise
// hand the agent the credential the proxy exists to keep from it.
//
// Each occurrence is replaced by as many '*' as it has bytes. The same
// length keeps Content-Length true and streams streams: nothing is
// re-framed, and a body is passed on as it arrives, less its last bytes
// since its last line break (fewer than its longest form below), held
// back until the next read. It tells the secret's length, which its
// format (sk-..., ghp_...) tells anyway; what is held never depends on
// whether it looks like a secret (see held).
//
// What is matched: each secret exactly, which covers the header value sent
// ("Bearer <secret>"), and the forms an echo commonly re-encodes it in:
// JSON-escaped, percent-encoded (see percentForms), base64 of the secret
// or of the header value (standard or URL alphabet, padded or not), the
// secret inside the base64 of a larger text (see base64Cores), and for
// "Basic %s" the decoded user:pass. Not matched: any other transformation
// (hashing, splitting, case changes), a response the proxy cannot read
// (compressed: refused, see response), WebSocket frames (refused before
// the upgrade), and responses to requests that carried no injected secret.
type scrubber struct {
	needles [][]byte
	lowered [][]byte // needles in ASCII lower case, for header names
	longest int
	// spansLines: some form holds a line break (a decoded Basic
	// user:pass may), so no occurrence is known to end before one.
	spansLines bool
	count      atomic.Int64 // occurrences masked so far
}

// unscrubbableFrames is the detail of a WebSocket upgrade refused because
// its rule injects a secret: frames pass untouched, so an echoed secret in
// them could not be masked.
const unscrubbableFrames = "the rule injects a credential, and WebSocket frames cannot be scrubbed of it if the upstream echoes it"

// maskByte replaces every byte of a scrubbed secret.
const maskByte = '*'

// secretForms are the byte strings to mask for one injected secret, sent
// in the header value formatted from format.
func secretForms(secret, format string) []string {
	forms := []string{secret}
	for _, v := range []string{secret, strings.Replace(format, "%s", secret, 1)} {
		// Unpadded: the padded form begins with it.
		forms = append(forms, base64.RawStdEncoding.EncodeToString([]byte(v)), base64.RawURLEncoding.EncodeToString([]byte(v)))
	}
	// The secret's cores are in the base64 of any text holding it, the
	// header value's among them.
	forms = append(forms, base64Cores(secret)...)
	js, _ := json.Marshal(secret) // Go's escaping: \u003c for <, \u0026 for &
	forms = append(forms, string(js[1:len(js)-1]))
	// PHP's json_encode and others escape '/' too.
	forms = append(forms, strings.ReplaceAll(string(js[1:len(js)-1]), "/", `\/`))
	forms = append(forms, percentForms(secret)...)
	if strings.HasPrefix(strings.ToLower(format), "basic ") {
		if dec, err := base64.StdEncoding.DecodeString(secret); err == nil && len(dec) > 0 {
			forms = append(forms, string(dec))
		}
	}
	return forms
}

// minCore is the shortest base64 core matched: a core of a secret a few
// bytes long is two or three characters, which would mask them wherever
// they stand in base64 the secret is no part of.
const minCore = 8

// base64Cores are what of the base64 of a larger text holding the secret
// (a dump of the request's header, a token's payload) the secret alone
// determines, for each of its three alignments to the encoding's 3-byte
// groups and both alphabets: the characters that encode only its bits.
// Those that also encode the bytes either side are left out, and with
// them at most 4 of its bits at each end.
func base64Cores(secret string) []string {
	var cores []string
	for off := range 3 {
		b := make([]byte, off+len(secret)) // off filler bytes, then the secret
		copy(b[off:], secret)
		// Character i encodes bits [6i, 6i+6) of b; the secret's are
		// [8*off, 8*len(b)).
		from, to := (8*off+5)/6, 8*len(b)/6
		if to-from < minCore {
			continue
		}
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			cores = append(cores, enc.EncodeToString(b)[from:to])
		}
	}
	return cores
}

// percentForms are the secret percent-encoded as common encoders write
// it: Go's query and path escaping, every byte but the unreserved ones
// (Python's quote(s, safe="")), those and '/' (Python's quote(s), its
// default) and those and !'()* (JavaScript's encodeURIComponent), each
// with its hex digits in upper case (RFC 3986's advice) and in lower case
// (.NET's HttpUtility.UrlEncode writes them so, as do hand-rolled ones).
func percentForms(secret string) []string {
	var forms []string
	for _, f := range []string{url.QueryEscape(secret), url.PathEscape(secret), percentEncode(secret, ""), percentEncode(secret, "/"), percentEncode(secret, "!'()*")} {
		forms = append(forms, f, lowerHex(f))
	}
	return forms
}

// percentEncode escapes every byte of s but RFC 3986's unreserved ones
// and those in keep, in upper-case hex.
func percentEncode(s, keep string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("-._~"+keep, c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// lowerHex is the percent-encoded s with the hex digits of its escapes in
// lower case.
func lowerHex(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			copy(b[i+1:i+3], asciiLower(b[i+1:i+3]))
			i += 2
		}
	}
	return string(b)
}

// newScrubber scrubs forms; it is nil when there is nothing to scrub.
func newScrubber(forms []string) *scrubber {
	s := &scrubber{}
	seen := map[string]bool{}
	for _, f := range forms {
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		s.needles = append(s.needles, []byte(f))
		s.lowered = append(s.lowered, asciiLower([]byte(f)))
		s.longest = max(s.longest, len(f))
		s.spansLines = s.spansLines || strings.ContainsAny(f, "\r\n")
	}
	if len(s.needles) == 0 {
		return nil
	}
	return s
}

// scrubbed is the number of occurrences masked; 0 for a nil scrubber.
func (s *scrubber) scrubbed() int64 {
	if s == nil {
		return 0
	}
	return s.count.Load()
}

// mark masks in out (a copy of orig) every occurrence of a secret in orig
// that ends after from, and counts them. Matching reads orig, so that
// overlapping occurrences are all found.
func (s *scrubber) mark(orig, out []byte, from int) {
	s.markNeedles(s.needles, orig, out, from)
}

func (s *scrubber) markNeedles(needles [][]byte, orig, out []byte, from int) {
	for _, n := range needles {
		for i := 0; ; i++ {
			j := bytes.Index(orig[i:], n)
			if j < 0 {
				break
			}
			i += j
			for k := i; k < i+len(n); k++ {
				out[k] = maskByte
			}
			if i+len(n) > from {
				s.count.Add(1)
			}
		}
	}
}

// held is how many of b's last bytes wait for the next read: those after
// its last line break (any, if a form spans one), but no more than one
// fewer than the longest form. An occurrence beginning before them ends
// within b, where it is masked: it spans no line break, and is no longer
// than the longest form.
//
// It depends on where b's line breaks are and on the forms' length only,
// never on whether its last bytes look like the start of a secret. Were
// only those held, where the client's data is split and when those bytes
// reach it would tell an agent that makes an upstream echo its guesses (a
// model told to repeat them) whether a guess begins the secret, a byte at
// a time. A line (an event, an NDJSON record) still goes out as soon as
// it ends.
func (s *scrubber) held(b []byte) int {
	tail := b[max(0, len(b)-s.longest+1):]
	if !s.spansLines {
		tail = tail[bytes.LastIndexAny(tail, "\r\n")+1:]
	}
	return len(tail)
}

// scrubString is v with every secret in it masked.
func (s *scrubber) scrubString(v string) string {
	before := s.count.Load()
	out := []byte(v)
	s.mark([]byte(v), out, 0)
	if s.count.Load() == before {
		return v
	}
	return string(out)
}

// scrubName is a header name with every secret in it masked, whatever the
// case: net/http canonicalises the names it reads (x-tok-abc becomes
// X-Tok-Abc), so an echoed secret comes back with its case changed.
func (s *scrubber) scrubName(k string) string {
	n0 := s.count.Load()
	out := []byte(k)
	s.markNeedles(s.lowered, asciiLower(out), out, 0)
	if s.count.Load() == n0 {
		return k
	}
	return string(out)
}

func asciiLower(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return out
}

// header scrubs names and values of h in place.
func (s *scrubber) header(h http.Header) {
	type entry struct {
		from, to string
		vs       []string
	}
	var changed []entry
	for k, vs := range h {
		nk, nvs, diff := s.scrubName(k), make([]string, len(vs)), false
		for i, v := range vs {
			nvs[i] = s.scrubString(v)
			diff = diff || nvs[i] != v
		}
		if diff || nk != k {
			changed = append(changed, entry{k, nk, nvs})
		}
	}
	for _, e := range changed {
		delete(h, e.from)
	}
	for _, e := range changed {
		h[e.to] = append(h[e.to], e.vs...)
	}
}

// response scrubs resp before it reaches the client: its status text and
// headers now, its body and trailers as they are read. A compressed body
// would carry the secret where no match can see it, so it is refused (the
// request asked for identity: see inject); an error says so.
func (s *scrubber) response(req *http.Request, resp *http.Response) error {
	if s == nil {
		return nil
	}
	if resp.StatusCode == http.StatusPartialContent {
		return fmt.Errorf("the upstream answered a request carrying an injected credential with a part of a body (206), in which an echoed credential could be cut where no match sees it (the proxy asked for the whole)")
	}
	resp.Status = s.scrubString(resp.Status)
	s.header(resp.Header)
	s.header(resp.Trailer) // the names announced before the body
	if req.Method != http.MethodHead && bodyAllowed(resp.StatusCode) {
		for _, v := range resp.Header.Values("Content-Encoding") {
			for _, coding := range strings.Split(v, ",") {
				if c := strings.TrimSpace(coding); c != "" && !strings.EqualFold(c, "identity") {
					return fmt.Errorf("the upstream answered a request carrying an injected credential with a %s-encoded body, which the proxy cannot scrub of it (it asked for identity)", c)
				}
			}
		}
	}
	resp.Body = &scrubBody{scrubReader: newScrubReader(s, resp.Body), body: resp.Body, resp: resp}
	return nil
}

// scrubBody is a scrubbed response body; at its end it scrubs the
// trailers, which the transport has filled in by then and which are
// written after it.
type scrubBody struct {
	*scrubReader
	body io.Closer
	resp *http.Response
}

func (b *scrubBody) Read(p []byte) (int, error) {
	n, err := b.scrubReader.Read(p)
	if err == io.EOF {
		b.s.header(b.resp.Trailer)
	}
	return n, err
}

func (b *scrubBody) Close() error { return b.body.Close() }

// scrubReader masks secrets in a stream split at arbitrary points. It
// returns each byte as soon as no secret can begin at it unseen: of what
// a read brings, the bytes after its last line break (fewer than the
// longest form) wait for the next read (see held), or for the end.
type scrubReader struct {
	s          *scrubber
	r          io.Reader
	obuf, mbuf []byte // as read, and masked
	orig, out  []byte // the pending bytes, in obuf and mbuf
	ready      int    // out[:ready] may be returned
	err        error  // from r, returned once the pending bytes are out
}

const scrubBufSize = 32 << 10

func newScrubReader(s *scrubber, r io.Reader) *scrubReader {
	size := scrubBufSize + s.longest
	return &scrubReader{s: s, r: r, obuf: make([]byte, size), mbuf: make([]byte, size)}
}

func (z *scrubReader) Read(p []byte) (int, error) {
	for z.ready == 0 && z.err == nil {
		z.fill()
	}
	if z.ready == 0 {
		return 0, z.err
	}
	n := copy(p, z.out[:z.ready])
	z.orig, z.out, z.ready = z.orig[n:], z.out[n:], z.ready-n
	return n, nil
}

// fill reads once more after the held-back bytes, masks what completes a
// secret, and decides what may go out.
func (z *scrubReader) fill() {
	kept := copy(z.obuf, z.orig)
	copy(z.mbuf, z.out)
	n, err := z.r.Read(z.obuf[kept:])
	copy(z.mbuf[kept:], z.obuf[kept:kept+n])
	z.orig, z.out = z.obuf[:kept+n], z.mbuf[:kept+n]
	// Occurrences ending in the kept bytes were counted when found.
	z.s.mark(z.orig, z.out, kept)
	z.err = err
	switch {
	case err == io.EOF:
		// The stream ended: the held bytes go out, any whole secret
		// among them masked (mark found it).
		z.ready = len(z.out)
	case err != nil:
		// The answer is cut short and the client's connection reset:
		// the held bytes, which may be a secret's first, are never sent.
		z.ready = len(z.out) - z.s.held(z.orig)
		z.orig, z.out = z.orig[:z.ready], z.out[:z.ready]
	default:
		z.ready = len(z.out) - z.s.held(z.orig)
	}
}
