package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"golang.org/x/sys/unix"
)

// dialerEnv makes the test binary a dialer (serveDialer).
const dialerEnv = "AIRLOCK_TEST_DIALER"

// serveDialer dials each address read from stdin and passes the socket to
// the parent over fd 3 (SCM_RIGHTS), keeping its own copy until the next
// address comes: the proxy attributes the connection to this process (it
// never attributes one to itself), while the benchmark speaks on it, at
// the cost of a message, not of a process per connection. A line "dst src"
// dials from src, bound with SO_REUSEADDR: a port an earlier connection
// holds can be bound again.
func serveDialer() {
	ctl, err := net.FileConn(os.NewFile(3, "ctl"))
	if err != nil {
		os.Exit(3)
	}
	uc := ctl.(*net.UnixConn)
	var held net.Conn
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if held != nil {
			held.Close()
		}
		var d net.Dialer
		dst, src, from := strings.Cut(sc.Text(), " ")
		if from {
			laddr, err := net.ResolveTCPAddr("tcp", src)
			if err != nil {
				fmt.Fprintln(os.Stderr, "dialer:", err)
				os.Exit(3)
			}
			d = net.Dialer{LocalAddr: laddr, Control: testutil.ReuseAddr}
		}
		c, err := d.Dial("tcp", dst)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dialer:", err)
			os.Exit(3)
		}
		f, _ := c.(*net.TCPConn).File()
		uc.WriteMsgUnix([]byte{1}, unix.UnixRights(int(f.Fd())), nil)
		f.Close()
		held = c
	}
	os.Exit(0)
}

// dialer is a serveDialer process.
type dialer struct {
	fx  *tpFixture
	in  io.Writer
	ctl *net.UnixConn
}

// dialer starts a serveDialer process; before, when set, is the command
// that runs it (nsenter into a namespace, say).
func (fx *tpFixture) dialer(tb testing.TB, before ...string) *dialer {
	tb.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	child := os.NewFile(uintptr(fds[1]), "ctl-child")
	parent, err := net.FileConn(os.NewFile(uintptr(fds[0]), "ctl"))
	if err != nil {
		tb.Fatal(err)
	}
	argv := append(before, fx.exe)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), dialerEnv+"=1")
	cmd.ExtraFiles = []*os.File{child}
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	child.Close()
	tb.Cleanup(func() { in.Close(); cmd.Wait(); parent.Close() })
	return &dialer{fx: fx, in: in, ctl: parent.(*net.UnixConn)}
}

// dial connects to addr from the dialer process; addr may be followed by
// a space and the address to dial from (serveDialer).
func (d *dialer) dial(tb testing.TB, addr string) net.Conn {
	fmt.Fprintln(d.in, addr)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := d.ctl.ReadMsgUnix(make([]byte, 1), oob)
	if err != nil {
		tb.Fatal(err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		tb.Fatalf("no socket from the dialer: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		tb.Fatalf("no socket from the dialer: %v", err)
	}
	f := os.NewFile(uintptr(fds[0]), "conn")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// benchTunnels opens a new tunnel to tls.tp.test per iteration, as open
// says, does a TLS handshake with the upstream through it and one GET,
// and checks the answer: the shape of the bench's "new CONNECT+TLS
// tunnels/s", inside one process.
func benchTunnels(b *testing.B, open func(d *dialer) net.Conn) {
	fx := newTPFixture(b)
	d := fx.dialer(b)
	cfg := &tls.Config{ServerName: "tls.tp.test", RootCAs: fx.upCA.Pool, NextProtos: []string{"http/1.1"}}
	b.ReportAllocs()
	for b.Loop() {
		c := open(d)
		tc := tls.Client(c, cfg)
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: tls.tp.test\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != tpUpstreamBody {
			b.Fatalf("answer %d %q", resp.StatusCode, body)
		}
		c.Close()
	}
}

// BenchmarkConnectTunnel is a new CONNECT tunnel through the explicit
// proxy per iteration (benchTunnels).
func BenchmarkConnectTunnel(b *testing.B) {
	benchTunnels(b, func(d *dialer) net.Conn { return connectTo(b, d, "tls.tp.test") })
}

// BenchmarkTransparentTunnel is a new transparent tunnel per iteration
// (benchTunnels): the connection to tls.tp.test's synthetic address,
// decided on its ClientHello.
func BenchmarkTransparentTunnel(b *testing.B) {
	benchTunnels(b, func(d *dialer) net.Conn {
		return d.dial(b, fmt.Sprintf("%s:%d", tpTLS, d.fx.port))
	})
}
