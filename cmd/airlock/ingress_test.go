package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/supervisor/ingress"
)

func TestIngressKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ingress.keys")
	newKey := func(args ...string) string {
		t.Helper()
		code, out, errs := airlock(t, "", append([]string{"ingress", "key", "--keys", file}, args...)...)
		key := strings.TrimSuffix(out, "\n")
		if code != ExitOK || !strings.HasPrefix(key, "alk_") || strings.ContainsAny(key, "\n ") {
			t.Fatalf("airlock ingress key %v = %d %q %s; want the key alone on stdout", args, code, out, errs)
		}
		return key
	}
	alice := newKey("--operator", "alice")
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file = %v, %v; want mode 0600", st, err)
	}
	bob := newKey("--operator", "bob@example.test")

	code, out, errs := airlock(t, "", "ingress", "key", "--operator", "alice", "--keys", file)
	if code != ExitError || out != "" || !strings.Contains(errs, "--replace") || !strings.Contains(errs, file+":1") {
		t.Fatalf("a second key for alice = %d %q %q; want exit %d naming %s:1 and --replace, nothing on stdout", code, out, errs, ExitError, file)
	}
	alice2 := newKey("--operator", "alice", "--replace")

	raw, _ := os.ReadFile(file)
	if want := "bob@example.test " + ingress.HashKey(bob) + "\nalice " + ingress.HashKey(alice2) + "\n"; string(raw) != want {
		t.Fatalf("key file =\n%s\nwant\n%s", raw, want)
	}
	for _, key := range []string{alice, bob, alice2} {
		if strings.Contains(string(raw), key) {
			t.Fatalf("key file holds a key, not only its hash:\n%s", raw)
		}
	}
	keys, err := ingress.LoadKeys(file)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{alice: "", alice2: "alice", bob: "bob@example.test"} {
		if op, _ := keys.Operator(key); op != want {
			t.Errorf("Operator(%s) = %q; want %q", key, op, want)
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ingress", "key", "--keys", file}, "--operator and --keys are required"},
		{[]string{"ingress", "key", "--operator", "carol"}, "--operator and --keys are required"},
		{[]string{"ingress", "key", "--operator", "car ol", "--keys", file}, `--operator "car ol"`},
		{[]string{"ingress", "key", "--operator", "carol", "--keys", file, "extra"}, `unexpected argument "extra"`},
	} {
		if code, out, errs := airlock(t, "", tc.args...); code != ExitUsage || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("airlock %q = %d %q %q; want exit %d naming %q", tc.args, code, out, errs, ExitUsage, tc.want)
		}
	}
	if raw2, _ := os.ReadFile(file); string(raw2) != string(raw) {
		t.Errorf("a refused command changed the key file")
	}
}
