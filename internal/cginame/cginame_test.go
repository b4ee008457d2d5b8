package cginame

import "testing"

func TestSame(t *testing.T) {
	for _, tc := range []struct {
		k, name string
		want    bool
	}{
		{"X-Api-Key", "X-Api-Key", true},
		{"x_api_KEY", "X-Api-Key", true},
		{"X.Api.Key", "X-Api-Key", true},
		{"X~Api~Key", "X-Api-Key", true},
		{"X-Api-Key", "x.api.key", true}, // the name's own punctuation is any too
		{"X-Api-Keys", "X-Api-Key", false},
		{"X-Api-Ke", "X-Api-Key", false},
		{"XaApi-Key", "X-Api-Key", false}, // a letter is not a separator
		{"X-Api-Kez", "X-Api-Key", false},
		{"X\x10", "X0", false}, // '0'|0x20 is itself: only a digit is a digit
		{"X-Real-Ip", "X-Real-IP", true},
	} {
		if got := Same(tc.k, tc.name); got != tc.want {
			t.Errorf("Same(%q, %q) = %v, want %v", tc.k, tc.name, got, tc.want)
		}
	}
}

func TestHasPrefix(t *testing.T) {
	for _, tc := range []struct {
		k, prefix string
		want      bool
	}{
		{"X-Forwarded-For", "X-Forwarded-", true},
		{"x_forwarded_host", "X-Forwarded-", true},
		{"X.Forwarded.Proto", "X-Forwarded-", true},
		{"X~Forwarded~Anything", "X-Forwarded-", true},
		{"X-Forwarded-", "X-Forwarded-", true},
		{"X-Forwarded", "X-Forwarded-", false},
		{"X-ForwardedFor", "X-Forwarded-", false},
		{"Forwarded", "X-Forwarded-", false},
	} {
		if got := HasPrefix(tc.k, tc.prefix); got != tc.want {
			t.Errorf("HasPrefix(%q, %q) = %v, want %v", tc.k, tc.prefix, got, tc.want)
		}
	}
}

func TestOneOf(t *testing.T) {
	names := []string{"X-Original-Url", "X-Rewrite-Url"}
	if !OneOf("x.rewrite_URL", names) || OneOf("X-Rewrite-Urls", names) || OneOf("X-Rewrite-Url", nil) {
		t.Errorf("OneOf: want x.rewrite_URL among %q, and neither X-Rewrite-Urls nor anything among none", names)
	}
}
