package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/proxy/fakedns"
)

// The transparent path beside the explicit one (scenario "transparent",
// root only): one `airlock launch` sandbox runs the bench binary itself as
// the client (-sandbox-client), which measures, round after round, the same
// work through a CONNECT to the sandbox's proxy (HTTPS_PROXY) and straight
// to the origin's name, which the sandbox's nftables redirect to the same
// proxy's transparent listener: same origin, policy and proxy process. The
// bench outside reads the proxy's CPU (the launch process) and the
// origin's (its own) around each measurement, the client its own; the
// client waits for its go on stdin so that the readings frame the
// measurement.

var (
	sandboxClient = flag.String("sandbox-client", "", "internal: run as the transparent scenario's client inside the sandbox, against the origin's PORT")
	clientCA      = flag.String("sandbox-ca", "", "internal: the origin's CA file, for -sandbox-client")
)

// The origin's names in the transparent scenario, pinned with --resolve
// for the proxy, a synthetic address from the proxy's DNS inside the
// sandbox: benchHost's tunnels are opaque (the unique names looked up are
// under it), inspectHost's inspected.
const (
	benchHost   = "bench.test"
	inspectHost = "inspect.test"
)

// The client's steps, each measured through both paths (DNS only through
// the transparent one: the explicit path has no DNS in the sandbox).
const (
	stepTunnels   = "tunnels"
	stepKeepAlive = "keep-alive"
	stepInspected = "inspected"
	stepDNSSame   = "dns-same"
	stepDNSUnique = "dns-unique"

	pathExplicit    = "explicit"
	pathTransparent = "transparent"
)

// clientLine is one line of the client's stdout: Ready announces a
// measurement (the client then waits for a line on stdin), the next line
// for the same step and path is its result.
type clientLine struct {
	Step    string        `json:"step"`
	Path    string        `json:"path"`
	Ready   bool          `json:"ready,omitempty"`
	Ops     int           `json:"ops,omitempty"`
	Elapsed time.Duration `json:"elapsed,omitempty"`
	CPU     time.Duration `json:"cpu,omitempty"` // the client's own, user+system
	Err     string        `json:"err,omitempty"`
}

// transparentRow names a step's rows: its rate, the proxy's CPU per
// operation, and the ends' (the client's and the origin's).
type transparentRow struct{ step, rate, cpu, ends string }

var transparentRows = []transparentRow{
	{stepTunnels, "new TLS tunnels/s (+GET)", "proxy CPU per new tunnel", "ends' CPU per new tunnel"},
	{stepKeepAlive, "keep-alive req/s in a tunnel", "proxy CPU per keep-alive req", "ends' CPU per keep-alive req"},
	{stepInspected, "inspected keep-alive req/s", "proxy CPU per inspected req", "ends' CPU per inspected req"},
	{stepDNSSame, "DNS answers/s, same names", "proxy CPU per DNS answer, same", "client CPU per DNS answer, same"},
	{stepDNSUnique, "DNS answers/s, unique names", "proxy CPU per DNS answer, uniq", "client CPU per DNS answer, uniq"},
}

func runTransparent() error {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "transparent: not measured: airlock launch needs root")
		return nil
	}
	dir, err := os.MkdirTemp("", "airlock-transparent-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755) // the sandbox's uid executes the client and reads the CA in it

	up, err := startUpstreams(dir)
	if err != nil {
		return err
	}
	client := filepath.Join(dir, "airlock-bench")
	if err := copyExecutable(client); err != nil {
		return err
	}
	bundle := filepath.Join(dir, "bundle")
	os.MkdirAll(bundle, 0o755)
	p := port(up.tlsAddr)
	// The wildcard lets the proxy's DNS answer the unique names; nothing
	// connects to them.
	preset := fmt.Sprintf(`package airlock.presets.transparent

import data.airlock.lib

rules := [
	{"name": "bench", "binaries": [{"path": %[1]q}], "hosts": [%[2]q, "*.%[2]s"], "ports": [%[4]s]},
	{"name": "inspect", "binaries": [{"path": %[1]q}], "hosts": [%[3]q], "ports": [%[4]s], "inspect": true},
]

denies := []

decision := lib.decide(rules, denies)
`, client, benchHost, inspectHost, p)
	if err := os.WriteFile(filepath.Join(bundle, "transparent.rego"), []byte(preset), 0o644); err != nil {
		return err
	}
	cmd := exec.Command(*airlock, "launch", "--policy", bundle, "--preset", "transparent",
		"--resolve", benchHost+":"+p+":127.0.0.2", "--resolve", inspectHost+":"+p+":127.0.0.2", "--allow-range", "127.0.0.2/32", "--upstream-ca", up.caFile,
		"--ca-dir", filepath.Join(dir, "airlock-ca"), "--audit-log", filepath.Join(dir, "audit.log"), "--log-level", "error",
		"--exec", client, "--ro", up.caFile,
		"--", client, "-sandbox-client", p, "-sandbox-ca", up.caFile,
		"-c", fmt.Sprint(*conc), "-d", duration.String(), "-rounds", fmt.Sprint(*rounds))
	cmd.Stderr = os.Stderr
	// A bench that dies takes the sandbox with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("airlock launch: %w", err)
	}
	s := newTransparentSamples()
	readErr := s.read(stdout, stdin, func() time.Duration { return cpuTime(cmd) }, func() time.Duration { return cpuTime(nil) })
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("airlock launch: %w", err)
	}
	if readErr != nil {
		return readErr
	}
	// The DNS floor, once the sandbox is gone, round after round.
	for range *rounds {
		rate, cpu, err := measureDNSFloor()
		if err != nil {
			fmt.Fprintln(os.Stderr, "transparent: DNS floor:", err)
			break
		}
		s.add(floorRate, pathFloor, rate)
		s.add(floorCPU, pathFloor, cpu)
	}
	s.print(os.Stdout)
	return nil
}

// copyExecutable copies the running binary to dst, where the sandbox's uid
// may execute it (the bench's own may be in a directory only root reads).
func copyExecutable(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer src.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", self, dst, err)
	}
	return out.Close()
}

// transparentSamples are the measurements, per row and path, one value per
// round.
type transparentSamples struct {
	values map[string]map[string][]float64
	failed map[string]map[string][]string // the rounds' errors
}

func newTransparentSamples() *transparentSamples {
	return &transparentSamples{values: map[string]map[string][]float64{}, failed: map[string]map[string][]string{}}
}

func (s *transparentSamples) add(row, path string, v float64) {
	if s.values[row] == nil {
		s.values[row] = map[string][]float64{}
	}
	s.values[row][path] = append(s.values[row][path], v)
}

// read follows the client's lines until it exits: at each Ready it reads
// the proxy's and the origin's CPU and lets the client go; at each result
// it reads them again and records the rate and the CPU per operation.
func (s *transparentSamples) read(from io.Reader, goAhead io.Writer, proxyCPU, originCPU func() time.Duration) error {
	sc := bufio.NewScanner(from)
	var proxyBefore, originBefore time.Duration
	for sc.Scan() {
		var l clientLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("the client's line %q: %w", sc.Text(), err)
		}
		if l.Ready {
			proxyBefore, originBefore = proxyCPU(), originCPU()
			if _, err := io.WriteString(goAhead, "\n"); err != nil {
				return fmt.Errorf("the client's stdin: %w", err)
			}
			continue
		}
		proxySpent, originSpent := proxyCPU()-proxyBefore, originCPU()-originBefore
		row := rowOf(l.Step)
		if row == nil {
			return fmt.Errorf("the client's line %q: unknown step", sc.Text())
		}
		if l.Err != "" || l.Ops == 0 {
			if l.Err == "" {
				l.Err = "no operation completed"
			}
			for _, r := range []string{row.rate, row.cpu, row.ends} {
				if s.failed[r] == nil {
					s.failed[r] = map[string][]string{}
				}
				s.failed[r][l.Path] = append(s.failed[r][l.Path], l.Err)
			}
			fmt.Fprintf(os.Stderr, "transparent: %s %s: %s\n", l.Path, l.Step, l.Err)
			continue
		}
		s.add(row.rate, l.Path, float64(l.Ops)/l.Elapsed.Seconds())
		perOp := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(l.Ops) }
		s.add(row.cpu, l.Path, perOp(proxySpent))
		s.add(row.ends, l.Path, perOp(l.CPU+originSpent))
	}
	return sc.Err()
}

func rowOf(step string) *transparentRow {
	for i := range transparentRows {
		if transparentRows[i].step == step {
			return &transparentRows[i]
		}
	}
	return nil
}

func (s *transparentSamples) print(w io.Writer) {
	fmt.Fprintf(w, "\n%-32s %12s %12s %22s\n", fmt.Sprintf("airlock launch, median of %d", *rounds), pathExplicit, pathTransparent, "transparent/explicit")
	partly := false
	line := func(row string, unit string) {
		fmt.Fprintf(w, "%-32s", row)
		med := map[string]float64{}
		for _, p := range []string{pathExplicit, pathTransparent} {
			cell := "—" // the explicit path has no DNS
			switch {
			case len(s.values[row][p]) > 0:
				med[p] = median(s.values[row][p])
				cell = fmt.Sprintf("%.0f%s", med[p], unit)
				if len(s.failed[row][p]) > 0 {
					cell += "*"
					partly = true
				}
			case len(s.failed[row][p]) > 0:
				cell = "error"
			}
			fmt.Fprintf(w, " %12s", cell)
		}
		if med[pathExplicit] > 0 && med[pathTransparent] > 0 {
			fmt.Fprintf(w, " %21.2fx\n", med[pathTransparent]/med[pathExplicit])
		} else {
			fmt.Fprintf(w, " %22s\n", "—")
		}
	}
	for _, r := range transparentRows {
		line(r.rate, "")
	}
	for _, r := range transparentRows {
		line(r.cpu, " µs")
	}
	for _, r := range transparentRows {
		line(r.ends, " µs")
	}
	if f := s.values[floorCPU][pathFloor]; len(f) > 0 {
		rate, cpu := median(s.values[floorRate][pathFloor]), median(f)
		fmt.Fprintf(w, "DNS floor (bare miekg/dns, loopback, no redirect): %.0f answers/s, %.0f µs CPU per answer", rate, cpu)
		if same := s.values["proxy CPU per DNS answer, same"][pathTransparent]; len(same) > 0 {
			fmt.Fprintf(w, "; the proxy's per same-name answer %.2fx", median(same)/cpu)
		}
		fmt.Fprintln(w)
	}
	if partly {
		fmt.Fprintln(w, "* some rounds failed (stderr says why): the median of the others")
	}
	fmt.Fprintf(w, "(one sandbox, %d clients, %s per measurement; the proxy's CPU is the launch process's, from /proc, the ends' the client's and the origin's; a DNS answer is one A or AAAA query answered)\n", *conc, *duration)
}

// --- inside the sandbox ------------------------------------------------------

// runSandboxClient is the client side: every round, each step through
// each path, every measurement announced on stdout and started on a line
// from stdin.
func runSandboxClient(port string) error {
	// The airlock CA, which inspected tunnels present, is in the bundle the
	// sandbox's SSL_CERT_FILE names. The opaque tunnels trust it too, beside
	// the origin's CA: a transparent connection the proxy denies is
	// answered with its 403 over TLS, whose reason the client then reads
	// (newTunnels and tlsKeepAlive count only a 200).
	airlockRoots, err := x509.SystemCertPool()
	if err != nil {
		return err
	}
	originCA, err := os.ReadFile(*clientCA)
	if err != nil {
		return err
	}
	originRoots := airlockRoots.Clone()
	if !originRoots.AppendCertsFromPEM(originCA) {
		return fmt.Errorf("%s: no certificates", *clientCA)
	}
	proxy, err := url.Parse(os.Getenv("HTTPS_PROXY"))
	if err != nil || proxy.Host == "" {
		return fmt.Errorf("HTTPS_PROXY %q: the sandbox names no explicit proxy", os.Getenv("HTTPS_PROXY"))
	}
	// The Go resolver, as a program in the sandbox has it: /etc/resolv.conf's
	// nameserver, whose port 53 the sandbox redirects to the proxy.
	resolver := &net.Resolver{PreferGo: true}
	enc := json.NewEncoder(os.Stdout)
	goAhead := bufio.NewScanner(os.Stdin)
	step := func(name, path string, op func() result) error {
		if err := enc.Encode(clientLine{Step: name, Path: path, Ready: true}); err != nil {
			return err
		}
		if !goAhead.Scan() {
			return errors.New("stdin closed before the go-ahead")
		}
		cpu := ownCPU()
		r := op()
		l := clientLine{Step: name, Path: path, Ops: r.ops, Elapsed: r.elapsed, CPU: ownCPU() - cpu}
		if r.err != nil {
			l.Err = r.err.Error()
		}
		return enc.Encode(l)
	}
	// explicit is host's target for a CONNECT; transparent runs op with the
	// address the sandbox's DNS gives host, looked up once per measurement
	// (the DNS rows measure lookups).
	explicit := func(host string) string { return net.JoinHostPort(host, port) }
	transparent := func(host string, op func(addr string) result) func() result {
		return func() result {
			v4, err := lookupSynthetic(resolver, host)
			if err != nil {
				return result{err: err}
			}
			return op(net.JoinHostPort(v4[0].String(), port))
		}
	}
	var unique atomic.Int64
	steps := []struct {
		name                  string
		explicit, transparent func() result // explicit nil: no such step
	}{
		{stepTunnels,
			func() result { return newTunnels(nil, proxy.Host, explicit(benchHost), benchHost, originRoots) },
			transparent(benchHost, func(addr string) result { return newTunnels(nil, "", addr, benchHost, originRoots) })},
		{stepKeepAlive,
			func() result { return tlsKeepAlive(nil, proxy.Host, explicit(benchHost), benchHost, originRoots) },
			transparent(benchHost, func(addr string) result { return tlsKeepAlive(nil, "", addr, benchHost, originRoots) })},
		{stepInspected,
			func() result { return tlsKeepAlive(nil, proxy.Host, explicit(inspectHost), inspectHost, airlockRoots) },
			transparent(inspectHost, func(addr string) result { return tlsKeepAlive(nil, "", addr, inspectHost, airlockRoots) })},
		// Each client its own name, again and again: Go's resolver shares
		// one lookup among concurrent callers of the same name
		// (singleflight), which would count one answer many times.
		{stepDNSSame, nil, func() result {
			return lookups(resolver, func(w int) string { return fmt.Sprintf("w%d.%s", w, benchHost) })
		}},
		{stepDNSUnique, nil, func() result {
			return lookups(resolver, func(int) string { return fmt.Sprintf("u%d.%s", unique.Add(1), benchHost) })
		}},
	}
	for round := 0; round < *rounds; round++ {
		for _, s := range steps {
			// Each path goes first every other round: a drift in the
			// machine's speed lands on both.
			first, second := pathExplicit, pathTransparent
			ops := map[string]func() result{pathExplicit: s.explicit, pathTransparent: s.transparent}
			if round%2 == 1 {
				first, second = second, first
			}
			for _, path := range []string{first, second} {
				if ops[path] == nil {
					continue
				}
				if err := step(s.name, path, ops[path]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ownCPU is the user+system time this process has used so far.
func ownCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// lookups measures A+AAAA lookups of the names next gives each client,
// each counted as its two answers.
func lookups(r *net.Resolver, next func(w int) string) result {
	res := measure(nil, func(w int) (int64, error) {
		_, err := lookupSynthetic(r, next(w))
		return 0, err
	})
	res.ops *= 2
	return res
}

// lookupSynthetic looks host up (A and AAAA, as clients do by default),
// checks that every answer is synthetic, and returns the IPv4 ones.
func lookupSynthetic(r *net.Resolver, host string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", host+".") // absolute: no search domains
	if err != nil {
		return nil, err
	}
	var v4 []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		// The sandbox's pools (launch takes the defaults): an answer from
		// anywhere else was not the proxy's.
		if !fakedns.DefaultV4.Contains(a) && !fakedns.DefaultV6.Contains(a) {
			return nil, fmt.Errorf("%s: %s is not a synthetic address: the proxy did not answer", host, a)
		}
		if a.Is4() {
			v4 = append(v4, a)
		}
	}
	if len(v4) == 0 {
		return nil, fmt.Errorf("%s: no IPv4 answer among %v", host, addrs)
	}
	return v4, nil
}
