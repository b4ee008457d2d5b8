package adminclient

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/url"
)

// Dial connects to addr (a loopback IP:PORT one of the pod's services
// declares) inside the pod on socket, whose network namespace the host
// cannot reach: the supervisor dials it there and relays the bytes. A
// failed dial is a *StatusError wrapping its errno (errors.Is(err,
// syscall.ECONNREFUSED): nothing listens), so a probe that dials with it
// tells a dead service as on the host. ctx bounds the dial and the
// handshake, not the connection returned.
func Dial(ctx context.Context, socket, addr string) (net.Conn, error) {
	path := "/v1/dial?" + url.Values{"addr": {addr}}.Encode()
	req, err := http.NewRequest(http.MethodGet, "http://pod"+path, nil)
	if err != nil {
		return nil, err
	}
	conn, r, err := upgradeTo(ctx, socket, req, "tcp", "dial "+addr+" in the pod")
	if err != nil {
		return nil, err
	}
	return &upgradedConn{Conn: conn, r: r}, nil
}

// upgradedConn reads first what the handshake's reader already holds: the
// service may answer before the caller's first read.
type upgradedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *upgradedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite passes a half-close on to the service (the supervisor relays
// the EOF).
func (c *upgradedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
