package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testca"
	"github.com/airlock-sandbox/airlock/internal/trusted"
	"github.com/airlock-sandbox/airlock/supervisor"
	"github.com/airlock-sandbox/airlock/supervisor/demo"
	"github.com/airlock-sandbox/airlock/supervisor/ingress"
	"github.com/airlock-sandbox/airlock/supervisor/manifest"
)

// demoPod is what `airlock up` boots without a manifest: the demo's files
// written into its state directory, a fresh operator key, and the
// stand-in model API on the host's loopback (nothing reaches the
// internet).
type demoPod struct {
	manifest *manifest.Pod
	key      string
	model    *http.Server
}

func newDemoPod(stateDir string, log *slog.Logger) (_ *demoPod, err error) {
	d := &demoPod{}
	// Checked before anything is made or written there, as the pod checks
	// it later: in a directory another user may write, root would write
	// the demo's files where links of theirs point.
	existing := stateDir
	for _, err := os.Lstat(existing); errors.Is(err, fs.ErrNotExist) && existing != filepath.Dir(existing); _, err = os.Lstat(existing) {
		existing = filepath.Dir(existing)
	}
	if err := trusted.Path(existing); err != nil {
		return nil, fmt.Errorf("--state-dir %s: %w", stateDir, err)
	}
	// Traversable, not listable, by the services' uids: they open their
	// scripts by name.
	if err := os.MkdirAll(stateDir, 0o711); err != nil {
		return nil, err
	}
	if err := trusted.Path(stateDir); err != nil {
		return nil, fmt.Errorf("--state-dir %s: %w", stateDir, err)
	}
	err = fs.WalkDir(demo.Files, ".", func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		raw, err := demo.Files.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(stateDir, path), raw, 0o644)
	})
	if err != nil {
		return nil, fmt.Errorf("demo files: %w", err)
	}
	ca, err := testca.New(stateDir)
	if err != nil {
		return nil, fmt.Errorf("demo model API CA: %w", err)
	}
	cfg, err := ca.ServerConfig(demo.ModelHost)
	if err != nil {
		return nil, err
	}
	ln, err := tls.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(demo.ModelPort)), cfg)
	if err != nil {
		return nil, fmt.Errorf("the demo's stand-in model API: %w", err)
	}
	d.model = &http.Server{Handler: demo.ModelAPI(), ReadHeaderTimeout: 5 * time.Second}
	go d.model.Serve(ln)
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	// A fresh key at each boot, for the demo operator only.
	keys := filepath.Join(stateDir, "operators.keys")
	if d.key, err = ingress.NewKey(); err != nil {
		return nil, err
	}
	if err := os.WriteFile(keys, []byte("demo "+ingress.HashKey(d.key)+"\n"), 0o600); err != nil {
		return nil, err
	}
	if d.manifest, err = manifest.Parse("pod.yaml", demo.Manifest, stateDir); err != nil {
		return nil, err
	}
	d.manifest.Proxy.UpstreamCA = append(d.manifest.Proxy.UpstreamCA, ca.File)
	log.Info("demo pod prepared", "dir", stateDir, "model_api", ln.Addr().String())
	return d, nil
}

// show drives the booted demo as an operator would: through the ingress,
// with the demo key, one request whose egress the shim's preset allows and
// one the gateway's denies.
func (d *demoPod) show(ctx context.Context, w io.Writer, pod *supervisor.Pod) {
	st := pod.Status()
	if len(st.Ingress) == 0 {
		return
	}
	base := "http://" + st.Ingress[0].Listen
	fmt.Fprintf(w, "\ndemo operator key (for this run only):\n  %s\n\ntry:\n  curl -H 'Authorization: Bearer %s' %s/\n", d.key, d.key, base)
	for _, c := range []struct{ what, path string }{
		{"allowed: the gateway asks the shim, whose preset lets it reach the model API through the proxy", "/models"},
		{"denied: the same request made by the gateway itself, whose preset (strict) lets nothing out", "/models/direct"},
	} {
		code, body, err := d.get(ctx, base+c.path)
		fmt.Fprintf(w, "\n%s\n  GET %s → ", c.what, c.path)
		if err != nil {
			fmt.Fprintf(w, "error: %v\n", err)
			continue
		}
		fmt.Fprintf(w, "%d %s\n", code, strings.TrimSpace(body))
	}
	fmt.Fprintf(w, "\nairlock status --socket %s   # the pod's state\nairlock events --socket %s -f # its events\nCtrl-C stops the pod.\n",
		pod.AdminSocket(), pod.AdminSocket())
}

func (d *demoPod) get(ctx context.Context, url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+d.key)
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(body), err
}

func (d *demoPod) Close() {
	if d.model != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := d.model.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			d.model.Close()
		}
	}
}
