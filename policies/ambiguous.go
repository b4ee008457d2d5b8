package policies

import (
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// checkUnambiguous refuses an escaped path that may name one resource to
// the policy and another to the upstream. The policy decides on the path
// decoded once, dot-segments resolved; the request goes upstream as sent,
// and servers differ in what they do with:
//   - dot-segments however spelled (%2e, ..%2F): /public/..%2Fadmin is
//     /admin to the policy and may be /public/..%2Fadmin or /admin upstream;
//   - ";params" in a segment, which Tomcat and Spring strip (/admin;x/users
//     is /admin/users to them, and escapes a deny rule for /admin/**);
//   - escapes of escapes (%252e, %25%32%65, %2561), which a server behind
//     another decoding proxy decodes twice;
//   - bytes that are not UTF-8 once decoded (overlong %c0%ae), and
//     look-alike dots (fullwidth %EF%BC%8E), which some servers map to '.';
//   - an NTFS stream (admin::$DATA is admin to IIS), and a trailing dot
//     made of a look-alike one. (A segment's plain trailing dots and
//     spaces, which IIS strips too, are common in honest paths: deny
//     rules match the path without them as well, _folded_paths.)
//
// Clients resolve and encode paths before sending, so none of this comes
// from an honest one. It lives beside the canonicaliser so that Decide,
// and so `airlock policy eval`, the proxy and explain, refuse the same
// paths for the same reason.
func checkUnambiguous(escaped string) error {
	dec, err := url.PathUnescape(escaped)
	if err != nil {
		return nil // malformed escapes are CanonicalPath's to refuse
	}
	if !utf8.ValidString(dec) {
		return invalid("path is not UTF-8 once decoded")
	}
	// An escape left after one decoding, however spelled (%252e,
	// %25%32%65), is an escape to a server behind another decoding hop:
	// of '.' or '/' it makes a dot-segment there, of a letter a path no
	// rule saw (%2561dmin is /admin).
	if i := escapeAt(dec); i >= 0 {
		return invalid("path has %s once decoded, an escaped escape that a second decoding reads differently", strconv.Quote(dec[i:i+3]))
	}
	// A path that begins with "//" is a host and a path to the URL
	// parsers that resolve it against a base (Node's new URL(path, base),
	// Python's urlsplit): //public/secret is the path /secret of host
	// "public" there, where the policy, which merges empty segments,
	// decides /public/secret.
	if strings.HasPrefix(escaped, "//") || strings.HasPrefix(dec, "//") {
		return invalid("path begins with //, which URL parsers read as a host and a path (a base URL ending in / joined with a path beginning with one); send it without the empty segment")
	}
	// Look-alike slashes are slashes to a server that normalises (NFKC)
	// or maps them best-fit (IIS): ..／secret is a dot-segment there. (Not
	// to the URL parsers above, which look for '/' itself.)
	if !isASCII(dec) {
		dec = lookalikeSlashes.Replace(dec)
	}
	// Every request's path passes here: segments are walked, not split
	// into a slice, and only a segment with non-ASCII bytes can hold a
	// look-alike dot.
	for seg := range strings.SplitSeq(dec, "/") {
		s := seg
		if !isASCII(s) {
			s = lookalikeDots.Replace(s)
		}
		s, _, _ = strings.Cut(s, ";")
		if d := nfkcDots.Replace(s); d == "." || d == ".." {
			return invalid("path has the dot-segment %s, which servers resolve differently; send the path resolved", strconv.Quote(seg))
		}
		if why := windowsAlias(seg, s); why != "" {
			return invalid("path has the segment %s, %s, which Windows servers read as another name", strconv.Quote(seg), why)
		}
	}
	// Only a literal ';' starts parameters: an escaped one (%3B) is data
	// to every server, as in an object name.
	for seg := range strings.SplitSeq(escaped, "/") {
		if strings.IndexByte(seg, ';') >= 0 {
			return invalid("path has the parameter segment %s, which servers strip differently", strconv.Quote(seg))
		}
	}
	return nil
}

// escapeAt is the index of the first percent-escape (%XX) in s, or -1.
func escapeAt(s string) int {
	for i := 0; i+2 < len(s); i++ {
		if s[i] == '%' && isHex(s[i+1]) && isHex(s[i+2]) {
			return i
		}
	}
	return -1
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// lookalikeDots are the characters Windows' best-fit mapping (IIS) and some
// Java servers turn into '.': a segment of them is a dot-segment there,
// and one ending in one ends in a dot.
var lookalikeDots = strings.NewReplacer("\uff0e", ".", "\u2024", ".", "\ufe52", ".")

// lookalikeSlashes are the characters NFKC or Windows' best-fit mapping
// make '/' or a backslash (a separator to Windows servers): fullwidth
// solidus and reverse solidus, small reverse solidus, division slash,
// fraction slash, set minus and the big solidi, and the yen and won signs
// (a backslash in Japanese and Korean code pages).
var lookalikeSlashes = strings.NewReplacer("\uff0f", "/", "\uff3c", "/", "\ufe68", "/", "\u2215", "/", "\u2044", "/",
	"\u2216", "/", "\u29f5", "/", "\u29f8", "/", "\u29f9", "/", "\u00a5", "/", "\u20a9", "/")

// nfkcDots are what Unicode compatibility normalisation (NFKC) makes two
// or three dots: a segment of them alone is a dot-segment to a server that
// normalises. An honest title ends in an ellipsis ("Und täglich…"), so
// they count for the dot-segment only.
var nfkcDots = strings.NewReplacer("\u2025", "..", "\u2026", "...")

// windowsAlias says why a path segment (seg as sent, s with look-alike
// dots made dots) may name another file to a server on Windows (IIS), or
// "".
func windowsAlias(seg, s string) string {
	switch {
	case strings.Contains(s, ":$"):
		return "an NTFS stream"
	case seg != s && strings.HasSuffix(s, "."):
		return "ending in a look-alike dot"
	}
	return ""
}
