package supervisor

import (
	"os"
	"testing"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// TestMain is also the sandbox's stage 2: a test that launches a real
// sandbox re-executes the test binary as its init and command stage, as
// airlock re-executes itself without an embedded stage.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.Stage2Arg {
		sandbox.RunStage2()
	}
	os.Exit(m.Run())
}
