package adminclient

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// upgradeTo sends req, asking to upgrade to proto, to the pod on socket,
// and returns the connection once the pod switched protocols, with the
// reader that holds what the pod sent past its answer. A pod that does not
// answer is ErrNoPod; its refusal a *StatusError naming what. ctx bounds
// the dial and the handshake, not the connection returned.
func upgradeTo(ctx context.Context, socket string, req *http.Request, proto, what string) (net.Conn, *bufio.Reader, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", socket)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("the pod's admin socket %s: %w", socket, ctx.Err())
		}
		// %v: an ECONNREFUSED here is the pod's, not what the caller
		// asks the pod for.
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrNoPod, socket, err)
	}
	if conn, err = checkPeer(conn, socket); err != nil {
		return nil, nil, err // a socket is there, and no pod's
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	// A cancelled ctx ends the handshake at once, too.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	r, err := handshake(conn, req, proto, what)
	if !stop() {
		err = ctx.Err()
	}
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	conn.SetDeadline(time.Time{})
	return conn, r, nil
}

func handshake(conn net.Conn, req *http.Request, proto, what string) (*bufio.Reader, error) {
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", proto)
	if err := req.Write(conn); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return nil, statusError(what, resp)
	}
	return r, nil
}
