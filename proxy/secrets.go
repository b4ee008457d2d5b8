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
	"strconv"
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

// Given is a value handed to a sandbox's command: how (a flag, a field,
// "argument"), the variable's name (an argument's position) and its value.
type Given struct{ By, Name, Value string }

// Gives are what a command is handed: each KEY=VALUE of env, by by, and
// each of args, its arguments after the program.
func Gives(by string, env, args []string) []Given {
	var gives []Given
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		gives = append(gives, Given{By: by, Name: k, Value: v})
	}
	for i, a := range args {
		gives = append(gives, Given{By: "argument", Name: strconv.Itoa(i + 1), Value: a})
	}
	return gives
}

// HandedSecret refuses to give a sandbox's command a value holding a
// credential p injects, in a variable's value or name or an argument: the
// proxy adds it to the requests p's rule allows so that the command never
// holds it, and a command given it holds it all the same. The error names
// the variable (not one whose name holds it) or argument, rule and
// header, never the value. A secret the proxy cannot read is no one's to
// find. It catches a mistake; it is no boundary (a secret split in two,
// or in a file the command may read, passes).
func HandedSecret(p policies.Preset, gives []Given) error {
	for _, r := range p.Rules {
		headers := slices.Sorted(maps.Keys(r.Inject))
		for _, h := range headers {
			held := heldForms(r.Inject[h])
			holds := func(v string) bool {
				return slices.ContainsFunc(held, func(secret string) bool {
					// A short one (a local server's dummy "x") is
					// found whole only: inside, any script holds it.
					if len(secret) < minHeld {
						return v == secret
					}
					return strings.Contains(v, secret)
				})
			}
			why := fmt.Sprintf("the credential preset %q's rule %q injects (header %s), which the proxy adds to the requests the rule allows so that the command never holds it", p.Name, r.Name, h)
			for _, g := range gives {
				switch {
				case g.By != "argument" && holds(g.Name):
					return fmt.Errorf("%s: a variable's name holds %s; drop it", g.By, why)
				case !holds(g.Value):
				case g.By == "argument":
					return fmt.Errorf("argument %s of the command: it holds %s; drop it", g.Name, why)
				default:
					return fmt.Errorf("%s %s: it holds %s; drop it, or give a client that wants one a placeholder (%s=placeholder)", g.By, g.Name, why, g.Name)
				}
			}
		}
	}
	return nil
}

// minHeld is the shortest secret found inside a value; a shorter one only
// as the whole value.
const minHeld = 8

// heldForms are the forms of ref's secret a command given it would hold:
// as it is, not as the proxy would send it (one it refuses, with a
// trailing space, is not injected, but is the credential all the same);
// for Basic, user:pass decoded and its password, or its user where the
// password is no secret (the token of "TOKEN:x"; a user beside a password
// is a name, often public: x-access-token), but not a part so short that
// any value could hold it.
func heldForms(ref policies.SecretRef) []string {
	raw, _, err := SecretValue(ref)
	if err != nil || strings.TrimSpace(raw) == "" {
		return nil // reported as the proxy starts
	}
	held := []string{strings.TrimSpace(raw)}
	if strings.HasPrefix(strings.ToLower(ref.Format), "basic ") {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
			dec, err := enc.DecodeString(held[0])
			if err != nil {
				continue
			}
			user, pass, _ := strings.Cut(string(dec), ":")
			held = append(held, string(dec))
			if len(pass) >= minHeld {
				held = append(held, pass)
			} else if len(user) >= minHeld {
				held = append(held, user)
			}
		}
	}
	return held
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
