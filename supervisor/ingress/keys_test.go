package ingress

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/trusted"
)

// writeKeys writes a key file with the given mode and returns its path.
func writeKeys(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // WriteFile's mode is masked by the umask
		t.Fatal(err)
	}
	return p
}

func TestLoadKeysRefuses(t *testing.T) {
	good := HashKey("alk_a")
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		want          string // in the error, after the path
	}{
		{"empty", "", 0o600, "no keys"},
		{"only comments", "# nobody yet\n\n   \n", 0o600, "no keys"},
		{"one field", "alice\n", 0o600, ":1: want `OPERATOR sha256:HEX`, got 1 fields"},
		{"three fields", "# c\nalice " + good + " extra\n", 0o600, ":2: want `OPERATOR sha256:HEX`, got 3 fields"},
		{"bad operator", "al/ice " + good + "\n", 0o600, `:1: operator "al/ice"`},
		{"the key itself", "alice alk_a\n", 0o600, `:1: operator alice: the hash must start with "sha256:"`},
		{"short hash", "alice " + good[:len(good)-2] + "\n", 0o600, ":1: operator alice: the hash must be 64 hex digits"},
		{"not hex", "alice sha256:" + strings.Repeat("g", 64) + "\n", 0o600, ":1: operator alice: the hash must be 64 hex digits"},
		{"duplicate hash", "alice " + good + "\n\nbob " + good + "\n", 0o600, ":3: the same key hash as line 1"},
		{"world writable", "alice " + good + "\n", 0o666, "mode 0666 is writable by group or others"},
		{"group writable", "alice " + good + "\n", 0o620, "mode 0620 is writable by group or others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeKeys(t, tc.content, tc.mode)
			k, err := LoadKeys(p)
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadKeys(%q) = %v, %v; want an error naming %s and %q", tc.content, k, err, p, tc.want)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "no-such-keys")
		if _, err := LoadKeys(p); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), p) {
			t.Fatalf("LoadKeys(missing) = %v; want ErrNotExist naming %s", err, p)
		}
	})
	t.Run("in a directory others may write", func(t *testing.T) {
		p := writeKeys(t, "alice "+good+"\n", 0o600)
		if err := os.Chmod(filepath.Dir(p), 0o775); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadKeys(p); !errors.Is(err, trusted.ErrUntrusted) || !strings.Contains(err.Error(), "its directory") {
			t.Fatalf("LoadKeys(in a group-writable directory) = %v; want it refused, naming the directory", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		p := t.TempDir()
		if _, err := LoadKeys(p); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("LoadKeys(dir) = %v; want not a regular file", err)
		}
	})
}

func TestLoadKeysAndOperator(t *testing.T) {
	alice, _ := NewKey()
	alice2, _ := NewKey()
	bob, _ := NewKey()
	// carol's line holds her hash with its last hex digit changed: a
	// comparison that stopped short of the end would take her key.
	carol, _ := NewKey()
	near := []byte(HashKey(carol))
	near[len(near)-1] = "10"[near[len(near)-1]&1]
	p := writeKeys(t, "# operators\nalice "+HashKey(alice)+"\n  bob\t"+HashKey(bob)+"  \nalice "+HashKey(alice2)+"\ncarol "+string(near)+"\n", 0o640)
	k, err := LoadKeys(p)
	if err != nil {
		t.Fatal(err)
	}
	if k.Len() != 4 || k.Path() != p {
		t.Fatalf("LoadKeys = %d keys from %s; want 4 from %s", k.Len(), k.Path(), p)
	}
	// A key of the right length that is not stored, and stored keys with
	// their last byte changed: none names anyone.
	other, _ := NewKey()
	lastByte := func(s string) string { b := []byte(s); b[len(b)-1] ^= 1; return string(b) }
	for _, tc := range []struct{ key, want string }{
		{alice, "alice"}, {alice2, "alice"}, {bob, "bob"},
		{other, ""}, {lastByte(alice), ""}, {lastByte(bob), ""}, {carol, ""},
		{"", ""}, {HashKey(alice), ""}, {alice + " ", ""},
	} {
		op, ok := k.Operator(tc.key)
		if op != tc.want || ok != (tc.want != "") {
			t.Errorf("Operator(%q) = %q, %v; want %q", tc.key, op, ok, tc.want)
		}
	}
	if len(other) != len(alice) {
		t.Fatalf("keys of different lengths: %q %q", other, alice)
	}
}

func TestNewKey(t *testing.T) {
	a, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewKey()
	if a == b || !strings.HasPrefix(a, "alk_") || len(a) != len("alk_")+43 {
		t.Fatalf("NewKey() = %q, %q; want two distinct alk_ keys of 32 random bytes", a, b)
	}
	if h := HashKey("abc"); h != "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf(`HashKey("abc") = %s`, h)
	}
}

func TestAddKey(t *testing.T) {
	p := filepath.Join(t.TempDir(), "keys")
	alice, err := AddKey(p, "alice", false)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode = %v, %v; want 0600", st.Mode(), err)
	}
	// A file whose last line has no newline is appended to on a new line.
	f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("# bob comes next")
	f.Close()
	bob, err := AddKey(p, "bob", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AddKey(p, "alice", false); !errors.Is(err, ErrOperatorExists) || !strings.Contains(err.Error(), p+":1") {
		t.Fatalf("AddKey(alice again) = %v; want ErrOperatorExists naming %s:1", err, p)
	}
	alice2, err := AddKey(p, "alice", true)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(p)
	want := "# bob comes next\nbob " + HashKey(bob) + "\nalice " + HashKey(alice2) + "\n"
	if string(raw) != want {
		t.Fatalf("key file after --replace =\n%s\nwant\n%s", raw, want)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode after replace = %v; want 0600", st.Mode())
	}
	k, err := LoadKeys(p)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{alice: "", alice2: "alice", bob: "bob"} {
		if op, _ := k.Operator(key); op != want {
			t.Errorf("Operator(%s) = %q; want %q", key, op, want)
		}
	}
	if _, err := AddKey(p, "no spaces", false); err == nil || !strings.Contains(err.Error(), `operator "no spaces"`) {
		t.Fatalf("AddKey(bad name) = %v", err)
	}
	os.Chmod(p, 0o666)
	if _, err := AddKey(p, "carol", false); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Fatalf("AddKey to a 0666 file = %v; want refused", err)
	}
	// Run as root, it creates nothing through a link, nor in a
	// directory another user may write (whose links it would follow).
	dir := t.TempDir()
	target := filepath.Join(dir, "nologin")
	link := filepath.Join(dir, "keys")
	os.Symlink(target, link)
	if _, err := AddKey(link, "carol", false); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("AddKey through a link = %v; want refused", err)
	}
	open := t.TempDir()
	os.Chmod(open, 0o777)
	if _, err := AddKey(filepath.Join(open, "keys"), "carol", false); err == nil || !strings.Contains(err.Error(), "its directory") {
		t.Fatalf("AddKey in a directory anyone may write = %v; want refused", err)
	}
	for _, made := range []string{target, filepath.Join(open, "keys")} {
		if _, err := os.Lstat(made); err == nil {
			t.Errorf("%s was created", made)
		}
	}
}
