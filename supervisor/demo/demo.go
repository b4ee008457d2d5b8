// Package demo holds the demo pod that `airlock up` boots when it is given
// no manifest (`make run`): a Node gateway (HTTP and WebSocket on 18789)
// and a Python shim (an OpenAI-style bridge on 8901), each in its own
// sandbox under its own preset, and the stand-in model API the shim calls
// through the proxy. The scripts use their language's standard library
// only: the sandboxes have nothing else.
package demo

import "embed"

// Files are pod.yaml, gateway.js and shim.py. The manifest's paths are
// relative, and its state_dir is ".": write the files into one directory
// and parse the manifest with that directory as its base
// (manifest.Parse("pod.yaml", Manifest, dir)).
//
//go:embed pod.yaml gateway.js shim.py
var Files embed.FS

// Manifest is pod.yaml.
//
//go:embed pod.yaml
var Manifest []byte

// ModelHost and ModelPort are where the shim finds the model API:
// api.model.test, pinned by the manifest's resolve entry to the
// loopback address the stand-in serves on.
const (
	ModelHost = "api.model.test"
	ModelPort = 18443
)
