package testutil

import (
	"net/url"
	"strings"
)

// ServerReadings are the ways a server behind the proxy may read an escaped
// path: decoded once or, behind another decoding hop, twice; with ";params"
// stripped (Tomcat, Spring) before or after decoding. Fuzz targets use it
// as an oracle independent of the policies package.
func ServerReadings(escaped string) []string {
	var out []string
	add := func(s string, err error) {
		if err == nil {
			out = append(out, s)
		}
	}
	once, err := url.PathUnescape(escaped)
	add(once, err)
	if err == nil {
		add(url.PathUnescape(once))
		add(stripParams(once), nil)
	}
	add(url.PathUnescape(stripParams(escaped)))
	return out
}

func stripParams(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i], _, _ = strings.Cut(s, ";")
	}
	return strings.Join(segs, "/")
}

// lookalikeDots are the characters some servers (IIS's best-fit mapping,
// some Java servers) read as '.'.
var lookalikeDots = strings.NewReplacer("\uff0e", ".", "\u2024", ".", "\ufe52", ".")

// DotSegment returns the first segment of a server's reading that it
// resolves as "." or "..", with '\' as a separator and look-alike dots as
// dots, or "".
func DotSegment(reading string) string {
	for _, seg := range strings.FieldsFunc(lookalikeDots.Replace(reading), func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == "." || seg == ".." {
			return seg
		}
	}
	return ""
}
