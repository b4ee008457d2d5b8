package c1

import (
	"encoding/json"
	"strings"
	"testing"
)

// What --json, a spawn's result line and the memory file print is JSON
// with the C1 control characters escaped too (encoding/json leaves them
// raw): a terminal acts on a raw CSI or OSC, and the data reads back the
// same.
func TestEscape(t *testing.T) {
	raw, err := json.Marshal(map[string]string{"detail": "a\u009b2J\u009d0;x\u0007é"})
	if err != nil {
		t.Fatal(err)
	}
	got := Escape(raw)
	if strings.ContainsAny(string(got), "\u009b\u009d") {
		t.Errorf("Escape left a C1 control: %q", got)
	}
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil || back["detail"] != "a\u009b2J\u009d0;x\u0007é" {
		t.Errorf("Escape(%q) = %q reads back as %q, %v", raw, got, back["detail"], err)
	}
}
