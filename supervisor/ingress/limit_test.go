package ingress

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// halfHeader is a request begun and never ended: http.Server waits for
// the rest until its header timeout (10 s).
const halfHeader = "GET / HTTP/1.1\r\nHost: x\r\n"

// dialHolding opens a connection to addr and sends it hold, never more.
func dialHolding(t *testing.T, addr, hold string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, hold); err != nil {
		t.Fatal(err)
	}
	return c
}

// keyedGet sends a request with key on c and reads its answer within
// wait.
func keyedGet(c net.Conn, br *bufio.Reader, key, path string, wait time.Duration) (*http.Response, error) {
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\n\r\n", path, key)
	c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Time{})
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	if path != "/stream" {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	return resp, err
}

// operatorGets opens a new connection and has it answered 200 within
// wait, well under the header timeout the connections filling the route
// would otherwise hold it for.
func operatorGets(t *testing.T, addr, key string, wait time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if resp, err := keyedGet(c, bufio.NewReader(c), key, "/operator", wait); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("an operator's new connection, after %v: %v, %v; want 200 within %v", time.Since(start).Round(time.Millisecond), resp, err, wait)
	}
}

// closedWithin says whether the server closed c (a read ends other than
// by the deadline) within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// checkEvicted checks that the oldest of held are closed by the server,
// as newer ones arrived, and the last open ones are not.
func checkEvicted(t *testing.T, held []net.Conn, open int) {
	t.Helper()
	for i, c := range held[:len(held)-open] {
		if !closedWithin(c, 5*time.Second) {
			t.Fatalf("unproven connection %d of %d still open 5 s after newer ones came; want the oldest evicted", i, len(held))
		}
	}
	for i, c := range held[len(held)-open:] {
		if closedWithin(c, 200*time.Millisecond) {
			t.Errorf("unproven connection %d of %d closed; want the newest %d kept while they fit", len(held)-open+i, len(held), open)
		}
	}
}

// routeSockets counts the route's accepted connections this process holds
// open, from the kernel's side: its sockets whose local port is the
// route's, but for the listening one.
func routeSockets(t *testing.T, port int) int {
	t.Helper()
	ours := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "socket:[") {
			ours[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	tcp, err := os.ReadFile("/proc/self/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(tcp), "\n")[1:] {
		// sl local_address rem_address st ... inode: "0100007F:1F90", "0A" listening
		f := strings.Fields(l)
		if len(f) < 10 {
			continue
		}
		_, hex, _ := strings.Cut(f[1], ":")
		if p, _ := strconv.ParseUint(hex, 16, 16); int(p) == port && f[3] != "0A" && ours[f[9]] {
			n++
		}
	}
	return n
}

// serveGoroutines counts the goroutines of this process serving an HTTP
// connection.
func serveGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "net/http.(*conn).serve(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// eventually polls cond for up to 10 s.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// Connections with no request admitted yet (half a header, half a request
// line, nothing) cannot hold a route's every slot against its operators:
// an operator's new connection evicts the oldest of them and is answered
// at once, not after the 10 s header timeout.
func TestUnprovenConnectionsCannotLockOutOperators(t *testing.T) {
	backend := echoHeaders()
	defer backend.Close()
	for _, tc := range []struct{ name, hold string }{
		{"half a header", halfHeader},
		{"half a request line", "GET /pa"},
		{"nothing sent", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const max = 4
			in := startIngress(t, port(t, backend.URL), func(o *Options) { o.MaxConns = max })
			addr := in.srv.Addr().String()
			var held []net.Conn
			for i := range max {
				held = append(held, dialHolding(t, addr, tc.hold))
				if !eventually(func() bool { return routeSockets(t, port(t, in.url)) == i+1 }) {
					t.Fatalf("the route holds %d connections; want the %d sent", routeSockets(t, port(t, in.url)), i+1)
				}
			}
			operatorGets(t, addr, in.alice, 3*time.Second)
			checkEvicted(t, held, max-1)
		})
	}
}

// A client flooding the route from one address evicts its own connections
// first: an operator's from another address, slow to send its request (a
// tunnel's round trip), keeps its slot while the flood's source holds
// more, however many arrive.
func TestFloodEvictsItsOwnFirst(t *testing.T) {
	backend := echoHeaders()
	defer backend.Close()
	const max = 4
	in := startIngress(t, port(t, backend.URL), func(o *Options) { o.MaxConns = max })
	addr := in.srv.Addr().String()
	from := func(ip string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	operator := from("127.0.0.3") // connected, its request not yet sent
	if !eventually(func() bool { return routeSockets(t, port(t, in.url)) == 1 }) {
		t.Fatal("the operator's connection was not taken")
	}
	var flood []net.Conn
	for i := range 3 * max {
		c := from("127.0.0.2")
		io.WriteString(c, halfHeader)
		flood = append(flood, c)
		if !eventually(func() bool { return routeSockets(t, port(t, in.url)) == min(i+2, max) }) {
			t.Fatalf("the route holds %d connections; want %d", routeSockets(t, port(t, in.url)), min(i+2, max))
		}
	}
	checkEvicted(t, flood, max-1)
	if resp, err := keyedGet(operator, bufio.NewReader(operator), in.alice, "/operator", 3*time.Second); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the operator's request on the connection it opened before the flood: %v, %v; want 200", resp, err)
	}
}

// A refused request whose body is still coming holds its connection after
// the 401 (net/http reads on up to 256 KiB of it, with no deadline, before
// it closes): evictable again once refused, it locks no operator out.
func TestRefusedRequestsHoldNoSlot(t *testing.T) {
	backend := echoHeaders()
	defer backend.Close()
	const max = 2
	in := startIngress(t, port(t, backend.URL), func(o *Options) { o.MaxConns = max })
	addr := in.srv.Addr().String()
	for range max {
		c := dialHolding(t, addr, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a keyless POST: %v, %v; want 401", resp, err)
		}
	}
	operatorGets(t, addr, in.alice, 3*time.Second)
}

// An admitted connection (a keep-alive between requests, a stream) is
// never evicted by a flood of new unproven ones, nor one whose request is
// being checked; the flood evicts its own, oldest first, and operators
// still get in.
func TestAdmittedConnectionsAreNeverEvicted(t *testing.T) {
	const max, flood = 3, 12
	for _, tc := range []struct {
		name string
		// admit opens the connection the flood must not evict, and
		// returns what checks it still works after the flood.
		admit func(t *testing.T, in *ingress, g *gates) (after func())
	}{
		{name: "keep-alive between requests", admit: func(t *testing.T, in *ingress, _ *gates) func() {
			c := dialHolding(t, in.srv.Addr().String(), "")
			br := bufio.NewReader(c)
			if resp, err := keyedGet(c, br, in.alice, "/first", 5*time.Second); err != nil || resp.StatusCode != http.StatusOK || resp.Close {
				t.Fatalf("first request: %v, %v; want 200, kept alive", resp, err)
			}
			return func() {
				if resp, err := keyedGet(c, br, in.alice, "/second", 5*time.Second); err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("second request on the kept-alive connection after the flood: %v, %v; want 200", resp, err)
				}
			}
		}},
		{name: "stream open", admit: func(t *testing.T, in *ingress, g *gates) func() {
			c := dialHolding(t, in.srv.Addr().String(), "")
			resp, err := keyedGet(c, bufio.NewReader(c), in.alice, "/stream", 5*time.Second)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("open a stream: %v, %v; want 200", resp, err)
			}
			body := bufio.NewReader(resp.Body)
			if l, err := body.ReadString('\n'); l != "data: one\n" {
				t.Fatalf("the stream's first line: %q, %v", l, err)
			}
			return func() {
				g.open(g.next)
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				rest, err := io.ReadAll(body)
				if err != nil || string(rest) != "\ndata: two\n\n" {
					t.Fatalf("the rest of the stream after the flood: %q, %v; want its second event", rest, err)
				}
			}
		}},
		{name: "request being checked", admit: func(t *testing.T, in *ingress, g *gates) func() {
			// The key file changed: the request reloads it, and is held
			// in KeysChanged, before its key is checked.
			if _, err := AddKey(in.srv.route.Keys.Path(), "carol", false); err != nil {
				t.Fatal(err)
			}
			c := dialHolding(t, in.srv.Addr().String(), "")
			fmt.Fprintf(c, "GET /checked HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\n\r\n", in.alice)
			<-g.reloading // KeysChanged was entered
			return func() {
				g.open(g.reloaded)
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("the request held while the flood came: %v, %v; want 200", resp, err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &gates{next: make(chan struct{}), reloading: make(chan struct{}, 1), reloaded: make(chan struct{})}
			backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/stream" {
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, "data: one\n\n")
				w.(http.Flusher).Flush()
				select {
				case <-g.next:
					fmt.Fprint(w, "data: two\n\n")
				case <-r.Context().Done():
				}
			}))
			t.Cleanup(backend.Close) // after the route's own cleanup
			in := startIngress(t, port(t, backend.URL), func(o *Options) {
				o.MaxConns = max
				o.KeysChanged = func(int, error) {
					select {
					case g.reloading <- struct{}{}:
					default:
					}
					<-g.reloaded
				}
			})
			t.Cleanup(func() { g.open(g.next); g.open(g.reloaded) }) // before the route's shutdown, which waits on them
			after := tc.admit(t, in, g)
			var held []net.Conn
			for range flood {
				held = append(held, dialHolding(t, in.srv.Addr().String(), halfHeader))
			}
			checkEvicted(t, held, max-1)
			after()
			operatorGets(t, in.srv.Addr().String(), in.alice, 3*time.Second)
		})
	}
}

// gates hold a test's service (next: its stream's second event) and the
// route's reload of its key file (KeysChanged, told when it is entered
// and held until reloaded opens).
type gates struct {
	next, reloading, reloaded chan struct{}
	mu                        sync.Mutex
}

// open opens gate c, once.
func (g *gates) open(c chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-c:
	default:
		close(c)
	}
}

// Evictions leak nothing: once a flood's connections are gone, the route
// holds no socket and no goroutine for them, and has its MaxConns whole
// again, no more and no fewer; the evictions are on record, summed up in
// one audit line, not one line each.
func TestEvictionsLeakNothing(t *testing.T) {
	defer func(d time.Duration) { refusalInterval = d }(refusalInterval)
	refusalInterval = time.Hour // one interval, ended by the shutdown
	const max, flood = 4, 40
	backend := echoHeaders()
	defer backend.Close()
	in := startIngress(t, port(t, backend.URL), func(o *Options) { o.MaxConns = max })
	addr, routePort := in.srv.Addr().String(), port(t, in.url)
	serving := serveGoroutines()

	var held []net.Conn
	for range flood {
		held = append(held, dialHolding(t, addr, halfHeader))
	}
	checkEvicted(t, held, max)
	if n := routeSockets(t, routePort); n != max {
		t.Errorf("after the flood the route holds %d sockets; want the %d unevicted", n, max)
	}
	for _, c := range held {
		c.Close()
	}
	if !eventually(func() bool { return routeSockets(t, routePort) == 0 && serveGoroutines() == serving }) {
		t.Fatalf("the flood closed: the route holds %d sockets, %d goroutines serve connections (%d before); want none left", routeSockets(t, routePort), serveGoroutines(), serving)
	}

	// Exactly max admitted connections fit: the count of the open ones
	// came back to zero, not below it.
	var kept []net.Conn
	for i := range max {
		c := dialHolding(t, addr, "")
		if resp, err := keyedGet(c, bufio.NewReader(c), in.alice, "/kept", 5*time.Second); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("admitted connection %d of %d: %v, %v; want 200", i+1, max, resp, err)
		}
		kept = append(kept, c)
	}
	extra := dialHolding(t, addr, "")
	fmt.Fprintf(extra, "GET /extra HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\n\r\n", in.alice)
	br := bufio.NewReader(extra)
	extra.SetReadDeadline(time.Now().Add(time.Second))
	if resp, err := http.ReadResponse(br, nil); err == nil {
		t.Fatalf("connection %d was served (%s) with %d admitted ones held; want it waiting", max+1, resp.Status, max)
	}
	kept[0].Close()
	extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("once an admitted one closed: %v, %v; want the waiting connection served", resp, err)
	}

	in.shutdown(t)
	var summed []auditLine
	for _, l := range strings.Split(strings.TrimSpace(in.audit.String()), "\n") {
		var a auditLine
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatal(err)
		}
		if a.Reason == ReasonEvicted {
			summed = append(summed, a)
		}
	}
	if want := int64(flood - max); len(summed) != 1 || summed[0].Count != want || summed[0].Status != 0 || summed[0].Msg != AuditMessage {
		t.Errorf("eviction lines: %+v; want one %s line counting %d, status 0", summed, AuditMessage, want)
	}
}

// Shutdown does not wait on a connection with no request admitted: it has
// none to finish, and http.Server would keep it for 5 s (its rule for a
// new connection) or its header timeout.
func TestShutdownCutsUnprovenConnections(t *testing.T) {
	backend := echoHeaders()
	defer backend.Close()
	in := startIngress(t, port(t, backend.URL))
	held := dialHolding(t, in.srv.Addr().String(), halfHeader)
	if !eventually(func() bool { return routeSockets(t, port(t, in.url)) == 1 }) {
		t.Fatal("the route did not accept the connection")
	}
	start := time.Now()
	in.shutdown(t)
	if took := time.Since(start); took > 2*time.Second || !closedWithin(held, time.Second) {
		t.Errorf("Shutdown took %v; want the unproven connection cut, not waited for", took.Round(time.Millisecond))
	}
}
