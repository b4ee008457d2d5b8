package proxy

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
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

// A read hands on at once everything that cannot begin a secret; only a
// possible beginning waits, and only for the next read. A server-sent
// event (ending in a blank line, which no secret holds) is never delayed.
func TestScrubReaderHoldsOnlyAPrefix(t *testing.T) {
	s := newScrubber([]string{testSecret})
	r := &chunkReader{t: t, chunks: []string{"data: one\n\n", "data: s3cr", "3t-token/42\n\n", "data: s", "ss\n\n"}}
	z := newScrubReader(s, r)
	buf := make([]byte, 64)
	for _, step := range []struct {
		release int
		want    string
	}{
		{1, "data: one\n\n"},
		{2, "data: "},
		{3, strings.Repeat("*", len(testSecret)) + "\n\n"},
		{4, "data: "},
		{5, "sss\n\n"},
	} {
		r.released = step.release
		var got []byte
		for len(got) < len(step.want) {
			n, err := z.Read(buf)
			if err != nil {
				t.Fatalf("after chunk %d: %v", step.release, err)
			}
			got = append(got, buf[:n]...)
		}
		if string(got) != step.want {
			t.Fatalf("after chunk %d: %q; want %q", step.release, got, step.want)
		}
	}
	if n, err := z.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("end: %d, %v", n, err)
	}
}

// A body cut short by an error never sends what may be a secret's first
// bytes, and passes the error on.
func TestScrubReaderErrorDropsPrefix(t *testing.T) {
	s := newScrubber([]string{testSecret})
	got, err := io.ReadAll(newScrubReader(s, io.MultiReader(strings.NewReader("ok s3cr3t"), errReader{})))
	if string(got) != "ok " || err != io.ErrUnexpectedEOF {
		t.Fatalf("got %q, %v; want %q, unexpected EOF", got, err, "ok ")
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
	} {
		s := newScrubber(secretForms(tc.secret, tc.format))
		if got := s.scrubString(tc.in); got != tc.want {
			t.Errorf("scrub(%q) with secret %q = %q; want %q", tc.in, tc.secret, got, tc.want)
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
