package budget_test

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/orchestrator/budget"
)

// reserverEnv makes the test binary a reserver process (see reserver), for
// tests of several processes reserving against one budget.
const reserverEnv = "AIRLOCK_BUDGET_RESERVER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(reserverEnv); spec != "" {
		ok, err := reserver(spec)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(ok)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// reserver parses "dir|daily|name|goroutines|tokens" and reserves tokens
// once from each goroutine; it returns how many reservations succeeded.
func reserver(spec string) (int, error) {
	f := strings.Split(spec, "|")
	if len(f) != 5 {
		return 0, fmt.Errorf("bad spec %q", spec)
	}
	daily, _ := strconv.ParseInt(f[1], 10, 64)
	g, _ := strconv.Atoi(f[3])
	tokens, _ := strconv.ParseInt(f[4], 10, 64)
	return reserveConcurrently(budget.Budget{Dir: f[0], Daily: daily}, f[2], g, tokens)
}

// reserveConcurrently reserves tokens once from each of n goroutines, for
// tasks <name>-<i>, and counts the successes; an error other than
// ErrExhausted is returned.
func reserveConcurrently(b budget.Budget, name string, n int, tokens int64) (int, error) {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = b.Reserve(fmt.Sprintf("%s-%d", name, i), tokens)
		})
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, budget.ErrExhausted):
			return ok, err
		}
	}
	return ok, nil
}
