package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netns"
)

func loopbackPair(t *testing.T) (client net.Conn, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

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
	_, server := loopbackPair(t)
	r, err := NewResolver(netns.None(), Tree(os.Getpid()), NewHashCache(16))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, err := r.Lookup(addrs(server))
	if err != nil {
		t.Fatalf("Lookup(own connection): %v", err)
	}
	self, _ := os.Executable()
	self, _ = filepath.EvalSymlinks(self)
	if p.PID != os.Getpid() || p.Exe != self || p.SHA256 != fileSHA(t, self) || p.UID != os.Geteuid() {
		t.Fatalf("Lookup = %+v; want pid %d exe %s", p, os.Getpid(), self)
	}
	if len(p.Ancestors) == 0 || p.Ancestors[0].PID != os.Getppid() {
		t.Fatalf("Lookup ancestors = %+v; want the parent %d first", p.Ancestors, os.Getppid())
	}
}

func TestLookupOutsideCandidatesIsUnknown(t *testing.T) {
	_, server := loopbackPair(t)
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
	client, server := loopbackPair(t)
	f, err := client.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A child holding the same socket but running another executable.
	cmd := exec.Command("sleep", "30")
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	r, err := NewResolver(netns.None(), Tree(os.Getpid()), NewHashCache(16))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Lookup(addrs(server)); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("Lookup of a socket shared with sleep = %v; want ErrAmbiguous", err)
	}
}

func TestLookupClosedConnectionIsUnknown(t *testing.T) {
	client, server := loopbackPair(t)
	c, s := addrs(server)
	client.Close()
	server.Close()
	r, _ := NewResolver(netns.None(), AllProcesses{}, NewHashCache(16))
	defer r.Close()
	if _, err := r.Lookup(c, s); !errors.Is(err, ErrUnknown) {
		t.Fatalf("Lookup of a closed connection = %v; want ErrUnknown", err)
	}
}
