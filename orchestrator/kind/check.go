package kind

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/airlock-sandbox/airlock/internal/yamlobj"
	"github.com/airlock-sandbox/airlock/policies"
)

// Check refuses a kind the engine's verified bundle cannot serve on
// substrate (the kind's own when ""). On the local substrate its binary
// must be here, executable and the pinned one; on git it runs on another
// host, whose runner checks the binary against the pin, so only the pin's
// format is checked here.
func (k *Kind) Check(e *policies.Engine, substrate string) error {
	if err := k.CheckPreset(e); err != nil {
		return err
	}
	if cmp.Or(substrate, k.Substrate) == Git {
		return k.checkPin()
	}
	return k.CheckBinary()
}

// checkPin refuses a pin that is not 64 lower-case hex digits (Load
// normalises a valid one so; a Kind built otherwise may not be).
func (k *Kind) checkPin() error {
	if k.SHA256 != "" && !hexPattern.MatchString(k.SHA256) {
		return k.fieldError("binary.sha256", "%q: want 64 lower-case hex digits", k.SHA256)
	}
	return nil
}

// CheckPreset refuses a kind whose preset is not in e's bundle: the error
// names the field and lists the bundle's presets, and wraps
// policies.ErrNoPreset.
func (k *Kind) CheckPreset(e *policies.Engine) error {
	if _, ok := e.Preset(k.Preset); ok {
		return nil
	}
	return fmt.Errorf("%w: %w", policies.ErrNoPreset, k.fieldError("preset",
		"%q is not in the verified policy bundle %s (it has: %v)", k.Preset, e.Hash(), e.Presets()))
}

// CheckBinary refuses a binary that is missing, not a regular executable
// file, or whose sha256 is not the pinned one (the error names both).
func (k *Kind) CheckBinary() error {
	f, err := os.Open(k.Binary)
	if err != nil {
		return k.fieldError("binary.path", "%v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return k.fieldError("binary.path", "%v", err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return k.fieldError("binary.path", "%s is not an executable file (mode %s)", k.Binary, st.Mode())
	}
	if k.SHA256 == "" {
		return nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return k.fieldError("binary.path", "read %s: %v", k.Binary, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != k.SHA256 {
		return k.fieldError("binary.sha256", "%s has sha256 %s, the kind pins %s", k.Binary, got, k.SHA256)
	}
	return nil
}

// fieldError is a problem with a loaded kind's field, at its line.
func (k *Kind) fieldError(path, format string, args ...any) error {
	return &yamlobj.FieldError{File: k.File, Line: k.lines[path], Path: path, Msg: fmt.Sprintf(format, args...)}
}
