package proxy

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

const testSecret = "s3cr3t-token/42"

// chunkReader returns one chunk per Read, and fails the test if the
// scrubber asks for a chunk the test has not released: it must not wait
// for more than it needs.
type chunkReader struct {
	t        *testing.T
	chunks   []string
	i        int
	released int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.i == len(c.chunks) {
		return 0, io.EOF
	}
	if c.i >= c.released {
		c.t.Fatalf("read of chunk %d before it was sent: the scrubber waited for more than a secret's first bytes", c.i)
	}
	n := copy(p, c.chunks[c.i])
	c.chunks[c.i] = c.chunks[c.i][n:]
	if c.chunks[c.i] == "" {
		c.i++
	}
	return n, nil
}

// Every way of splitting a body into three reads gives the same masked
// body and count: occurrences split across reads at any offset are found.
func TestScrubReaderEverySplit(t *testing.T) {
	mask := strings.Repeat("*", len(testSecret))
	body := "x Bearer " + testSecret + "\n" + testSecret + testSecret + " end s3cr3t-tok"
	want := "x Bearer " + mask + "\n" + mask + mask + " end s3cr3t-tok"
	for i := 0; i <= len(body); i++ {
		for j := i; j <= len(body); j++ {
			s := newScrubber([]string{testSecret})
			r := &chunkReader{t: t, chunks: nonEmpty(body[:i], body[i:j], body[j:]), released: 3}
			got, err := io.ReadAll(newScrubReader(s, r))
			if err != nil || string(got) != want || s.scrubbed() != 3 {
				t.Fatalf("split at %d,%d: %q, %v, %d scrubbed; want %q, 3", i, j, got, err, s.scrubbed(), want)
			}
		}
	}
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// held waits for the bytes after the last line break, but no more than
// one fewer than the longest form, whatever they are; with a form that
// holds a line break (a decoded Basic user:pass), a line break ends
// nothing.
func TestScrubHeld(t *testing.T) {
	lines := newScrubber([]string{testSecret})
	basic := newScrubber(secretForms(base64.StdEncoding.EncodeToString([]byte("user\npass")), "Basic %s"))
	for _, tc := range []struct {
		s    *scrubber
		b    string
		want int
	}{
		{lines, "abc", 3},
		{lines, "s3cr", 4},
		{lines, "data: 0123456789abcdef", len(testSecret) - 1},
		{lines, "data: s3cr3t-token/4", len(testSecret) - 1},
		{lines, "data: one\n\ndata: 01", 8},
		{lines, "data: one\n", 0},
		{lines, "progress 99%\r", 0},
		{basic, "abc\nde", 6},
		{basic, "abc\n", 4},
	} {
		if got := tc.s.held([]byte(tc.b)); got != tc.want {
			t.Errorf("held(%q) = %d; want %d", tc.b, got, tc.want)
		}
	}
}

// A read hands on at once all but its last bytes since its last line
// break (fewer than a secret's), whether or not they may begin a secret;
// those wait for the next read, or go out at the end. A server-sent event
// (ending in a blank line) is never delayed.
func TestScrubReaderHoldsTheTail(t *testing.T) {
	s := newScrubber([]string{testSecret})
	r := &chunkReader{t: t, chunks: []string{"data: one\n\n", "data: 0123456789abcdef", "\n\n", "data: s3cr3t-token/42\r\ndata: s", "ss\n\n",
		"progress 99%\r", "a last line with no end"}}
	z := newScrubReader(s, r)
	buf := make([]byte, 64)
	for i, reads := range [][]string{
		{"data: one\n\n"},
		{"data: 01"},
		{"23456789abcdef\n\n"},
		{"data: " + strings.Repeat("*", len(testSecret)) + "\r\n"},
		{"data: sss\n\n"},
		{"progress 99%\r"},
		{"a last li", "ne with no end"}, // the last of them at the end
	} {
		r.released = i + 1
		for _, want := range reads {
			n, err := z.Read(buf)
			if err != nil || string(buf[:n]) != want {
				t.Fatalf("after chunk %d: read %q, %v; want %q", i, buf[:n], err, want)
			}
		}
	}
	if n, err := z.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("end: %d, %v", n, err)
	}
}

// Where a body's reads end, as the client gets them, is the same whether
// the upstream echoes the first bytes of a secret, the secret itself, or
// other bytes as many, wherever the upstream's reads end: an agent that
// has an upstream echo its guesses learns nothing from the split.
func TestScrubReaderSplitTellsNothing(t *testing.T) {
	s := newScrubber(secretForms(testSecret, "Bearer %s"))
	reads := func(body string, at int) []int {
		var sizes []int
		z := newScrubReader(s, &chunkReader{t: t, chunks: nonEmpty(body[:at], body[at:]), released: 2})
		buf := make([]byte, len(body))
		for {
			n, err := z.Read(buf)
			if err != nil {
				return sizes
			}
			sizes = append(sizes, n)
		}
	}
	for n := 1; n <= len(testSecret); n++ {
		right, wrong := testSecret[:n], testSecret[:n-1]+"#"
		body := func(guess string) string { return "x\npadding-" + guess + "|end\nmore" }
		for at := 0; at <= len(body(right)); at++ {
			if r, w := reads(body(right), at), reads(body(wrong), at); !slices.Equal(r, w) {
				t.Fatalf("upstream reads split at %d: the client reads %v of an echo of %q, %v of %q", at, r, right, w, wrong)
			}
		}
	}
}

// A body cut short by an error never sends the bytes held, which may be a
// secret's first, and passes the error on.
func TestScrubReaderErrorDropsHeld(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"ok\nok s3cr3t", "ok\n"},
		{"ok\nanything", "ok\n"},
		{"ok\n0123456789abcdefghij", "ok\n012345"},
	} {
		s := newScrubber([]string{testSecret})
		got, err := io.ReadAll(newScrubReader(s, io.MultiReader(strings.NewReader(tc.body), errReader{})))
		if string(got) != tc.want || err != io.ErrUnexpectedEOF {
			t.Errorf("%q cut short: got %q, %v; want %q, unexpected EOF", tc.body, got, err, tc.want)
		}
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

// Overlapping occurrences and every encoded form are masked.
func TestScrubForms(t *testing.T) {
	for _, tc := range []struct{ secret, format, in, want string }{
		{"abab", "", "ababab", "******"},
		{testSecret, "", `{"auth":"Bearer s3cr3t-token\/42"}`, `{"auth":"Bearer ` + strings.Repeat("*", len(`s3cr3t-token\/42`)) + `"}`},
		{testSecret, "", "/cb?t=s3cr3t-token%2F42", "/cb?t=*****************"},
		{"a<b&c", "", `"a\u003cb\u0026c"`, `"` + strings.Repeat("*", len(`a\u003cb\u0026c`)) + `"`},
		{"dXNlcjpodW50ZXIy", "Basic %s", "user:hunter2 / Basic dXNlcjpodW50ZXIy", "************ / Basic ****************"},
		{"tok-1?>", "", "echo: dG9rLTE/Pg== dG9rLTE_Pg", "echo: **********== **********"},
		{"tok-1", "Bearer %s", "QmVhcmVyIHRvay0x", "****************"},
		// Percent-encoded with lower-case hex, by Python's quote (which
		// keeps '/'), and by encodeURIComponent.
		{"ab+cd/ef=gh", "", "q=ab%2bcd%2fef%3dgh&p=ab%2Bcd/ef%3Dgh", "q=*****************&p=***************"},
		{"ab+cd/ef=gh", "", "ab%2bcd/ef%3dgh ab%2Bcd%2Fef%3Dgh", "*************** *****************"},
		{"a b(c)", "", "a%20b(c) a%20b%28c%29 a+b%28c%29", "******** ************ **********"},
	} {
		s := newScrubber(secretForms(tc.secret, tc.format))
		if got := s.scrubString(tc.in); got != tc.want {
			t.Errorf("scrub(%q) with secret %q = %q; want %q", tc.in, tc.secret, got, tc.want)
		}
	}
}

// The secret is masked in the base64 of a larger text holding it, at any
// offset, in either alphabet, padded or not, but for a few of its bits at
// each end.
func TestScrubBase64Cores(t *testing.T) {
	for _, secret := range []string{testSecret, "ab+cd/ef=gh", "sk-live-Q7xP2mZ9"} {
		s := newScrubber(secretForms(secret, "Bearer %s"))
		for _, text := range []string{
			"Authorization: Bearer " + secret + "\r\nHost: x\r\n",
			`{"sub":"x","key":"` + secret + `"}`,
			"{" + secret + "}",
			"{{" + secret + "}}",
			secret + "...",
		} {
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
				in := enc.EncodeToString([]byte(text))
				// A masked character read as 'A' is six zero bits.
				out, err := enc.DecodeString(strings.ReplaceAll(s.scrubString(in), "*", "A"))
				if err != nil || strings.Contains(string(out), secret[1:len(secret)-1]) {
					t.Errorf("base64 of %q: scrubbed %q, which still holds %q (%v)", text, s.scrubString(in), secret[1:len(secret)-1], err)
				}
			}
		}
	}
}

// Status text, header names and values, body and trailers are scrubbed; a
// compressed body is refused.
func TestScrubResponse(t *testing.T) {
	s := newScrubber([]string{testSecret})
	resp := &http.Response{
		Status: "200 " + testSecret, StatusCode: 200,
		Header:  http.Header{"X-Echo": {"Bearer " + testSecret}, "X-" + testSecret: {"v"}, "Trailer": {"X-Sum, X-" + testSecret}},
		Trailer: http.Header{"X-Sum": {testSecret}, "X-" + testSecret: nil},
		Body:    io.NopCloser(strings.NewReader("body " + testSecret)),
	}
	req := &http.Request{Method: http.MethodGet}
	if err := s.response(req, resp); err != nil {
		t.Fatal(err)
	}
	if _, ok := resp.Trailer["X-"+strings.Repeat("*", len(testSecret))]; !ok {
		t.Fatalf("announced trailer names %v; want the secret's masked before the body", resp.Trailer)
	}
	body, _ := io.ReadAll(resp.Body)
	var all bytes.Buffer
	resp.Header.Write(&all)
	resp.Trailer.Write(&all)
	all.WriteString(resp.Status)
	all.Write(body)
	if strings.Contains(all.String(), testSecret) || s.scrubbed() != 7 {
		t.Fatalf("scrubbed %d; response still holds the secret: %s", s.scrubbed(), all.String())
	}

	for _, tc := range []struct {
		method, coding string
		status         int
		refused        bool
	}{
		{"GET", "gzip", 200, true},
		{"GET", "identity, br", 200, true},
		{"GET", "identity", 200, false},
		{"HEAD", "gzip", 200, false},
		{"GET", "gzip", 304, false},
	} {
		resp := &http.Response{StatusCode: tc.status, Header: http.Header{"Content-Encoding": {tc.coding}}, Body: http.NoBody}
		err := s.response(&http.Request{Method: tc.method}, resp)
		if (err != nil) != tc.refused {
			t.Errorf("%s answered %d %s: err %v; want refused %v", tc.method, tc.status, tc.coding, err, tc.refused)
		}
	}
}

// Through an inspected tunnel, what the client gets of an echo (where its
// chunks and TLS records end, and so which bytes wait for the upstream's
// next write) is the same for a right guess at the secret's first bytes
// as for a wrong one: chunked or of known length, written in two parts
// with a pause between or all at once.
func TestScrubEchoTellsNothing(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_SCRUB_TOKEN", "sk-live-Q7xP2mZ9")
	fx := newFuzzFixture(t)
	fx.p.cfg.Decider = injecting{fx.p.cfg.Decider, "read", map[string]policies.SecretRef{"Authorization": {Env: "AIRLOCK_TEST_SCRUB_TOKEN", Format: "Bearer %s"}}}
	// The upstream echoes the guess g, as a model told to repeat it would.
	answer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		parts := []string{"padding-" + q.Get("g"), "|end"}
		if q.Has("bulk") {
			// An upload served back: no pause, and the upstream's
			// reads end wherever they do.
			parts = []string{strings.Repeat("\x00"+q.Get("g"), (256<<10)/(len(q.Get("g"))+1))}
		}
		if q.Has("length") {
			w.Header().Set("Content-Length", strconv.Itoa(len(strings.Join(parts, ""))))
		}
		for i, part := range parts {
			if i > 0 {
				w.(http.Flusher).Flush()
				time.Sleep(100 * time.Millisecond)
			}
			io.WriteString(w, part)
		}
	})
	fx.answer.Store(&answer)
	// reads is the length of each TLS read of the answer to target, and
	// its body.
	reads := func(t *testing.T, target string) ([]int, string) {
		client, tc, done := fx.inspectedTunnel(t, 10*time.Second)
		defer func() { client.Close(); <-done }()
		fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n", target, fuzzHost, fx.port)
		var sizes []int
		var all []byte
		buf := make([]byte, 64<<10)
		for {
			n, err := tc.Read(buf)
			if n > 0 {
				sizes, all = append(sizes, n), append(all, buf[:n]...)
			}
			if err != nil {
				break
			}
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(all)), nil)
		if err != nil {
			t.Fatalf("GET %s: %v", target, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d, %v", target, resp.StatusCode, err)
		}
		return sizes, string(body)
	}
	for _, tc := range []struct{ name, query string }{
		{"chunked, paused", ""},
		{"length, paused", "&length"},
		{"length, at once", "&length&bulk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			right, rightBody := reads(t, "/repos/x?g=sk-live-Q7"+tc.query)
			wrong, wrongBody := reads(t, "/repos/x?g=sk-live-Q8"+tc.query)
			if !slices.Equal(right, wrong) {
				t.Errorf("the client read the echo of a right guess in pieces of %v, of a wrong one in %v", right, wrong)
			}
			if strings.ReplaceAll(rightBody, "Q7", "Q8") != wrongBody || !strings.Contains(rightBody, "sk-live-Q7") {
				t.Errorf("bodies %.40q and %.40q; want the echoes, unmasked", rightBody, wrongBody)
			}
		})
	}
}

// BenchmarkScrubReader is the scrubbing of a 1 MiB body read a TLS
// record (16 KiB) at a time, for a "Bearer %s" secret: JSON lines, and a
// body with no line break (a base64 blob).
func BenchmarkScrubReader(b *testing.B) {
	s := newScrubber(secretForms("sk-live-Q7xP2mZ9", "Bearer %s"))
	line := `{"id":12345,"object":"chat.completion.chunk","choices":[{"delta":{"content":"hello there"}}]}` + "\n"
	for _, tc := range []struct{ name, body string }{
		{"lines", strings.Repeat(line, (1<<20)/len(line))},
		{"no lines", base64.StdEncoding.EncodeToString([]byte(strings.Repeat(line, (3<<18)/len(line))))},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			for b.Loop() {
				if _, err := io.Copy(io.Discard, newScrubReader(s, recordReader{strings.NewReader(tc.body)})); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// recordReader reads at most a TLS record's plaintext at a time.
type recordReader struct{ r io.Reader }

func (r recordReader) Read(p []byte) (int, error) { return r.r.Read(p[:min(len(p), 16<<10)]) }
