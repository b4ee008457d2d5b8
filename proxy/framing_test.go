package proxy

import (
	"strings"
	"testing"
)

// The tracker finds every request header in a stream of pipelined
// requests whatever their bodies (Content-Length, chunked with extensions
// and trailers, none) and however the reads split the stream, and gives
// each header's verdict in order; it stops at a header whose framing is
// refused, as the connection then ends.
func TestFrameTracker(t *testing.T) {
	stream := "GET http://a.test/1 HTTP/1.1\r\nHost: a.test\r\n\r\n" +
		"POST http://a.test/2 HTTP/1.1\r\nHost: a.test\r\nContent-Length: 33\r\n\r\n" +
		"GET http://a.test/fake HTTP/1.1\r\n" + // a body that looks like a request
		"\r\n" + // an empty line after a POST, which net/http skips
		"POST http://a.test/3 HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"5;ext=1\r\nhello\r\n1A\r\nContent-Length: 5\r\n\r\n01234\r\n0\r\nX-Trailer: t\r\n\r\n" +
		"GET http://a.test/4 HTTP/1.1\r\nHost: a.test\r\nX-Folded: a\r\n b\r\n\r\n" +
		"POST http://a.test/5 HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"0\r\n\r\nGET http://a.test/6 HTTP/1.1\r\n\r\n"
	want := []string{"", "", "", "", "both Content-Length and Transfer-Encoding"}
	for _, split := range []int{1, 7, 64, len(stream)} {
		tr := &frameTracker{maxHeader: 4096}
		for s := stream; s != ""; {
			n := min(split, len(s))
			tr.feed([]byte(s[:n]))
			s = s[n:]
		}
		for i, w := range want {
			got := tr.next()
			if (w == "") != (got == "") || !strings.Contains(got, w) {
				t.Fatalf("split %d: verdict %d = %q; want %q", split, i, got, w)
			}
		}
		if got := tr.next(); got == "" {
			t.Fatalf("split %d: a request after the refused one = %q; want a refusal (the tracker stopped)", split, got)
		}
	}
}

func TestFramingError(t *testing.T) {
	for _, tc := range []struct{ header, want string }{
		{"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n", ""},
		{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", ""},
		{"POST / HTTP/1.1\r\nX-A: 1\r\n continued\r\n\r\n", ""},
		{"POST / HTTP/1.1\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n", "both"},
		{"POST / HTTP/1.1\r\nTransfer-Encoding:\r\n chunked\r\n\r\n", "folded"},
		{"POST / HTTP/1.1\r\nContent-Length: 5\r\n\t5\r\n\r\n", "folded"},
		{"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.0"},
		{"POST / HTTP/1.1\nContent-Length: 1\nTransfer-Encoding: chunked\n\n", "both"},
	} {
		got := framingError([]byte(tc.header))
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("framingError(%q) = %q; want %q", tc.header, got, tc.want)
		}
	}
}
