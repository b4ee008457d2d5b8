package adminclient

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"
)

// Dial connects to addr (a loopback IP:PORT one of the pod's services
// declares) inside the pod on socket, whose network namespace the host
// cannot reach: the supervisor dials it there and relays the bytes. A
// failed dial is a *StatusError wrapping its errno (errors.Is(err,
// syscall.ECONNREFUSED): nothing listens), so a probe that dials with it
// tells a dead service as on the host. ctx bounds the dial and the
// handshake, not the connection returned.
func Dial(ctx context.Context, socket, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", socket)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("the pod's admin socket %s: %w", socket, ctx.Err())
		}
		// Not the service's refusal: the pod's (%v, so that an
		// ECONNREFUSED here is not taken for the service's).
		return nil, fmt.Errorf("%w: %s: %v", ErrNoPod, socket, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	// A cancelled ctx ends the handshake at once, too.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	c, err := upgrade(conn, addr)
	if !stop() {
		err = ctx.Err()
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return c, nil
}

// upgrade asks the pod on conn for a connection to addr.
func upgrade(conn net.Conn, addr string) (net.Conn, error) {
	path := "/v1/dial?" + url.Values{"addr": {addr}}.Encode()
	req, err := http.NewRequest(http.MethodGet, "http://pod"+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	if err := req.Write(conn); err != nil {
		return nil, fmt.Errorf("dial %s through the pod: %w", addr, err)
	}
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, req)
	if err != nil {
		return nil, fmt.Errorf("dial %s through the pod: %w", addr, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return nil, statusError("dial "+addr+" in the pod", resp)
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
