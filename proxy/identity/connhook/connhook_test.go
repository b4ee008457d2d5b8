package connhook_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup2"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/proxy/identity"
	"github.com/airlock-sandbox/airlock/proxy/identity/connhook"
	"github.com/vishvananda/netns"
)

// TestMain doubles as a client process (see the identity package tests).
func TestMain(m *testing.M) {
	if addr := os.Getenv("AIRLOCK_TEST_DIAL"); addr != "" {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			os.Exit(3)
		}
		fmt.Println("connected")
		io.Copy(io.Discard, os.Stdin)
		c.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// sandbox makes a cgroup v2 leaf with n-1 sleeping processes and one client
// that connects to a listener of the test once the hook is attached.
func sandbox(t testing.TB, n int) (hook *connhook.Hook, cg string, client *exec.Cmd, server net.Conn) {
	t.Helper()
	testutil.RequireRoot(t, "cgroup BPF connect hooks")
	mnt, err := cgroup2.Mount()
	if err != nil {
		t.Fatal(err)
	}
	cg, err = cgroup2.Create(mnt, fmt.Sprintf("airlock-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	var kids []*exec.Cmd
	t.Cleanup(func() {
		for _, k := range kids {
			k.Process.Kill()
			k.Wait()
		}
		cgroup2.Remove(cg)
	})
	for i := 1; i < n; i++ {
		k := exec.Command("sleep", "300")
		if err := k.Start(); err != nil {
			t.Fatal(err)
		}
		kids = append(kids, k)
		if err := cgroup2.Add(cg, k.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	hook, err = connhook.Attach(cg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hook.Close() })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The client joins the cgroup before it connects: started stopped
	// would be nicer; a pipe that holds it until it is moved is enough.
	client = exec.Command("sh", "-c", `read go; exec "$0"`, os.Args[0])
	client.Env = append(os.Environ(), "AIRLOCK_TEST_DIAL="+ln.Addr().String())
	stdin, _ := client.StdinPipe()
	out, _ := client.StdoutPipe()
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	kids = append(kids, client)
	if err := cgroup2.Add(cg, client.Process.Pid); err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, "go\n")
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(out, make([]byte, 10))
	t.Cleanup(func() { stdin.Close(); server.Close() })
	return hook, cg, client, server
}

func addrs(c net.Conn) (netip.AddrPort, netip.AddrPort) {
	return c.RemoteAddr().(*net.TCPAddr).AddrPort(), c.LocalAddr().(*net.TCPAddr).AddrPort()
}

func TestHookAttributesTheConnector(t *testing.T) {
	hook, cg, client, server := sandbox(t, 3)
	r, err := identity.NewResolver(netns.None(), identity.Cgroup(cg), identity.NewHashCache(16))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.WithConnHook(hook)
	p, err := r.Lookup(addrs(server))
	if err != nil || p.PID != client.Process.Pid {
		t.Fatalf("Lookup through the hook = %+v, %v; want pid %d", p, err, client.Process.Pid)
	}
}

// BenchmarkLookupHook is the identity lookup with the connect hook, with
// n processes in the sandbox's cgroup.
func BenchmarkLookupHook(b *testing.B) {
	for _, n := range []int{1, 500} {
		b.Run(fmt.Sprintf("procs=%d", n), func(b *testing.B) {
			hook, cg, client, server := sandbox(b, n)
			r, err := identity.NewResolver(netns.None(), identity.Cgroup(cg), identity.NewHashCache(16))
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			r.WithConnHook(hook)
			c, s := addrs(server)
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				p, err := r.Lookup(c, s)
				lat = append(lat, time.Since(start))
				if err != nil || p.PID != client.Process.Pid {
					b.Fatalf("Lookup = %+v, %v", p, err)
				}
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
