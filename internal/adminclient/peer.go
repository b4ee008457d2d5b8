package adminclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// PeerCred is the credentials of the process at the other end of a unix
// socket connection, as the kernel took them at its connect or listen:
// what the peer is, not what it says.
func PeerCred(c net.Conn) (*unix.Ucred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, errors.New("not a unix socket connection: the peer's uid is unknown")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("getsockopt(SO_PEERCRED): %w", cerr)
	}
	return cred, nil
}

// dialPod connects to a pod's admin socket (checkPeer).
func dialPod(ctx context.Context, socket string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	return checkPeer(c, socket)
}

// checkPeer refuses, and closes, a connection to socket whose listener is
// neither root's nor this user's: while a pod is down, another user may
// bind its socket's path (one in a shared directory), and would be handed
// what a client sends a pod (launch specs, their environment, the
// launcher's own descriptors).
func checkPeer(c net.Conn, socket string) (net.Conn, error) {
	cred, err := PeerCred(c)
	if err == nil && cred.Uid != 0 && int(cred.Uid) != os.Geteuid() {
		err = fmt.Errorf("it is served by uid %d (pid %d), neither root nor this user: not a pod's, refused", cred.Uid, cred.Pid)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("the pod's admin socket %s: %w", socket, err)
	}
	return c, nil
}
