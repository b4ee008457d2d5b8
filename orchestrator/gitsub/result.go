package gitsub

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/durable"
	"github.com/airlock-sandbox/airlock/orchestrator/kind"
	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
	"github.com/airlock-sandbox/airlock/orchestrator/spawn"
)

// Returned are the files a runner commits back; only these are copied
// into the local spawn directory, whatever else the branch holds.
var Returned = []string{"result.json", "stdout.log", "stderr.log", "audit.jsonl"}

// parseResult reads a runner's result.json for task id. A result that does
// not parse, is for another task or has no known status is not trusted:
// the task failed, and the detail says why.
func parseResult(id, kindName string, b []byte) spawn.Result {
	var r spawn.Result
	err := json.Unmarshal(b, &r)
	nesting := spawn.CheckNesting(r.Result)
	switch {
	case err != nil:
	case r.Task != id:
		err = fmt.Errorf("it is for task %q", r.Task)
	case r.Status != ledger.Done && r.Status != ledger.Failed && r.Status != ledger.Timeout:
		err = fmt.Errorf("status %q is not done, failed or timeout", r.Status)
	case r.Status == ledger.Done && r.Exit != 0:
		err = fmt.Errorf("status done with exit code %d", r.Exit)
	// As a local result is judged (spawn.Result.Judge): the branch is the
	// sub-agent's to write. Not UTF-8, a result would reach a terminal
	// raw (a lone 0x9b is a CSI to one in an 8-bit locale); a negative
	// usage would be settled as tokens given back.
	case !utf8.Valid(b):
		err = errors.New("it is not UTF-8")
	case len(r.Result) > 0 && r.Result[0] != '{':
		err = errors.New("its result is not a JSON object")
	case nesting != nil:
		err = fmt.Errorf("its result %v", nesting)
	case r.Usage != nil && r.Usage.Tokens < 0:
		err = fmt.Errorf("its usage.tokens is negative (%d)", r.Usage.Tokens)
	}
	if err != nil {
		return spawn.Result{Task: id, Kind: kindName, Substrate: kind.Git, Status: ledger.Failed, Exit: 1,
			Detail: fmt.Sprintf("the runner's result.json on %s is unusable: %v", Branch(id), err)}
	}
	// The runner reports what its manifest said; the ledger's kind is the
	// one spawned.
	r.Kind, r.Substrate = kindName, kind.Git
	return r
}

// timedOut is the result Poll and Wait write for a runner that committed
// nothing in time.
func timedOut(id, kindName string, started, now time.Time, within time.Duration) spawn.Result {
	return spawn.Result{Task: id, Kind: kindName, Substrate: kind.Git, Status: ledger.Failed, Exit: spawn.ExitTimeout,
		Started: started, Ended: now,
		Detail: fmt.Sprintf("the runner did not commit a result to %s within %d s", Branch(id), int64(within/time.Second))}
}

// writeFiles writes name → content into dir (made 0700), each file whole
// and 0600 (durable.WriteFile), so a reader never sees half a result.
func writeFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("spawn directory: %w", err)
	}
	for name, b := range files {
		if err := durable.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
