package adminclient

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// Each request's connection is closed once its answer is read: a watchdog
// daemon asks the pod every round, and a kept connection per request
// would pile up in both processes.
func TestDoLeavesNoConnection(t *testing.T) {
	var open atomic.Int64
	sock := testutil.ServeUnix(t, &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{}`) }),
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				open.Add(1)
			case http.StateClosed, http.StateHijacked:
				open.Add(-1)
			}
		},
	})
	for range 20 {
		resp, err := Do(context.Background(), sock, http.MethodGet, "/v1/status")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for open.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := open.Load(); n != 0 {
		t.Errorf("%d of 20 requests' connections still open on the pod's side", n)
	}
}
