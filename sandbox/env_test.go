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
