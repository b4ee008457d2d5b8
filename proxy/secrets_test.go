package proxy

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// The injected header replaces the client's under every spelling a server
// may fold into the same name, so the client's value cannot win upstream.
func TestInjectReplacesEverySpelling(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_KEY", "operator")
	p := &Proxy{cfg: Config{Secrets: EnvSecrets{}}}
	h := http.Header{"X-Api-Key": {"mine"}, "X_api_key": {"mine"}, "X_Api-Key": {"mine"}, "Accept": {"*/*"}}
	if _, err := p.inject(h, map[string]policies.SecretRef{"x-api-key": {Env: "AIRLOCK_TEST_KEY"}}); err != nil {
		t.Fatal(err)
	}
	want := http.Header{"X-Api-Key": {"operator"}, "Accept": {"*/*"}, "Accept-Encoding": {"identity"}}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("headers after inject = %v; want %v", h, want)
	}
}
