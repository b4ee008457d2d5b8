package ledger_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/orchestrator/ledger"
)

// appenderEnv makes the test binary an appender process (see appender),
// for tests of several processes appending to one ledger.
const appenderEnv = "AIRLOCK_LEDGER_APPENDER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(appenderEnv); spec != "" {
		if err := appender(spec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// appender parses "path|name|goroutines|n" and appends n entries from each
// of the goroutines, task "<name>-<goroutine>-<i>".
func appender(spec string) error {
	f := strings.Split(spec, "|")
	if len(f) != 4 {
		return fmt.Errorf("bad spec %q", spec)
	}
	g, _ := strconv.Atoi(f[2])
	n, _ := strconv.Atoi(f[3])
	return appendConcurrently(f[0], f[1], g, n)
}

// pad makes each line long (tens of KiB), so a line written in pieces
// would interleave with another's.
var pad = strings.Repeat("x", 32<<10)

func appendConcurrently(path, name string, goroutines, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*n)
	for g := range goroutines {
		wg.Go(func() {
			for i := range n {
				errs <- ledger.Append(path, ledger.Entry{
					Task: fmt.Sprintf("%s-%d-%d", name, g, i), Kind: "k", Substrate: "local",
					Status: ledger.Queued, Detail: pad,
				})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
