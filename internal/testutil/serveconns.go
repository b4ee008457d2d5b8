package testutil

import "net"

// ServeConns accepts connections on ln until it is closed, and runs handle
// on each in a goroutine of its own, closing the connection after.
func ServeConns(ln net.Listener, handle func(net.Conn)) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
}
