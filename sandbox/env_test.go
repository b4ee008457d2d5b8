package sandbox

import (
	"slices"
	"strings"
	"testing"
)

// ReservedEnv is exactly what Environment sets for the proxy and its CA,
// so a caller refusing those names (a kind's env) cannot fall behind.
func TestReservedEnvIsWhatEnvironmentSets(t *testing.T) {
	plain, err := Environment(EnvOptions{})
	if err != nil {
		t.Fatal(err)
	}
	routed, err := Environment(EnvOptions{ProxyURL: "http://127.0.0.1:3128", CABundle: "/ca.pem"})
	if err != nil {
		t.Fatal(err)
	}
	var set []string
	for _, kv := range routed {
		if !slices.Contains(plain, kv) {
			k, _, _ := strings.Cut(kv, "=")
			set = append(set, k)
		}
	}
	want := ReservedEnv()
	slices.Sort(set)
	slices.Sort(want)
	if !slices.Equal(set, want) {
		t.Errorf("Environment sets %v for the proxy and CA; ReservedEnv = %v", set, want)
	}
}

// A variable the sandbox sets for its proxy and CA is not the caller's to
// set over it: it would route the command's clients elsewhere.
func TestEnvironmentRefusesReservedSets(t *testing.T) {
	for _, kv := range []string{"HTTPS_PROXY=http://elsewhere:1", "https_proxy=http://elsewhere:1", "SSL_CERT_FILE=/mine.pem", "NO_PROXY=*"} {
		_, err := Environment(EnvOptions{ProxyURL: "http://127.0.0.1:3128", CABundle: "/ca.pem", Set: []string{kv}})
		if err == nil || !strings.Contains(err.Error(), "the sandbox sets it") {
			t.Errorf("Set %s with the proxy's variables: %v; want a refusal saying why", kv, err)
		}
	}
	// With no proxy (--net none) they are the caller's.
	env, err := Environment(EnvOptions{Set: []string{"HTTPS_PROXY=http://elsewhere:1"}})
	if err != nil || !slices.Contains(env, "HTTPS_PROXY=http://elsewhere:1") {
		t.Errorf("Set HTTPS_PROXY with no proxy: %v, %v", env, err)
	}
}
