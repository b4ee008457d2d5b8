package policies

import "strings"

// fold is the library's _fold (lib/airlock.rego): a string case folded as
// servers that fold by upper-casing fold it, and fullwidth ASCII and
// look-alike slashes as NFKC makes them. Deny rules match paths, query
// parameter names (_param_key) and query values by it; the hint names the
// git operation a deny rule on the service param read (GitOperation), so
// it folds as the library does. TestFoldMirrorsLibrary holds the two
// together.
func fold(s string) string {
	if isASCII(s) { // the common case: nothing to fold but its case
		return strings.ToLower(s)
	}
	return caseFolds.Replace(strings.ToLower(s))
}

// caseFolds is the library's _case_folds, in its order and with its
// comments.
var caseFolds = strings.NewReplacer(caseFoldPairs...)

var caseFoldPairs = []string{
	"\u017f", "s", // ſ long s
	"\u0131", "i", // ı dotless i
	"\u00df", "ss", // ß sharp s (ẞ is ß once lower)
	"\ufb00", "ff",
	"\ufb01", "fi",
	"\ufb02", "fl",
	"\ufb03", "ffi",
	"\ufb04", "ffl",
	"\ufb05", "st",
	"\ufb06", "st",
	// Look-alike slashes (NFKC's, and Windows' best-fit): /public／secret
	// is /public/secret to a server that maps them. (The fullwidth ones
	// are below.)
	"\ufe68", "/",
	"\u2215", "/",
	"\u2044", "/",
	"\u2216", "/",
	"\u29f5", "/",
	"\u29f8", "/",
	"\u29f9", "/",
	// Fullwidth ASCII, which NFKC makes ASCII: /ａｄｍｉｎ is /admin there
	// (its capitals are small letters once lower()'s).
	"\uff01", "!",
	"\uff02", "\"",
	"\uff03", "#",
	"\uff04", "$",
	"\uff05", "%",
	"\uff06", "&",
	"\uff07", "'",
	"\uff08", "(",
	"\uff09", ")",
	"\uff0a", "*",
	"\uff0b", "+",
	"\uff0c", ",",
	"\uff0d", "-",
	"\uff0e", ".",
	"\uff0f", "/",
	"\uff10", "0",
	"\uff11", "1",
	"\uff12", "2",
	"\uff13", "3",
	"\uff14", "4",
	"\uff15", "5",
	"\uff16", "6",
	"\uff17", "7",
	"\uff18", "8",
	"\uff19", "9",
	"\uff1a", ":",
	"\uff1b", ";",
	"\uff1c", "<",
	"\uff1d", "=",
	"\uff1e", ">",
	"\uff1f", "?",
	"\uff20", "@",
	"\uff3b", "[",
	"\uff3c", "/", // a separator to Windows servers
	"\uff3d", "]",
	"\uff3e", "^",
	"\uff3f", "_",
	"\uff40", "`",
	"\uff41", "a",
	"\uff42", "b",
	"\uff43", "c",
	"\uff44", "d",
	"\uff45", "e",
	"\uff46", "f",
	"\uff47", "g",
	"\uff48", "h",
	"\uff49", "i",
	"\uff4a", "j",
	"\uff4b", "k",
	"\uff4c", "l",
	"\uff4d", "m",
	"\uff4e", "n",
	"\uff4f", "o",
	"\uff50", "p",
	"\uff51", "q",
	"\uff52", "r",
	"\uff53", "s",
	"\uff54", "t",
	"\uff55", "u",
	"\uff56", "v",
	"\uff57", "w",
	"\uff58", "x",
	"\uff59", "y",
	"\uff5a", "z",
	"\uff5b", "{",
	"\uff5c", "|",
	"\uff5d", "}",
	"\uff5e", "~",
}
