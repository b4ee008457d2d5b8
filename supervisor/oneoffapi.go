package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/adminclient"
	"golang.org/x/sys/unix"
)

// POST /v1/sandboxes, upgraded (Upgrade: airlock-sandbox), launches a
// one-off sandbox (oneoff.go) and holds the connection for its life: the
// pod writes its exit as one JSON line (adminclient.SandboxExit) when it
// has ended; a line from the client (a grace, "2s") stops it, and the
// client's close stops it within disconnectGrace: a launcher that died
// leaves nothing running. DELETE /v1/sandboxes/{id}?grace=2s stops it too.
// Both are root's only: the pod opens the spec's files and runs its
// command as the uid it names.

// disconnectGrace is how long a one-off whose launcher went away has to
// stop after SIGTERM before it is killed.
const disconnectGrace = 2 * time.Second

// connKey holds a request's connection, for its peer's credentials.
type connKey struct{}

func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// peerRoot refuses a peer that is not root (uid 0), by the socket's
// credentials, not by what it says.
func peerRoot(r *http.Request) error {
	c, ok := r.Context().Value(connKey{}).(*net.UnixConn)
	if !ok {
		return errors.New("not a unix socket connection: the peer's uid is unknown")
	}
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("getsockopt(SO_PEERCRED): %w", cerr)
	}
	if cred.Uid != 0 {
		return fmt.Errorf("peer uid %d (pid %d): launching a sandbox is root's only", cred.Uid, cred.Pid)
	}
	return nil
}

func serveSandboxLaunch(p *Pod, w http.ResponseWriter, r *http.Request) {
	if err := peerRoot(r); err != nil {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": err.Error()})
		return
	}
	if !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", adminclient.SandboxUpgrade) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "sandboxes: want Connection: Upgrade and Upgrade: " + adminclient.SandboxUpgrade})
		return
	}
	var spec adminclient.SandboxSpec
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "sandbox spec: " + err.Error()})
		return
	}
	// The rest of the body (a client's trailing newline) is read now: left
	// in the buffer, it would be taken for a stop line once upgraded.
	if _, err := io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20)); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "sandbox spec: " + err.Error()})
		return
	}
	x, err := p.sandboxes.launch(spec)
	if err != nil {
		status := http.StatusInternalServerError // a setup step failed
		var ref *refusal
		if errors.As(err, &ref) {
			status = ref.status
		}
		writeJSON(w, status, map[string]string{"error": err.Error()})
		return
	}
	client, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		x.stopGrace(0)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "sandboxes: " + err.Error()})
		return
	}
	defer client.Close()
	client.SetDeadline(time.Time{}) // the server's header deadline no longer applies
	buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + adminclient.SandboxUpgrade + "\r\n\r\n")
	if err := buf.Flush(); err != nil {
		x.stopGrace(disconnectGrace)
		return
	}
	go watchLauncher(x, buf.Reader)
	<-x.done
	line, _ := json.Marshal(x.exit)
	client.Write(append(line, '\n'))
}

// watchLauncher stops x at the launcher's stop line (its grace), or when
// the launcher's connection closes (disconnectGrace); it returns at x's
// end, when the handler closes the connection.
func watchLauncher(x *oneOff, r *bufio.Reader) {
	line, err := r.ReadString('\n')
	grace := disconnectGrace
	if err == nil {
		if d, perr := time.ParseDuration(strings.TrimSpace(line)); perr == nil && d >= 0 {
			grace = d
		}
	}
	x.stopGrace(grace)
}

func serveSandboxStop(p *Pod, w http.ResponseWriter, r *http.Request) {
	if err := peerRoot(r); err != nil {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": err.Error()})
		return
	}
	grace := disconnectGrace
	if g := r.URL.Query().Get("grace"); g != "" {
		d, err := time.ParseDuration(g)
		if err != nil || d < 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("grace %q: want a duration, e.g. 2s", g)})
			return
		}
		grace = d
	}
	x, ok := p.sandboxes.get(r.PathValue("id"))
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no sandbox %q running in pod %s", r.PathValue("id"), p.m.Name)})
		return
	}
	x.stopGrace(grace)
	writeJSON(w, http.StatusOK, x.exit)
}
