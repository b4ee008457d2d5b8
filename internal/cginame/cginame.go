// Package cginame compares HTTP header names as a server behind CGI's
// naming reads them. CGI makes a header's name an environment variable,
// HTTP_ and the name upper-cased with every byte that is no letter or
// digit a "_" (lighttpd; PHP, Rack and WSGI behind it): X_Api_Key,
// X.Api.Key and X~Api~Key are all HTTP_X_API_KEY there, as X-Api-Key is,
// and of two the one written last wins. A header that must be the only
// one of its name upstream (one set in place of the client's, one taken
// away) is found under every such spelling.
//
// Names are compared byte by byte, nothing made: every header of every
// request goes through here.
package cginame

// Same says whether header k is name to such a server: of one length,
// letters in any case, and any byte but a letter or digit of k for any
// such byte of name (name's own punctuation is not told apart either).
func Same(k, name string) bool {
	return len(k) == len(name) && HasPrefix(k, name)
}

// HasPrefix says whether header k begins with prefix, read so
// (X_Forwarded_Host begins with X-Forwarded-).
func HasPrefix(k, prefix string) bool {
	if len(k) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c, n := k[i], prefix[i]
		if !alnum(n) {
			if alnum(c) {
				return false
			}
		} else if c|0x20 != n|0x20 || !alnum(c) {
			return false
		}
	}
	return true
}

// OneOf says whether header k is any of names, read so.
func OneOf(k string, names []string) bool {
	for _, name := range names {
		if Same(k, name) {
			return true
		}
	}
	return false
}

func alnum(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' || '0' <= c && c <= '9' }
