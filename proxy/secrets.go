package proxy

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
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

// Given is a value handed to a sandbox's command: how (a flag, a field),
// the variable's name and its value.
type Given struct{ By, Name, Value string }

// HandedSecret refuses to give a sandbox's command a value holding a
// credential p injects: the proxy adds it to the requests p's rule allows
// so that the command never holds it, and a command given it holds it all
// the same. The error names the variable, rule and header, never the
// value. A secret the proxy cannot read is no one's to find.
func HandedSecret(p policies.Preset, gives []Given) error {
	for _, r := range p.Rules {
		headers := slices.Sorted(maps.Keys(r.Inject))
		for _, h := range headers {
			// As it is, not as the proxy would send it: one it refuses
			// (a trailing space) is not injected, but is the credential
			// all the same.
			raw, _, err := SecretValue(r.Inject[h])
			if err != nil {
				continue // reported as the proxy starts
			}
			held := []string{strings.TrimSpace(raw)}
			if strings.HasPrefix(strings.ToLower(r.Inject[h].Format), "basic ") {
				// user:pass, and the password alone, as a client given
				// them would hold them; not one so short that any value
				// could hold it (the "x" of "TOKEN:x").
				if dec, err := base64.StdEncoding.DecodeString(held[0]); err == nil {
					_, pass, _ := strings.Cut(string(dec), ":")
					for _, part := range []string{string(dec), pass} {
						if len(part) >= 8 {
							held = append(held, part)
						}
					}
				}
			}
			for _, g := range gives {
				if slices.ContainsFunc(held, func(secret string) bool { return secret != "" && strings.Contains(g.Value, secret) }) {
					return fmt.Errorf("%s %s: it holds the credential preset %q's rule %q injects (header %s), which the proxy adds to the requests the rule allows so that the command never holds it; drop it, or give a client that wants one a placeholder (%s=placeholder)", g.By, g.Name, p.Name, r.Name, h, g.Name)
				}
			}
		}
	}
	return nil
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
