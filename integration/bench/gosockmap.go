package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// goSockmap is the floor of a relay that leaves user space out of the
// copy: after the CONNECT, both sockets go into a sockhash whose verdict
// program (sk_skb) hands each socket's data to its peer's send side in
// the kernel. User space only accepts, reads the CONNECT, dials, and waits
// for each side's end to half-close the other. It measures whether such a
// relay would move the relayed paths' rates on a host whose ends share
// the proxy's CPUs (docs/performance.md: it does worse on every path).
//
// A limit a product relay would have to overcome: a socket's data that
// arrives before both entries are in the map is dropped (the bench's
// clients send nothing between the CONNECT and its 200, nor its origins
// before the client speaks).
func goSockmap(addr string) {
	peers, err := sockmapRelay()
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-sockmap:", err)
		os.Exit(1)
	}
	serveEach(addr, func(c net.Conn) { spliceOne(peers, c.(*net.TCPConn)) })
}

// sockmapRelay makes the sockhash, keyed by a socket's cookie and holding
// its peer, with the verdict program attached: each message a member
// socket receives goes out of the socket its cookie maps to.
func sockmapRelay() (*ebpf.Map, error) {
	peers, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "bench_peers",
		Type:       ebpf.SockHash,
		KeySize:    8, // the receiving socket's cookie
		ValueSize:  8, // its peer (a descriptor on update)
		MaxEntries: 1 << 16,
	})
	if err != nil {
		return nil, fmt.Errorf("sockhash: %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "bench_splice",
		Type: ebpf.SkSKB,
		Instructions: asm.Instructions{
			asm.Mov.Reg(asm.R6, asm.R1), // the skb
			asm.FnGetSocketCookie.Call(),
			asm.StoreMem(asm.RFP, -8, asm.R0, asm.DWord),
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.LoadMapPtr(asm.R2, peers.FD()),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, -8),
			asm.Mov.Imm(asm.R4, 0), // to the peer's egress
			asm.FnSkRedirectHash.Call(),
			asm.Return(),
		},
		License: "Dual MIT/GPL",
	})
	if err != nil {
		return nil, fmt.Errorf("verdict program: %w", err)
	}
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{
		Target:  peers.FD(),
		Program: prog,
		Attach:  ebpf.AttachSkSKBVerdict,
	}); err != nil {
		return nil, fmt.Errorf("attach the verdict: %w", err)
	}
	return peers, nil
}

func spliceOne(peers *ebpf.Map, c *net.TCPConn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil || req.Method != http.MethodConnect || br.Buffered() > 0 {
		return
	}
	uc, err := net.Dial("tcp", req.Host)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	u := uc.(*net.TCPConn)
	defer u.Close()
	// What each side has received and been sent so far, before the 200:
	// its client sends nothing until then. A side's end is passed on
	// once the other side's socket holds all the first sent it since.
	rc, wc, _, err1 := counts(c)
	ru, wu, _, err2 := counts(u)
	if err1 != nil || err2 != nil {
		return
	}
	if err := pair(peers, c, u); err != nil {
		fmt.Fprintln(os.Stderr, "go-sockmap:", err)
		return
	}
	const ok = "HTTP/1.1 200 Connection established\r\n\r\n"
	io.WriteString(c, ok)
	wc += uint64(len(ok))
	// Nothing is read here but the end: the verdict takes the data.
	done := make(chan struct{})
	go func() {
		awaitEnd(u, c, ru, wc)
		close(done)
	}()
	awaitEnd(c, u, rc, wu)
	<-done
}

// pair puts each socket in the map under the other's cookie. Closing a
// socket takes it out again.
func pair(peers *ebpf.Map, a, b *net.TCPConn) error {
	fa, ka, err := fdCookie(a)
	if err != nil {
		return err
	}
	fb, kb, err := fdCookie(b)
	if err != nil {
		return err
	}
	if err := peers.Update(ka, uint64(fb), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("sockhash update: %w", err)
	}
	if err := peers.Update(kb, uint64(fa), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("sockhash update: %w", err)
	}
	return nil
}

func fdCookie(c *net.TCPConn) (fd int, cookie uint64, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var gerr error
	err = rc.Control(func(f uintptr) {
		fd = int(f)
		cookie, gerr = unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
	})
	if err == nil {
		err = gerr
	}
	return fd, cookie, err
}

// awaitEnd waits for from's end, passing on whatever the verdict left to
// user space (counted on both sides alike), then for to to hold every byte
// from received since it had received fromBase (to had been given toBase
// then), and half-closes to.
// User space sees the end as soon as it comes, while the kernel may still
// be sending the last data the verdict gave to: closed at once, the reader
// of to would lose it.
func awaitEnd(from, to *net.TCPConn, fromBase, toBase uint64) {
	buf := make([]byte, 4096)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			if _, werr := to.Write(buf[:n]); werr != nil {
				to.Close()
				return
			}
		}
		if err != nil {
			break
		}
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		got, _, _, err1 := counts(from)
		_, sent, open, err2 := counts(to)
		if err1 != nil || err2 != nil || !open || time.Now().After(deadline) {
			to.Close() // or what the kernel holds for it can never be sent
			return
		}
		if sent-toBase >= got-fromBase {
			break
		}
		time.Sleep(20 * time.Microsecond)
	}
	if err := to.CloseWrite(); err != nil && err != syscall.ENOTCONN {
		to.Close()
	}
}

// counts is what c's socket has received, and what it has been given to
// send (acknowledged or queued): tcp_info, then the send queue, so that an
// acknowledgement between the two can only make it look smaller. open is
// whether it can still send (its peer may have closed its own side).
func counts(c *net.TCPConn) (received, given uint64, open bool, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, false, err
	}
	var gerr error
	err = rc.Control(func(f uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(f), unix.SOL_TCP, unix.TCP_INFO)
		if err != nil {
			gerr = err
			return
		}
		outq, err := unix.IoctlGetInt(int(f), unix.SIOCOUTQ)
		if err != nil {
			gerr = err
			return
		}
		received, given = info.Bytes_received, info.Bytes_acked+uint64(outq)
		open = info.State == unix.BPF_TCP_ESTABLISHED || info.State == unix.BPF_TCP_CLOSE_WAIT
	})
	if err == nil {
		err = gerr
	}
	return received, given, open, err
}
