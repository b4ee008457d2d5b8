package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/vishvananda/netns"
)

func TestMain(m *testing.M) {
	testutil.ServeClient()
	os.Exit(m.Run())
}

func clientProcess(t testing.TB) (*exec.Cmd, net.Conn) { return testutil.StartClient(t, nil) }

func addrs(server net.Conn) (netip.AddrPort, netip.AddrPort) {
	return server.RemoteAddr().(*net.TCPAddr).AddrPort(), server.LocalAddr().(*net.TCPAddr).AddrPort()
}

func fileSHA(t *testing.T, p string) string {
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil))
}

func TestLookupFindsTheOwner(t *testing.T) {
	child, server := clientProcess(t)
	r := treeResolver(t)
	p, err := r.Lookup(addrs(server))
	if err != nil {
		t.Fatalf("Lookup(own connection): %v", err)
	}
	self, _ := os.Executable()
	self, _ = filepath.EvalSymlinks(self)
	if p.PID != child.Process.Pid || p.Exe != self || p.SHA256 != fileSHA(t, self) || p.UID != os.Geteuid() {
		t.Fatalf("Lookup = %+v; want pid %d exe %s", p, child.Process.Pid, self)
	}
}

func TestLookupOutsideCandidatesIsUnknown(t *testing.T) {
	_, server := clientProcess(t)
	r, err := NewResolver(netns.None(), Tree(os.Getppid()+1e6), NewHashCache(16))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Lookup(addrs(server)); !errors.Is(err, ErrUnknown) {
		t.Fatalf("Lookup with the owner outside the candidates = %v; want ErrUnknown", err)
	}
}

func TestLookupSharedSocketWithDifferentExeIsAmbiguous(t *testing.T) {
	client, server := testutil.TCPPair(t)
	f, err := client.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	client.Close()
	// Two children hold the same socket but run different executables:
	// fork-then-exec, or fd passing.
	var kids []*exec.Cmd
	for _, name := range []string{"sleep", "tail"} {
		args := map[string][]string{"sleep": {"30"}, "tail": {"-f", "/dev/null"}}[name]
		cmd := exec.Command(name, args...)
		cmd.ExtraFiles = []*os.File{f}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		kids = append(kids, cmd)
	}
	f.Close()
	defer func() {
		for _, c := range kids {
			c.Process.Kill()
			c.Wait()
		}
	}()
	r := treeResolver(t)
	if _, err := r.Lookup(addrs(server)); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("Lookup of a socket shared with sleep = %v; want ErrAmbiguous", err)
	}
}

func TestLookupClosedConnectionIsUnknown(t *testing.T) {
	child, server := clientProcess(t)
	c, s := addrs(server)
	child.Process.Kill()
	child.Wait()
	r, _ := NewResolver(netns.None(), AllProcesses{}, NewHashCache(16))
	defer r.Close()
	if _, err := r.Lookup(c, s); !errors.Is(err, ErrUnknown) {
		t.Fatalf("Lookup of a closed connection = %v; want ErrUnknown", err)
	}
}

// BenchmarkLookup attributes a connection whose owner sits among n
// processes of the sandbox (the test process and n-1 sleeping children).
func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{1, 100, 500} {
		b.Run(fmt.Sprintf("procs=%d", n), func(b *testing.B) {
			var kids []*exec.Cmd
			for i := 1; i < n; i++ {
				c := exec.Command("sleep", "300")
				if err := c.Start(); err != nil {
					b.Fatal(err)
				}
				kids = append(kids, c)
			}
			defer func() {
				for _, c := range kids {
					c.Process.Kill()
					c.Wait()
				}
			}()
			child, server := clientProcess(b)
			r := treeResolver(b)
			c, s := addrs(server)
			r.Lookup(c, s) // hash the executables once: the cache is the steady state
			testutil.Latencies(b, func(int) {
				if p, err := r.Lookup(c, s); err != nil || p.PID != child.Process.Pid {
					b.Fatalf("Lookup = %v, %v", p, err)
				}
			})
		})
	}
}

// A described process that then execs another binary is described afresh:
// the cache must never name the executable a pid used to run.
func TestDescribeSeesExec(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "read go; exec sleep 30")
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	r := treeResolver(t)
	pid, uid := cmd.Process.Pid, os.Geteuid()
	sh, _ := filepath.EvalSymlinks("/bin/sh")
	before, err := r.describe(pid, 0, uid)
	if err != nil || before.Exe != sh {
		t.Fatalf("describe(sh) = %+v, %v; want %s", before, err, sh)
	}
	if again, _ := r.describe(pid, 0, uid); again != before {
		t.Fatalf("a second describe of the same process = %+v; want the cached %+v", again, before)
	}
	io.WriteString(stdin, "go\n")
	sleep, _ := exec.LookPath("sleep")
	sleep, _ = filepath.EvalSymlinks(sleep)
	for i := 0; ; i++ {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); exe == sleep {
			break
		}
		if i == 500 {
			t.Fatal("the shell did not exec sleep")
		}
		time.Sleep(10 * time.Millisecond)
	}
	after, err := r.describe(pid, 0, uid)
	if err != nil || after.Exe != sleep || after.SHA256 != fileSHA(t, sleep) {
		t.Fatalf("describe after exec = %+v, %v; want %s", after, err, sleep)
	}
}

// BenchmarkDescribeFresh describes a process that is not in the process
// cache (a new connection from a new process): every /proc read of the
// description is paid, the executable's hash is not (the hash cache).
func BenchmarkDescribeFresh(b *testing.B) {
	child, _ := clientProcess(b)
	r := treeResolver(b)
	pid, uid := child.Process.Pid, os.Geteuid()
	testutil.Latencies(b, func(int) {
		r.procs.purge()
		if p, err := r.describe(pid, 0, uid); err != nil || p.PID != pid {
			b.Fatalf("describe = %+v, %v", p, err)
		}
	})
}

// treeResolver is a resolver of this process's tree, in this namespace,
// closed when the test ends.
func treeResolver(t testing.TB) *Resolver {
	t.Helper()
	r, err := NewResolver(netns.None(), Tree(os.Getpid()), NewHashCache(16))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}
