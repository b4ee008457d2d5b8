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
// re-framed, and a body is passed on as it arrives, less the bytes that
// could still be the start of a secret (fewer than its longest form below),
// held back until they are known. It tells the secret's length, which its
// format (sk-..., ghp_...) tells anyway.
//
// What is matched: each secret exactly, which covers the header value sent
// ("Bearer <secret>"), and the forms an echo commonly re-encodes it in:
// JSON-escaped, percent-encoded, base64 of the secret or of the header
// value (standard or URL alphabet, padded or not), and for "Basic %s" the
// decoded user:pass. Not matched: any other transformation (base64 of a
// larger text, hashing, splitting, case changes), a response the proxy
// cannot read (compressed: refused, see response), WebSocket frames
// (refused before the upgrade), and responses to requests that carried no
// injected secret.
type scrubber struct {
	needles [][]byte
	lowered [][]byte // needles in ASCII lower case, for header names
	longest int
	count   atomic.Int64 // occurrences masked so far
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
	js, _ := json.Marshal(secret) // Go's escaping: \u003c for <, \u0026 for &
	forms = append(forms, string(js[1:len(js)-1]))
	// PHP's json_encode and others escape '/' too.
	forms = append(forms, strings.ReplaceAll(string(js[1:len(js)-1]), "/", `\/`))
	forms = append(forms, url.QueryEscape(secret), url.PathEscape(secret))
	if strings.HasPrefix(strings.ToLower(format), "basic ") {
		if dec, err := base64.StdEncoding.DecodeString(secret); err == nil && len(dec) > 0 {
			forms = append(forms, string(dec))
		}
	}
	return forms
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

// held is the length of the longest suffix of b that is a proper prefix of
// a secret: bytes that may yet turn out to be one.
func (s *scrubber) held(b []byte) int {
	for i := max(0, len(b)-s.longest+1); i < len(b); i++ {
		for _, n := range s.needles {
			if len(b)-i < len(n) && bytes.HasPrefix(n, b[i:]) {
				return len(b) - i
			}
		}
	}
	return 0
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
// returns each byte as soon as no secret can begin at it unseen: a read
// that ends in the first bytes of a secret holds those back (fewer than
// the longest secret) until the next read completes or clears them; any
// other bytes go out at once, so a stream is never delayed further.
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
		// The stream ended: held bytes are not the secret after all.
		z.ready = len(z.out)
	case err != nil:
		// The answer is cut short and the client's connection reset:
		// what may be a secret's first bytes are never sent.
		z.ready = len(z.out) - z.s.held(z.orig)
		z.orig, z.out = z.orig[:z.ready], z.out[:z.ready]
	default:
		z.ready = len(z.out) - z.s.held(z.orig)
	}
}
