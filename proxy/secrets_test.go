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

// A secret that would not reach the upstream as it is refused, from the
// environment or a file, naming its source and never its value: with
// whitespace at either end (a header value is sent trimmed, and the echo
// of what was sent would not be masked), a line break or another control
// byte. A file's final line break is no part of its secret.
func TestLookupRefusesWhatCannotBeSent(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	for _, tc := range []struct{ value, refused string }{
		{"sk-live-abc123", ""},
		{"sk live abc123", ""},
		{"sk-live-abc123 ", "begins or ends with whitespace"},
		{" sk-live-abc123", "begins or ends with whitespace"},
		{"sk-live-abc123\t", "begins or ends with whitespace"},
		{"sk-live-abc123\u00a0", "begins or ends with whitespace"},
		{"sk-live\rabc123", "contains a line break"},
		{"sk-live\x1babc123", "contains a control character"},
		{"sk-live\tabc123", "contains a control character"},
		{"sk-live\x7fabc123", "contains a control character"},
	} {
		t.Setenv("AIRLOCK_TEST_KEY", tc.value)
		if err := os.WriteFile(file, []byte(tc.value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, src := range []struct {
			ref  policies.SecretRef
			name string
		}{
			{policies.SecretRef{Env: "AIRLOCK_TEST_KEY"}, "environment variable AIRLOCK_TEST_KEY"},
			{policies.SecretRef{File: file}, "secret file " + file},
		} {
			got, err := EnvSecrets{}.Lookup(src.ref)
			switch {
			case tc.refused == "" && (err != nil || got != tc.value):
				t.Errorf("%s holding %q: %q, %v; want it", src.name, tc.value, got, err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), src.name+": the secret "+tc.refused) || strings.Contains(err.Error(), "abc123")):
				t.Errorf("%s holding %q: %q, %v; want it refused, naming the source and not the value: %s", src.name, tc.value, got, err, tc.refused)
			}
		}
	}
}
