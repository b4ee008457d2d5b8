package policies_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// fuzzExes are executables the embedded presets name, and one they do not.
var fuzzExes = []string{"/usr/bin/curl", "/usr/lib/git-core/git-remote-http", "/usr/bin/node", "/usr/bin/python3.11", "/usr/bin/gh", "/tmp/evil"}

// The decision for a request as the proxy asks it (raw fields, through the
// cached engine) is the decision `airlock policy eval` gives for its
// canonical form read back from JSON (an uncached engine): canonicalising
// again, a JSON round trip and the cache change nothing. An allowed request
// is one the canonicaliser accepted.
func FuzzDecideCanonical(f *testing.F) {
	ctx := context.Background()
	cached := embedded(f)
	oracle := embedded(f, func(o *policies.Options) { o.CacheSize = -1 })
	presetNames := cached.Presets()
	f.Fuzz(func(t *testing.T, preset, exe uint8, connect bool, host string, port int, method, path, rawQuery string, websocket bool) {
		in := &policies.Input{
			Sandbox: policies.Sandbox{ID: "fuzz", Preset: presetNames[int(preset)%len(presetNames)]},
			Process: policies.Process{PID: 1, Exe: fuzzExes[int(exe)%len(fuzzExes)]},
			Request: policies.Request{Phase: policies.PhaseRequest, Host: host, Port: port,
				Method: method, Path: path},
		}
		if connect {
			in.Request.Phase = policies.PhaseConnect
			in.Request.Method, in.Request.Path = "", ""
		}
		if q, err := url.ParseQuery(rawQuery); err == nil && len(q) > 0 {
			in.Request.Query = q
		}
		if websocket {
			in.Request.Upgrade = "websocket"
		}
		raw := *in
		got := cached.Decide(ctx, in) // canonicalises in, in place
		if want := oracle.Decide(ctx, &raw); !sameDecision(got, want) {
			t.Fatalf("cached decision %+v, uncached %+v for %+v", got, want, raw.Request)
		}
		if got.Reason == policies.ReasonInvalidRequest {
			if got.Allow {
				t.Fatalf("invalid request allowed: %+v", got)
			}
			return
		}
		if strings.ContainsAny(in.Request.Path, "%;") {
			return // decoded once; see Canonicalize
		}
		var doc bytes.Buffer
		if err := json.NewEncoder(&doc).Encode(in); err != nil {
			t.Fatal(err)
		}
		// As `airlock policy eval --input` reads it.
		dec := json.NewDecoder(&doc)
		dec.DisallowUnknownFields()
		var replay policies.Input
		if err := dec.Decode(&replay); err != nil {
			t.Fatalf("canonical input %s does not decode: %v", doc.String(), err)
		}
		if want := oracle.Decide(ctx, &replay); !sameDecision(got, want) {
			t.Fatalf("decision %+v for %+v, but %+v for its canonical form %s", got, raw.Request, want, doc.String())
		}
	})
}

func sameDecision(a, b policies.Decision) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}
