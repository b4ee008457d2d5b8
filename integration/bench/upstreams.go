package main

import (
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/testca"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// upstreams are the origins every proxy is measured against, on 127.0.0.2
// so that no proxy's own listener (127.0.0.1) is mistaken for one.
type upstreams struct {
	plainURL string // http://127.0.0.2:P/
	// tlsAddr is 127.0.0.2:P, its certificate for 127.0.0.2, mitm.bench,
	// bench.test and inspect.test: GET / answers "ok", GET /bulk streams
	// zeros until the client stops reading.
	tlsAddr  string
	bulkAddr string // 127.0.0.2:P, raw TCP: writes zeros forever, no TLS
	roots    *x509.CertPool
	caFile   string
}

// bulkChunk is what the bulk origins write at a time: large enough that
// the origin's own cost per MB is its TLS and TCP, not its calls.
const bulkChunk = 256 << 10

// zeros is the bulk origins' payload, shared: it is only read.
var zeros = make([]byte, bulkChunk)

func startUpstreams(dir string) (*upstreams, error) {
	u := &upstreams{}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	pl, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		return nil, err
	}
	go http.Serve(pl, ok)
	u.plainURL = "http://" + pl.Addr().String() + "/"

	ca, err := testca.New(dir)
	if err != nil {
		return nil, err
	}
	u.roots, u.caFile = ca.Pool, ca.File
	tlsConfig, err := ca.ServerConfig("127.0.0.2", "mitm.bench", benchHost, inspectHost)
	if err != nil {
		return nil, err
	}
	tl, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/", ok)
	mux.HandleFunc("/bulk", streamZeros)
	srv := &http.Server{Handler: mux, TLSConfig: tlsConfig}
	go srv.ServeTLS(tl, "", "")
	u.tlsAddr = tl.Addr().String()

	bl, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		return nil, err
	}
	testutil.ServeConns(bl, func(c net.Conn) {
		for {
			if _, err := c.Write(zeros); err != nil {
				return
			}
		}
	})
	u.bulkAddr = bl.Addr().String()
	return u, nil
}

// streamZeros answers with a body longer than any measurement reads (1
// TiB, declared, so that it is not chunked), written until the client goes.
func streamZeros(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Length", strconv.FormatInt(1<<40, 10))
	w.Header().Set("Content-Type", "application/octet-stream")
	for {
		if _, err := w.Write(zeros); err != nil {
			return
		}
	}
}

func port(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
