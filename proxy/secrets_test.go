package proxy

import (
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// The injected header replaces the client's under every spelling a server
// may fold into the same name, so the client's value cannot win upstream.
func TestInjectReplacesEverySpelling(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_KEY", "operator")
	p := &Proxy{cfg: Config{Secrets: EnvSecrets{}}}
	h := http.Header{"X-Api-Key": {"mine"}, "X_api_key": {"mine"}, "X_Api-Key": {"mine"}, "X.Api.Key": {"mine"}, "X~api~key": {"mine"},
		"X-Api-Keys": {"theirs"}, "Accept": {"*/*"}}
	if _, err := p.inject(h, map[string]policies.SecretRef{"x-api-key": {Env: "AIRLOCK_TEST_KEY"}}); err != nil {
		t.Fatal(err)
	}
	want := http.Header{"X-Api-Key": {"operator"}, "X-Api-Keys": {"theirs"}, "Accept": {"*/*"}, "Accept-Encoding": {"identity"}}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("headers after inject = %v; want %v", h, want)
	}
	// A name the rule spells with other punctuation is the same name.
	h = http.Header{"X-Api-Key": {"mine"}}
	if _, err := p.inject(h, map[string]policies.SecretRef{"x.api.key": {Env: "AIRLOCK_TEST_KEY"}}); err != nil {
		t.Fatal(err)
	}
	if want := (http.Header{"X.api.key": {"operator"}, "Accept-Encoding": {"identity"}}); !reflect.DeepEqual(h, want) {
		t.Fatalf("headers after inject of x.api.key = %v; want %v", h, want)
	}
}

// CheckSecrets names every rule, header and source whose secret is
// missing, and passes when all are there.
func TestCheckSecretsNamesWhatIsMissing(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_KEY", "operator")
	file := filepath.Join(t.TempDir(), "token")
	p := policies.Preset{Name: "p", Rules: []policies.Rule{
		{Name: "ok", Inject: map[string]policies.SecretRef{"x-api-key": {Env: "AIRLOCK_TEST_KEY"}}},
		{Name: "model", Inject: map[string]policies.SecretRef{"authorization": {Env: "AIRLOCK_TEST_UNSET", Format: "Bearer %s"}}},
		{Name: "files", Inject: map[string]policies.SecretRef{"x-token": {File: file}}},
		{Name: "none"},
	}}
	err := CheckSecrets(EnvSecrets{}, p)
	for _, want := range []string{`rule "model" injects header authorization`, "AIRLOCK_TEST_UNSET", `rule "files" injects header x-token`, file} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckSecrets = %v; want it to name %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), `"ok"`) {
		t.Errorf("CheckSecrets = %v; names a rule whose secret is there", err)
	}
	t.Setenv("AIRLOCK_TEST_UNSET", "set now")
	os.WriteFile(file, []byte("t\n"), 0o600)
	if err := CheckSecrets(EnvSecrets{}, p); err != nil {
		t.Fatalf("CheckSecrets with every secret present = %v", err)
	}
}
