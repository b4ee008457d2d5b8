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
	"os"
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
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	cred, err := adminclient.PeerCred(c)
	if err != nil {
		return err
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
	if spec.Stdio {
		serveStdioLaunch(p, w, spec)
		return
	}
	// The launcher gone while the sandbox is set up (its ^C, its death)
	// stops it, as its stream's close does once it runs.
	x, err := p.sandboxes.launch(spec, nil, func(x *oneOff) {
		go func() {
			select {
			case <-r.Context().Done():
				x.stopGrace(disconnectGrace)
			case <-x.launched:
			}
		}()
	})
	if err != nil {
		writeLaunchError(w, err)
		return
	}
	client, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		x.stopGrace(0)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "sandboxes: " + err.Error()})
		return
	}
	defer client.Close()
	if err := switchProtocols(client, buf, adminclient.SandboxUpgrade); err != nil {
		x.stopGrace(disconnectGrace)
		return
	}
	hold(x, client, buf.Reader)
}

// serveStdioLaunch launches a sandbox on the launcher's own standard
// streams: the spec is checked first (a refusal is still an HTTP status),
// then the connection switches protocols, the three descriptors arrive
// (SCM_RIGHTS, with one byte) and the sandbox starts; a failure from then
// on is the stream's exit line, with 125.
func serveStdioLaunch(p *Pod, w http.ResponseWriter, spec adminclient.SandboxSpec) {
	_, err := p.sandboxes.options(spec)
	if err == nil {
		// Said now, as a status the launcher shows, rather than as its
		// stream's exit line. add counts again: another launch may take
		// the last one meanwhile, refused then on the stream.
		err = p.sandboxes.fullNow()
	}
	if err != nil {
		writeLaunchError(w, err)
		return
	}
	client, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "sandboxes: " + err.Error()})
		return
	}
	defer client.Close()
	if err := switchProtocols(client, buf, adminclient.SandboxUpgrade); err != nil {
		return
	}
	stdio, err := receiveStdio(client, buf.Reader)
	var x *oneOff
	if err == nil {
		// Its stop line, or its close, reaches a setup that hangs too.
		x, err = p.sandboxes.launch(spec, stdio, func(x *oneOff) { go watchLauncher(x, buf.Reader) })
	}
	if err != nil {
		line, _ := json.Marshal(adminclient.SandboxExit{Exit: 125, Error: err.Error()})
		client.Write(append(line, '\n'))
		return
	}
	report(x, client)
}

// stdioWait bounds how long a launcher may take to pass its streams once
// the pod has switched protocols.
const stdioWait = 5 * time.Second

// receiveStdio reads the launcher's stdin, stdout and stderr: one byte
// carrying exactly three descriptors (close-on-exec here: Go's
// ReadMsgUnix asks for MSG_CMSG_CLOEXEC). Nothing else may come first.
func receiveStdio(c net.Conn, r *bufio.Reader) ([]*os.File, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("stdio: %T is not a unix socket, descriptors cannot pass", c)
	}
	if r.Buffered() > 0 {
		return nil, errors.New("stdio: the launcher wrote before passing its streams")
	}
	uc.SetReadDeadline(time.Now().Add(stdioWait))
	defer uc.SetReadDeadline(time.Time{})
	b, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(b, oob)
	if err != nil {
		return nil, fmt.Errorf("stdio: receive the launcher's streams: %w", err)
	}
	var fds []int
	msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err == nil {
			fds = append(fds, got...)
		}
	}
	files := make([]*os.File, 0, len(fds))
	for i, fd := range fds {
		files = append(files, os.NewFile(uintptr(fd), fmt.Sprintf("stdio%d", i)))
	}
	if n != 1 || perr != nil || flags&unix.MSG_CTRUNC != 0 || len(files) != 3 {
		for _, f := range files {
			f.Close()
		}
		return nil, fmt.Errorf("stdio: want one byte carrying 3 descriptors (stdin, stdout, stderr), got %d bytes and %d descriptors", n, len(fds))
	}
	return files, nil
}

func writeLaunchError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError // a setup step failed
	var ref *refusal
	if errors.As(err, &ref) {
		status = ref.status
	}
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

// switchProtocols answers 101 on a connection taken over from the admin
// server: from now on it carries proto.
func switchProtocols(client net.Conn, buf *bufio.ReadWriter, proto string) error {
	client.SetDeadline(time.Time{}) // the server's header deadline no longer applies
	buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + proto + "\r\n\r\n")
	return buf.Flush()
}

// hold carries x's stop one way and its exit the other, until it ends.
func hold(x *oneOff, client net.Conn, r *bufio.Reader) {
	go watchLauncher(x, r)
	report(x, client)
}

// report writes x's exit line to its launcher once it has ended.
func report(x *oneOff, client net.Conn) {
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
