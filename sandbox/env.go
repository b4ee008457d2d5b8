package sandbox

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
)

// EnvOptions describe the command's environment. Nothing of the launcher's
// own environment passes unless named in Keep: not AIRLOCK_* settings, not
// tokens, not NOTIFY_SOCKET or WATCHDOG_*.
type EnvOptions struct {
	Set  []string // KEY=VAL, last wins
	Keep []string // names copied from the launcher's environment
	// ProxyURL, when set, goes into every proxy variable clients read.
	ProxyURL string
	// CABundle, when set, is the file every CA variable points at.
	CABundle string
}

// The variables the sandbox sets to route the common clients through its
// proxy and have them trust its CA.
var (
	proxyVars   = []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"}
	noProxyVars = []string{"NO_PROXY", "no_proxy"}
	nodeProxy   = "NODE_USE_ENV_PROXY"
	caVars      = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "DENO_CERT"}
)

// ReservedEnv are the names Environment sets to route and trust the
// proxy. A caller that lets others name variables (a kind's env) refuses
// these: egress is the preset's to decide.
func ReservedEnv() []string {
	return slices.Concat(proxyVars, noProxyVars, []string{nodeProxy}, caVars)
}

// reserved is ReservedEnv's names, upper-cased.
var reserved = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range ReservedEnv() {
		m[strings.ToUpper(k)] = true
	}
	return m
}()

// IsReservedEnv reports whether name (any case) is one of ReservedEnv: a
// variable the sandbox sets and a caller's environment may not.
func IsReservedEnv(name string) bool { return reserved[strings.ToUpper(name)] }

// Environment builds the explicit environment of the command.
func Environment(o EnvOptions) ([]string, error) {
	env := map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": "/tmp",
		"LANG": "C.UTF-8",
	}
	for _, k := range o.Keep {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	if o.ProxyURL != "" {
		for _, k := range proxyVars {
			env[k] = o.ProxyURL
		}
		for _, k := range noProxyVars {
			env[k] = "localhost,127.0.0.1,::1"
		}
		env[nodeProxy] = "1"
	}
	if o.CABundle != "" {
		for _, k := range caVars {
			env[k] = o.CABundle
		}
	}
	for _, kv := range o.Set {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--env %q: want KEY=VAL", kv)
		}
		if (o.ProxyURL != "" || o.CABundle != "") && IsReservedEnv(k) {
			return nil, fmt.Errorf("--env %s: the sandbox sets it, to route its clients through its proxy and have them trust its CA", k)
		}
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

// systemRoots are where Debian-like and Red Hat-like systems keep the
// bundle of trusted roots.
var systemRoots = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// WriteCABundle writes the system roots plus the airlock CA into dir
// (world-readable: the sandbox user reads it) and returns its path.
func WriteCABundle(dir string, airlockCA []byte) (string, error) {
	var bundle []byte
	for _, p := range systemRoots {
		if raw, err := os.ReadFile(p); err == nil {
			bundle = append(raw, '\n')
			break
		}
	}
	bundle = append(bundle, airlockCA...)
	path := dir + "/ca-bundle.pem"
	if err := os.WriteFile(path, bundle, 0o644); err != nil {
		return "", fmt.Errorf("write CA bundle: %w", err)
	}
	return path, nil
}
