package policies

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestCanonicalHost(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"api.github.com", "api.github.com"},
		{"API.GitHub.COM", "api.github.com"},
		{"api.github.com.", "api.github.com"},
		{"bücher.example", "xn--bcher-kva.example"},
		{"127.0.0.1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"0x7f.0.0.1", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"0xa9fea9fe", "169.254.169.254"},
		{"169.254.43518", "169.254.169.254"},
		{"::ffff:127.0.0.1", "127.0.0.1"},
		{"[::1]", "::1"},
		{"[::ffff:a9fe:a9fe]", "169.254.169.254"},
		{"my_service.internal", "my_service.internal"},
	} {
		got, err := CanonicalHost(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("CanonicalHost(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{
		"", "a b.com", "evil.com\r\nX: y", "evil.com%2f", "a..b", ".", "user@host",
		"256.1.1.1", "1.2.3.4.5", "0x1g.0.0.1", "fe80::1%eth0", "a/b", "host\x00",
		"0!", "*", "api.github.com:443", "a=b.test", "0\xb8",
	} {
		if got, err := CanonicalHost(in); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("CanonicalHost(%q) = %q, %v; want ErrInvalidRequest", in, got, err)
		}
	}
}

func TestCanonicalPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "/"},
		{"/", "/"},
		{"/v1/models", "/v1/models"},
		{"/v1/models/", "/v1/models/"},
		{"//v1///models", "/v1/models"},
		{"/v1/./models", "/v1/models"},
		{"/v1/admin/../models", "/v1/models"},
		{"/../../etc/passwd", "/etc/passwd"},
		{"/v1/%2e%2e/admin", "/admin"},
		{"/v1%2Fadmin%2Fsecrets", "/v1/admin/secrets"},
		{"/a%20b", "/a b"},
		{"/a/..", "/"},
		{"*", "*"},
	} {
		got, err := CanonicalPath(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("CanonicalPath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"v1/models", "/a%zz", "/a%00b", "/a\\b", "/a%5Cb", "/a\nb"} {
		if got, err := CanonicalPath(in); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("CanonicalPath(%q) = %q, %v; want ErrInvalidRequest", in, got, err)
		}
	}
}

func TestCanonicalMethod(t *testing.T) {
	if got, err := CanonicalMethod("get"); err != nil || got != "GET" {
		t.Errorf(`CanonicalMethod("get") = %q, %v; want "GET"`, got, err)
	}
	for _, in := range []string{"", "G ET", "GET\r\n", "GE(T"} {
		if _, err := CanonicalMethod(in); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("CanonicalMethod(%q) error = %v; want ErrInvalidRequest", in, err)
		}
	}
}

func TestCanonicalQuery(t *testing.T) {
	q, err := CanonicalQuery("service=git-upload-pack&a=1&a=2")
	if err != nil || q["service"][0] != "git-upload-pack" || len(q["a"]) != 2 {
		t.Errorf("CanonicalQuery = %v, %v", q, err)
	}
	if _, err := CanonicalQuery("service=git-upload-pack;service=git-receive-pack"); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("CanonicalQuery with ';' error = %v; want ErrInvalidRequest", err)
	}
	for _, raw := range []string{"service=git-receive-pack%00", "service=x%0d%0a", "k%01=v", "service=%c0%ae", "a=%7f", "service=git-receive-pack#x", "a=1#&service=git-receive-pack"} {
		_, err := CanonicalQuery(raw)
		if !errors.Is(err, ErrInvalidRequest) || strings.Contains(err.Error(), "receive") {
			t.Errorf("CanonicalQuery(%q) error = %v; want ErrInvalidRequest without the value", raw, err)
		}
	}
	if q, err := CanonicalQuery("q=caf%C3%A9+au+lait"); err != nil || q["q"][0] != "café au lait" {
		t.Errorf("CanonicalQuery with UTF-8 and spaces = %v, %v", q, err)
	}
}

// An encoded slash is read both ways: Path splits on it, SlashPath keeps it
// inside its segment, as GitLab-style servers route it.
func TestCanonicalizeSlashPath(t *testing.T) {
	for raw, want := range map[string][2]string{
		"/projects/a%2Fb/settings": {"/projects/a/b/settings", "/projects/a%2Fb/settings"},
		"/projects/a%2fb/":         {"/projects/a/b/", "/projects/a%2Fb/"},
		"/plain/path":              {"/plain/path", ""},
	} {
		in := Input{Request: Request{Phase: PhaseRequest, Host: "a.example", Port: 443, Method: "GET", Path: raw}}
		err := in.Canonicalize()
		if err == nil {
			err = in.Canonicalize() // idempotent
		}
		if err != nil || in.Request.Path != want[0] || in.Request.SlashPath != want[1] {
			t.Errorf("Canonicalize(%q) = %q, %q, %v; want %q, %q", raw, in.Request.Path, in.Request.SlashPath, err, want[0], want[1])
		}
	}
}

// A path servers read differently is refused by Canonicalize, so Decide
// (the proxy, policy eval, explain) refuses it the same way.
func TestAmbiguousPathRefused(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/hello": "", "/v1/.well-known/x": "", "/a..b/c": "", "/files/a%2Fb": "", "/": "", "/caf%C3%A9": "", "/100%25": "",
		"/v1/../v2": "dot-segment", "/v1/./x": "dot-segment", "/v2/..%2Fv1": "dot-segment", "/v2/%2e%2e/v1": "dot-segment",
		"/v2/%2E/v1": "dot-segment", "/v2/..;/v1": "dot-segment", "/v1/..": "dot-segment",
		"/admin;x/users": "parameter", "/api/delete;x": "parameter", "/objects/a%3Bb": "",
		"/p/%252e%252e/admin": "escaped escape", "/p/%25%32%65%25%32%65/admin": "escaped escape", "/%2561dmin/x": "escaped escape", "/p/%252F": "escaped escape", "/p/%255C": "escaped escape",
		"/p/%c0%ae%c0%ae/admin": "not UTF-8", "/p/%ff": "not UTF-8",
		"/p/%EF%BC%8E%EF%BC%8E/admin": "dot-segment", "/p/\uff0e/x": "dot-segment", "/p/a\uff0eb": "",
		"/public/%E2%80%A5/admin": "dot-segment", "/public/\u2025/admin": "dot-segment", "/p/a\u2026b": "",
		"/wiki/Und_t%C3%A4glich_gr%C3%BC%C3%9Ft%E2%80%A6": "", "/wiki/\u2026": "",
		"/repos/x/admin\uff0e/y": "look-alike dot", "/repos/x/admin::$DATA/y": "NTFS stream", "/repos/x/admin:stream:$DATA": "NTFS stream",
		"/~user/x": "", "/v1/models/gemini:generateContent": "", "/v1/a~b": "", "/files/a.txt": "", "/a%20b": "",
		"/wiki/Washington,_D.C.": "", "/repos/o/r/commits/HEAD~1": "", "/repos/x/admin./y": "", "/x/y%20": "",
		"//public/secret": "begins with //", "/%2Fpublic/secret": "begins with //", "/public//x": "",
		"/public/x/..%EF%BC%8Fsecret": "dot-segment", "/public/x/..\uff3csecret": "dot-segment", "/public/x/..%E2%88%95secret": "dot-segment",
		"/public/x/%E2%81%84..%E2%81%84secret": "dot-segment", "/wiki/1%E2%88%952": "",
		"/public/x/..%EF%B9%A8secret": "dot-segment", "/public/x/..%C2%A5secret": "dot-segment", "/public/x/..\u20a9secret": "dot-segment",
		"/prices/%C2%A5100": "", "/%C2%A5100": "", "/\u20a91000": "",
	} {
		in := Input{Request: Request{Phase: PhaseRequest, Host: "example.test", Port: 443, Method: "GET", Path: path}}
		err := in.Canonicalize()
		if want == "" && err != nil || want != "" && (!errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), want)) {
			t.Errorf("Canonicalize(path %q) = %v; want %q", path, err, want)
		}
	}
}

// A path with more segments or bytes than a decision reads is refused
// before anything reads it: its cost would grow with it, on a proxy
// sandboxes share. An encoded slash counts as the separator it is.
func TestOverlongPathRefused(t *testing.T) {
	for _, tc := range []struct {
		note, path, want string
	}{
		{"the most segments", strings.Repeat("/a", maxPathSegments), ""},
		{"one segment more", strings.Repeat("/a", maxPathSegments+1), "path has 1025 segments, more than the 1024 a decision reads"},
		{"100,000 segments", strings.Repeat("/a", 100_000), "path is 200000 bytes long"},
		{"encoded slashes", "/a" + strings.Repeat("%2Fa", maxPathSegments/2) + strings.Repeat("%2fa", maxPathSegments/2), "path has 1025 segments"},
		{"empty segments", "/a" + strings.Repeat("/", maxPathSegments), "path has 1025 segments"},
		{"the most bytes", "/" + strings.Repeat("a", maxPathBytes-1), ""},
		{"one byte more", "/" + strings.Repeat("a", maxPathBytes), "path is 16385 bytes long, more than the 16384 a decision reads"},
	} {
		in := Input{Request: Request{Phase: PhaseRequest, Host: "example.test", Port: 443, Method: "GET", Path: tc.path}}
		err := in.Canonicalize()
		if tc.want == "" && err != nil || tc.want != "" && (!errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: Canonicalize = %v; want %q", tc.note, err, tc.want)
		}
	}
}

// A query with more params or bytes than a decision reads is refused, as
// an overlong path is: its cost would grow with it. A raw query is
// measured as sent, before it is parsed; a parsed one (policy eval's
// input) by its names and values, which decoding never lengthens.
func TestOverlongQueryRefused(t *testing.T) {
	params := func(n int, distinct bool) string {
		ps := make([]string, n)
		for i := range ps {
			ps[i] = "a=v"
			if distinct {
				ps[i] = fmt.Sprintf("p%d=v", i)
			}
		}
		return strings.Join(ps, "&")
	}
	for _, tc := range []struct {
		note, raw, want string
	}{
		{"the most params", params(maxQueryParams, true), ""},
		{"one param more", params(maxQueryParams+1, true), "query has 257 parameters, more than the 256 a decision reads"},
		{"a name given again counts again", params(maxQueryParams+1, false), "query has 257 parameters"},
		{"the most bytes", "a=" + strings.Repeat("v", maxQueryBytes-2), ""},
		{"one byte more", "a=" + strings.Repeat("v", maxQueryBytes-1), "query is 16385 bytes long, more than the 16384 a decision reads"},
		{"escaped, as sent", "a=" + strings.Repeat("%76", maxQueryBytes/3), "query is 16385 bytes long"},
	} {
		in := Input{Request: Request{Phase: PhaseRequest, Host: "example.test", Port: 443, Method: "GET", Path: "/"}}
		q, err := CanonicalQuery(tc.raw)
		if err == nil {
			in.Request.Query = q
			err = in.Canonicalize()
		}
		if tc.want == "" && err != nil || tc.want != "" && (!errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v; want %q", tc.note, err, tc.want)
		}
	}
	// As policy eval reads it: parsed already.
	for _, tc := range []struct {
		note  string
		query map[string][]string
		want  string
	}{
		{"the most bytes", map[string][]string{"a": {strings.Repeat("v", maxQueryBytes-1)}}, ""},
		{"one byte more", map[string][]string{"a": {strings.Repeat("v", maxQueryBytes)}}, "query's names and values are 16385 bytes long, more than the 16384 a decision reads"},
		{"one name, too many values", map[string][]string{"a": slices.Repeat([]string{"v"}, maxQueryParams+1)}, "query has 257 parameters"},
	} {
		in := Input{Request: Request{Phase: PhaseRequest, Host: "example.test", Port: 443, Method: "GET", Path: "/", Query: tc.query}}
		err := in.Canonicalize()
		if tc.want == "" && err != nil || tc.want != "" && (!errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("parsed, %s: Canonicalize = %v; want %q", tc.note, err, tc.want)
		}
	}
}
