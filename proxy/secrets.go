package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/cginame"
	"github.com/airlock-sandbox/airlock/policies"
)

// SecretSource resolves a credential the policy asks the proxy to inject.
type SecretSource interface {
	Lookup(ref policies.SecretRef) (string, error)
}

// EnvSecrets reads secrets from the proxy's own environment or from files.
// The sandbox never sees either.
type EnvSecrets struct{}

func (EnvSecrets) Lookup(ref policies.SecretRef) (string, error) {
	v, source, err := SecretValue(ref)
	if err != nil {
		return "", err
	}
	if why := unsendable(v); why != "" {
		return "", fmt.Errorf("%s: the secret %s", source, why)
	}
	return v, nil
}

// SecretValue is what ref names, as it is (a file's trailing line breaks
// aside), whether or not it could be sent, and where it is read from:
// what must not reach a sandbox either way.
func SecretValue(ref policies.SecretRef) (v, source string, err error) {
	switch {
	case ref.Env != "":
		v, source = os.Getenv(ref.Env), "environment variable "+ref.Env
		if v == "" {
			return "", source, fmt.Errorf("%s is not set in the proxy", source)
		}
	case ref.File != "":
		raw, err := os.ReadFile(ref.File)
		if err != nil {
			return "", "", fmt.Errorf("secret file %s: %w", ref.File, errors.Unwrap(err))
		}
		v, source = strings.TrimRight(string(raw), "\r\n"), "secret file "+ref.File
		if v == "" {
			return "", source, fmt.Errorf("%s is empty", source)
		}
	default:
		return "", "", errors.New("secret reference names neither env nor file")
	}
	return v, source, nil
}

// unsendable says why secret is refused, if it is, without quoting it. A
// line break would end the header. Whitespace at either end is trimmed
// from a header value as it is written, so an upstream would echo other
// bytes than those the response is scrubbed of (an env var set with a
// trailing space, a file with a trailing tab). Other control bytes are
// refused by the transport, but for a tab, which no credential holds.
func unsendable(secret string) string {
	switch {
	case strings.ContainsAny(secret, "\r\n"):
		return "contains a line break"
	case strings.TrimSpace(secret) != secret:
		return "begins or ends with whitespace"
	case strings.ContainsFunc(secret, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "contains a control character"
	}
	return ""
}

// CheckSecrets resolves every secret p's rules inject, so that a missing
// one stops the proxy from starting (or a policy from being reloaded)
// instead of being found by the first request that needs it, which is
// still refused (secret_unavailable) should a secret go missing later. The
// error names each rule, header and source, never a value.
func CheckSecrets(src SecretSource, p policies.Preset) error {
	var errs []error
	for _, r := range p.Rules {
		names := make([]string, 0, len(r.Inject))
		for name := range r.Inject {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if _, err := src.Lookup(r.Inject[name]); err != nil {
				errs = append(errs, fmt.Errorf("preset %q rule %q injects header %s, and the proxy lacks its secret: %w", p.Name, r.Name, name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// inject sets every header the decision names, replacing whatever the
// client sent, under any spelling a server may read as the same name (CGI,
// WSGI and PHP map X_Api_Key and X-Api-Key alike to HTTP_X_API_KEY, and the
// client's could win). If any secret is missing the request must not be
// sent: the error says which, without the value. The returned scrubber
// (nil when nothing was injected) masks the secrets in the response; the
// request asks for it uncompressed, so that they can be found there.
func (p *Proxy) inject(h http.Header, refs map[string]policies.SecretRef) (*scrubber, error) {
	var forms []string
	for name, ref := range refs {
		secret, err := p.cfg.Secrets.Lookup(ref)
		if err != nil {
			return nil, fmt.Errorf("header %s: %v", name, err)
		}
		v := secret
		if ref.Format != "" {
			v = strings.Replace(ref.Format, "%s", secret, 1)
		}
		// As CGI names it (X.Api.Key and X~Api~Key are HTTP_X_API_KEY
		// to lighttpd).
		for k := range h {
			if cginame.Same(k, name) {
				delete(h, k)
			}
		}
		h.Set(name, v)
		forms = append(forms, secretForms(secret, ref.Format)...)
	}
	if len(forms) > 0 {
		h.Set("Accept-Encoding", "identity")
		// A range of an echo is a secret cut where no match sees it:
		// the agent could fetch one in pieces and join them.
		h.Del("Range")
		h.Del("If-Range")
	}
	return newScrubber(forms), nil
}
