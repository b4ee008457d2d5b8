package supervisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// GET /v1/dial?addr=IP:PORT, upgraded to a byte stream ("Upgrade: tcp"),
// is a connection to a port of the pod's services on the pod's own
// loopback, which the host cannot reach: a host watchdog probes a service
// through it as it would on the host. It reaches the services' declared
// ports only, not the pod's proxy or anything else in its namespace.

// dialTimeout bounds the dial in the pod; the client's own deadline may
// end it sooner.
const dialTimeout = 10 * time.Second

// dialError is the JSON of a refused or failed dial.
type dialError struct {
	Error string `json:"error"`
	// Rule names the rule a refusal (403) broke.
	Rule string `json:"rule,omitempty"`
	// Errno is the failed dial's errno (502), e.g. ECONNREFUSED.
	Errno string `json:"errno,omitempty"`
}

func serveDial(p *Pod, w http.ResponseWriter, r *http.Request) {
	if !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", "tcp") {
		writeJSON(w, http.StatusBadRequest, dialError{Error: "dial: want Connection: Upgrade and Upgrade: tcp"})
		return
	}
	raw := r.URL.Query().Get("addr")
	ap, err := netip.ParseAddrPort(raw)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, dialError{Error: fmt.Sprintf("addr %q: want a loopback IP:PORT, e.g. 127.0.0.1:8080 or [::1]:8080", raw)})
		return
	}
	if !ap.Addr().IsLoopback() {
		writeJSON(w, http.StatusForbidden, dialError{Rule: "dial_loopback_only",
			Error: fmt.Sprintf("addr %s: only the pod's loopback is dialled (its services listen there)", ap)})
		return
	}
	if !p.servicePort(int(ap.Port())) {
		writeJSON(w, http.StatusForbidden, dialError{Rule: "dial_service_ports_only",
			Error: fmt.Sprintf("addr %s: port %d is no service's (ports: in the manifest); only the services' ports are dialled", ap, ap.Port())})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dialTimeout)
	upstream, err := p.network.DialContext(ctx, "tcp", ap.String())
	cancel()
	if err != nil {
		writeJSON(w, http.StatusBadGateway, dialError{Error: err.Error(), Errno: errnoName(err)})
		return
	}
	client, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		upstream.Close()
		writeJSON(w, http.StatusInternalServerError, dialError{Error: "dial: " + err.Error()})
		return
	}
	if err := switchProtocols(client, buf, "tcp"); err != nil {
		client.Close()
		upstream.Close()
		return
	}
	relay(p.ctx, client, buf.Reader, upstream)
}

// relay copies bytes both ways until both sides have finished sending (a
// side's EOF is passed on as a half-close), either side fails, or ctx ends
// (the pod stops). in holds what the client sent past its request, already
// read. Once the client has finished sending, the service has
// halfCloseGrace to finish answering: a hung service (the very thing a
// watchdog probes for) never would, and its relay would be kept forever.
func relay(ctx context.Context, client net.Conn, in *bufio.Reader, upstream net.Conn) {
	closeBoth := func() { client.Close(); upstream.Close() }
	stop := context.AfterFunc(ctx, closeBoth)
	defer stop()
	done := make(chan struct{}, 2)
	go func() {
		if _, err := io.Copy(upstream, in); err != nil {
			closeBoth()
		}
		closeWrite(upstream)
		upstream.SetReadDeadline(time.Now().Add(halfCloseGrace))
		done <- struct{}{}
	}()
	go func() {
		if _, err := io.Copy(client, upstream); err != nil {
			closeBoth() // the client went away, or the grace ran out
		}
		closeWrite(client)
		done <- struct{}{}
	}()
	<-done
	<-done
	closeBoth()
}

// halfCloseGrace is how long a service may take to answer once the
// client has sent all it will.
var halfCloseGrace = 30 * time.Second

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
	}
}

// servicePort reports whether one of the pod's services declares port.
func (p *Pod) servicePort(port int) bool {
	for _, s := range p.m.Services {
		if slices.Contains(s.Ports, port) {
			return true
		}
	}
	return false
}

// headerHas reports whether one of the comma-separated values of header
// key is token (case-insensitively).
func headerHas(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// errnoName is the errno a dial failed with ("" when none): a timeout is
// ETIMEDOUT, whether the kernel or the deadline said so.
func errnoName(err error) string {
	var errno syscall.Errno
	switch {
	case errors.As(err, &errno):
		return unix.ErrnoName(errno)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return unix.ErrnoName(unix.ETIMEDOUT)
	}
	return ""
}
