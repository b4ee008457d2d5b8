package demo

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
	"golang.org/x/net/websocket"
)

func TestManifestParses(t *testing.T) {
	dir := t.TempDir()
	p, err := manifest.Parse("pod.yaml", Manifest, dir)
	if err != nil {
		t.Fatal(err)
	}
	if p.StateDir != dir {
		t.Errorf("state_dir = %q, want the directory the files are in, %q", p.StateDir, dir)
	}
	var names, presets []string
	for _, s := range p.Services {
		names, presets = append(names, s.Name), append(presets, s.Preset)
		if s.Health == nil || s.Health.HTTP == nil || s.Health.HTTP.Path != "/healthz" {
			t.Errorf("service %s: health %+v, want an HTTP check on /healthz", s.Name, s.Health)
		}
	}
	if want := []string{"shim", "gateway"}; !reflect.DeepEqual(names, want) {
		t.Errorf("services %v, want %v", names, want)
	}
	// The pair the demo shows: the same request allowed for the shim,
	// denied for the gateway.
	if want := []string{"demo", "strict"}; !reflect.DeepEqual(presets, want) {
		t.Errorf("presets %v, want %v", presets, want)
	}
	if got := p.Services[1].After; !reflect.DeepEqual(got, []string{"shim"}) {
		t.Errorf("gateway after %v, want [shim]", got)
	}
	want := manifest.Ingress{Name: "gateway", Listen: "127.0.0.1:18789", Service: "gateway", Port: 18789, Keys: filepath.Join(dir, "operators.keys")}
	if len(p.Ingress) != 1 || p.Ingress[0] != want {
		t.Errorf("ingress %+v, want [%+v]", p.Ingress, want)
	}
	pin := fmt.Sprintf("%s:%d:127.0.0.1", ModelHost, ModelPort)
	if !reflect.DeepEqual(p.Proxy.Resolve, []string{pin}) || !reflect.DeepEqual(p.Proxy.AllowRange, []string{"127.0.0.1/32"}) {
		t.Errorf("proxy resolve %v allow_range %v, want [%s] [127.0.0.1/32]", p.Proxy.Resolve, p.Proxy.AllowRange, pin)
	}
	for _, s := range p.Services {
		if got, want := s.Env["MODEL_API"], fmt.Sprintf("https://%s:%d", ModelHost, ModelPort); got != want {
			t.Errorf("%s MODEL_API %q, want %q", s.Name, got, want)
		}
	}
}

func TestScriptsCompile(t *testing.T) {
	dir := extract(t)
	node := testutil.RequireTool(t, "node")
	python := testutil.RequireTool(t, "/usr/bin/python3")
	for _, argv := range [][]string{{node, "--check", "gateway.js"}, {python, "-m", "py_compile", "shim.py"}} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
}

// serveModelAPI serves ModelAPI over TLS on loopback and returns its URL
// and a PEM file of its certificate for the shim's SSL_CERT_FILE.
func serveModelAPI(t *testing.T) (string, string) {
	srv := httptest.NewTLSServer(ModelAPI())
	t.Cleanup(srv.Close)
	cert := filepath.Join(t.TempDir(), "model-api.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644)
	return srv.URL, cert
}

type models struct {
	Object string
	Data   []struct{ ID string }
}

type apiError struct {
	Error struct {
		Message, Type, Code string
		Airlock             struct{ Reason, Rule, Host, Path, Hint string }
	}
}

func TestShimAndGateway(t *testing.T) {
	dir := extract(t)
	api, cert := serveModelAPI(t)
	shim := "http://" + start(t, dir, "shim", "SHIM_PORT=0", "MODEL_API="+api, "SSL_CERT_FILE="+cert)
	gw := "http://" + start(t, dir, "gateway", "GATEWAY_PORT=0", "SHIM_URL="+shim)

	t.Run("health", func(t *testing.T) {
		for _, u := range []string{shim + "/healthz", gw + "/healthz"} {
			var ok struct{ OK bool }
			if code := call(t, "GET", u, nil, "", &ok); code != 200 || !ok.OK {
				t.Errorf("GET %s = %d %+v, want 200 {ok:true}", u, code, ok)
			}
		}
	})
	t.Run("models", func(t *testing.T) {
		for _, u := range []string{shim + "/v1/models", gw + "/models"} {
			var m models
			if code := call(t, "GET", u, nil, "", &m); code != 200 || m.Object != "list" || len(m.Data) != 1 || m.Data[0].ID != ModelID {
				t.Errorf("GET %s = %d %+v, want 200 and the model API's list", u, code, m)
			}
		}
	})
	t.Run("chat", func(t *testing.T) {
		var c struct {
			Object  string
			Choices []struct {
				Message struct{ Role, Content string }
			}
		}
		code := call(t, "POST", shim+"/v1/chat/completions", nil, `{"model":"`+ModelID+`","messages":[{"role":"user","content":"hi"}]}`, &c)
		if code != 200 || c.Object != "chat.completion" || len(c.Choices) != 1 || c.Choices[0].Message.Content != "echo: hi" {
			t.Errorf("chat = %d %+v, want 200 with the model API's echo", code, c)
		}
		var e apiError
		if code := call(t, "POST", shim+"/v1/chat/completions", nil, `{"messages":"no"}`, &e); code != 400 || e.Error.Type != "invalid_request_error" {
			t.Errorf("chat with a bad body = %d %+v, want 400 invalid_request_error", code, e)
		}
	})
	t.Run("operator", func(t *testing.T) {
		// Believed from the ingress's address only: another service of
		// the pod could send the header too.
		var hello struct{ Hello, Service string }
		code := callFrom(t, sandbox.IngressSource.String(), "GET", gw+"/", http.Header{"X-Airlock-Operator": {"alice"}}, "", &hello)
		if code != 200 || hello.Hello != "alice" || hello.Service != "gateway" {
			t.Errorf("GET / as alice = %d %+v, want a hello to alice", code, hello)
		}
		code = call(t, "GET", gw+"/", http.Header{"X-Airlock-Operator": {"alice"}}, "", &hello)
		if code != 200 || hello.Hello != "unknown operator" {
			t.Errorf("GET / as alice from another address than the ingress's = %d %+v, want the header not believed", code, hello)
		}
		var e struct{ Error string }
		if code := call(t, "POST", gw+"/", nil, "x", &e); code != 405 {
			t.Errorf("POST / = %d %+v, want 405", code, e)
		}
	})
	t.Run("direct without a proxy", func(t *testing.T) {
		var e struct{ Error string }
		if code := call(t, "GET", gw+"/models/direct", nil, "", &e); code != 502 || !strings.Contains(e.Error, "no HTTPS_PROXY") {
			t.Errorf("GET /models/direct with no proxy = %d %+v, want 502 saying there is no way out", code, e)
		}
	})
	t.Run("websocket", func(t *testing.T) { testWebSocket(t, strings.TrimPrefix(gw, "http://")) })
}

// testWebSocket talks to the gateway's /ws with x/net's client (an
// implementation that is not the gateway's), then with hand-made frames
// for what that client cannot send.
func testWebSocket(t *testing.T, addr string) {
	ws, err := websocket.Dial("ws://"+addr+"/ws", "", "http://"+addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	// One of each length encoding: 7 bits, 16 bits, 64 bits.
	for _, n := range []int{5, 300, 70000} {
		msg := strings.Repeat("é", n/2)
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
		var got string
		ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		if err := websocket.Message.Receive(ws, &got); err != nil || got != msg {
			t.Errorf("echo of %d bytes: %d bytes, %v", len(msg), len(got), err)
		}
	}
	bin := []byte{0, 1, 2, 255}
	websocket.Message.Send(ws, bin)
	var gotBin []byte
	if err := websocket.Message.Receive(ws, &gotBin); err != nil || !bytes.Equal(gotBin, bin) {
		t.Errorf("binary echo = %v, %v; want %v", gotBin, err, bin)
	}

	t.Run("fragments and ping", func(t *testing.T) {
		c, br := rawUpgrade(t, addr)
		c.Write(clientFrame(false, 0x1, []byte("hel")))
		c.Write(clientFrame(true, 0x9, []byte("are you there")))
		c.Write(clientFrame(true, 0x0, []byte("lo")))
		if op, p := readFrame(t, br); op != 0xA || string(p) != "are you there" {
			t.Errorf("answer to a ping = opcode %#x %q, want a pong with its payload", op, p)
		}
		if op, p := readFrame(t, br); op != 0x1 || string(p) != "hello" {
			t.Errorf("echo of a fragmented message = opcode %#x %q, want text \"hello\"", op, p)
		}
		c.Write(clientFrame(true, 0x8, []byte{0x03, 0xe8}))
		if op, p := readFrame(t, br); op != 0x8 || !bytes.Equal(p, []byte{0x03, 0xe8}) {
			t.Errorf("answer to close 1000 = opcode %#x %v, want close 1000", op, p)
		}
	})
	for _, tc := range []struct {
		name  string
		frame []byte
		code  uint16
	}{
		{"unmasked", []byte{0x81, 0x02, 'h', 'i'}, 1002},
		{"invalid UTF-8", clientFrame(true, 0x1, []byte{0xff, 0xfe}), 1007},
		{"too big", clientFrame(true, 0x2, make([]byte, 1<<20+1)), 1009},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := rawUpgrade(t, addr)
			c.Write(tc.frame)
			op, p := readFrame(t, br)
			if op != 0x8 || len(p) < 2 || binary.BigEndian.Uint16(p) != tc.code {
				t.Errorf("answer = opcode %#x %q, want close %d", op, p, tc.code)
			}
		})
	}
	t.Run("bad handshake", func(t *testing.T) {
		for path, want := range map[string]string{"/ws": "400 Bad Request", "/other": "404 Not Found"} {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: gw\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: c2hvcnQ=\r\n\r\n", path)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.Status != want {
				t.Errorf("upgrade of %s with a short key = %v %v, want %s", path, resp, err, want)
			}
			c.Close()
		}
	})
}

// rawUpgrade opens a WebSocket by hand and checks Sec-WebSocket-Accept.
func rawUpgrade(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	key := make([]byte, 16)
	rand.Read(key)
	k := base64.StdEncoding.EncodeToString(key)
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n\r\n", addr, k)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum([]byte(k + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if resp.StatusCode != 101 || resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		t.Fatalf("upgrade = %s %v, want 101 with the key's accept value", resp.Status, resp.Header)
	}
	return c, br
}

// clientFrame encodes a masked client frame.
func clientFrame(fin bool, opcode byte, payload []byte) []byte {
	b := []byte{opcode}
	if fin {
		b[0] |= 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n < 1<<16:
		b = append(b, 0x80|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	mask := []byte{0x12, 0x34, 0x56, 0x78}
	b = append(b, mask...)
	for i, c := range payload {
		b = append(b, c^mask[i%4])
	}
	return b
}

// readFrame reads one unmasked server frame.
func readFrame(t *testing.T, br *bufio.Reader) (byte, []byte) {
	t.Helper()
	h := make([]byte, 2)
	if _, err := io.ReadFull(br, h); err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	if h[1]&0x80 != 0 {
		t.Errorf("server frame is masked")
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		io.ReadFull(br, l[:])
		n = uint64(binary.BigEndian.Uint16(l[:]))
	case 127:
		var l [8]byte
		io.ReadFull(br, l[:])
		n = binary.BigEndian.Uint64(l[:])
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(br, p); err != nil {
		t.Fatalf("reading a frame's %d bytes: %v", n, err)
	}
	return h[0] & 0x0f, p
}

func TestFailures(t *testing.T) {
	dir := extract(t)
	// A port nothing listens on: a listener closed at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()

	shim := "http://" + start(t, dir, "shim", "SHIM_PORT=0", "MODEL_API=https://"+closed)
	var e apiError
	if code := call(t, "GET", shim+"/v1/models", nil, "", &e); code != 502 || e.Error.Type != "upstream_unreachable" {
		t.Errorf("shim models with the model API down = %d %+v, want 502 upstream_unreachable", code, e)
	}
	gw := "http://" + start(t, dir, "gateway", "GATEWAY_PORT=0", "SHIM_URL=http://"+closed)
	var g struct{ Error, Shim string }
	if code := call(t, "GET", gw+"/models", nil, "", &g); code != 502 || g.Error != "shim unreachable" {
		t.Errorf("gateway models with the shim down = %d %+v, want 502 shim unreachable", code, g)
	}
}
