package testutil

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// Environ is the value of name in the environment process pid was started
// with ("" when it has none).
func Environ(t testing.TB, pid int, name string) string {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(string(raw), "\x00") {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}
