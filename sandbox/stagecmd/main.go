// Command stagecmd is the sandbox's own processes and nothing else: the
// init, the command stage and the cgroup reaper (sandbox.RunStage2),
// linked without the policy engine or the proxy so that it starts in a few
// milliseconds. airlock embeds it (package stagebin) and runs it from a
// sealed memory file; it is not meant to be installed or run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/sandbox"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == sandbox.Stage2Arg {
		sandbox.RunStage2()
	}
	fmt.Fprintln(os.Stderr, "airlock-stage: the sandbox's own processes, started by airlock; run airlock instead")
	os.Exit(2)
}
