package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
)

// goRelay is the floor for any Go proxy: the least a CONNECT relay can do
// with the standard library (read the request, dial, answer 200, io.Copy
// both ways, which splices), with no identity, policy, audit or limits. The
// bench runs itself in this mode as the "go-relay" column, so that what
// airlock adds is measured apart from what Go's runtime costs.
func goRelay(addr string) { serveEach(addr, relayOne) }

// serveEach serves each connection to addr in a goroutine of its own, for
// the bench's process's life: a reference relay has no stop.
func serveEach(addr string, serve func(net.Conn)) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		os.Exit(1)
	}
	acceptEach(ln, serve)
	os.Exit(1)
}

// acceptEach serves each connection ln accepts in a goroutine of its own,
// until ln fails.
func acceptEach(ln net.Listener, serve func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go serve(c)
	}
}

func relayOne(c net.Conn) {
	defer c.Close()
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil || req.Method != http.MethodConnect {
		return
	}
	u, err := net.Dial("tcp", req.Host)
	if err != nil {
		return
	}
	defer u.Close()
	io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	done := make(chan struct{})
	go func() {
		io.Copy(c, u)
		c.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	io.Copy(u, c)
	u.(*net.TCPConn).CloseWrite()
	<-done
}
