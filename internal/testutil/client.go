package testutil

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"testing"
)

const (
	dialEnv = "AIRLOCK_TEST_DIAL"
	// RelayEnv makes ServeClient a relay to its address instead.
	RelayEnv = "AIRLOCK_TEST_RELAY"
)

// ServeClient makes a test binary double as a client process: called first
// in TestMain, it dials $AIRLOCK_TEST_DIAL when set, says so, holds the
// connection until its stdin closes, and exits. Identity tests need the
// socket's owner to be another process: the proxy never attributes a socket
// to itself.
//
// With $AIRLOCK_TEST_RELAY set instead, it dials that address and relays:
// stdin to the connection, the connection to stdout, until either ends. A
// test then speaks raw bytes to a proxy as a process of its choosing.
func ServeClient() {
	if addr := os.Getenv(RelayEnv); addr != "" {
		relay(addr)
	}
	addr := os.Getenv(dialEnv)
	if addr == "" {
		return
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		os.Exit(3)
	}
	fmt.Println("connected")
	io.Copy(io.Discard, os.Stdin)
	c.Close()
	os.Exit(0)
}

func relay(addr string) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(3)
	}
	go func() {
		io.Copy(c, os.Stdin)
		os.Exit(0)
	}()
	io.Copy(os.Stdout, c)
	os.Exit(0)
}

// StartClient starts the test binary as a client (see ServeClient) that
// connects to a fresh loopback listener, and returns the child and the
// server side of its connection. before, when set, runs with the child's
// pid before it connects (to move it into a cgroup, say).
func StartClient(t testing.TB, before func(pid int)) (*exec.Cmd, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The shell holds the child until it is told to go, then becomes it.
	cmd := exec.Command("/bin/sh", "-c", `read go; exec "$0"`, os.Args[0])
	cmd.Env = append(os.Environ(), dialEnv+"="+ln.Addr().String())
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(cmd.Process.Pid)
	}
	io.WriteString(stdin, "go\n")
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(out, make([]byte, len("connected\n")))
	t.Cleanup(func() { stdin.Close(); cmd.Wait(); server.Close() })
	return cmd, server
}

// TCPPair is a connected pair of loopback TCP connections, closed when the
// test ends.
func TCPPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}
