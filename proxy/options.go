package proxy

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/trusted"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/proxy/certs"
	"github.com/airlock-sandbox/airlock/proxy/egress"
	"golang.org/x/sys/unix"
)

// Options are what an operator configures about a proxy, from flags
// (`airlock proxy`, `airlock launch`) or a pod manifest (`airlock up`).
// Build turns them into a Proxy: the CA, the upstream trust roots, the SSRF
// guard, the audit log and the metrics. Zero fields take their defaults.
type Options struct {
	// CADir holds the airlock CA (ca.pem, ca-key.pem), generated on first
	// start; DefaultCADir when empty. CACert and CAKey, together, name an
	// operator-supplied CA instead.
	CADir, CACert, CAKey string
	// UpstreamCAs are PEM files trusted for upstream TLS besides the
	// system roots.
	UpstreamCAs []string
	// Resolve pins HOST:PORT:ADDR[,ADDR] as curl does; the addresses are
	// still SSRF-checked.
	Resolve []string
	// AllowRanges are CIDRs the SSRF guard lets through (UNSAFE, logged).
	AllowRanges []string
	// AuditLog is the audit file: a path (appended, 0600), "-" or "" for
	// stdout, "stderr" for stderr.
	AuditLog string
	// AuditFailOpen serves a decision the audit log cannot take (UNSAFE).
	AuditFailOpen bool
	// AuditTee is Config.AuditTee.
	AuditTee func(sandbox string, line []byte) error
	Limits   Limits
	// DialTimeout bounds an upstream TCP connect; egress's default when 0.
	DialTimeout time.Duration
	Logger      *slog.Logger
}

// LimitError names a limit set to zero or less: a guard must not be turned
// off by a mistake. Name is the limit's flag spelling (max-conns).
type LimitError struct{ Name string }

func (e *LimitError) Error() string { return e.Name + " must be positive" }

// CheckLimits refuses a limit that is zero or negative. A caller that takes
// zero to mean the default fills it in before.
func CheckLimits(l Limits, dialTimeout time.Duration) error {
	for _, v := range []struct {
		name string
		v    int64
	}{
		{"max-conns", int64(l.MaxConns)}, {"max-header-bytes", int64(l.MaxHeaderBytes)},
		{"read-header-timeout", int64(l.ReadHeaderTimeout)}, {"idle-timeout", int64(l.IdleTimeout)},
		{"handshake-timeout", int64(l.HandshakeTimeout)}, {"tunnel-idle-timeout", int64(l.TunnelIdleTimeout)},
		{"write-timeout", int64(l.WriteTimeout)}, {"upstream-header-timeout", int64(l.UpstreamHeaderTimeout)},
		{"dial-timeout", int64(dialTimeout)},
	} {
		if v.v <= 0 {
			return &LimitError{v.name}
		}
	}
	return nil
}

// DefaultCADir is where the CA lives when no directory is given: systemd's
// StateDirectory=, /var/lib/airlock for root, the user's config directory
// otherwise.
func DefaultCADir() string {
	if d := os.Getenv("STATE_DIRECTORY"); d != "" {
		return filepath.Join(d, "ca")
	}
	if os.Geteuid() == 0 {
		return "/var/lib/airlock/ca"
	}
	if d, err := os.UserConfigDir(); err == nil {
		return filepath.Join(d, "airlock", "ca")
	}
	return ".airlock-ca"
}

// Build assembles a proxy deciding with decider. Close releases the audit
// file it opened, after Shutdown.
func Build(decider policies.Decider, o Options) (*Proxy, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = egress.DefaultDialTimeout
	}
	fillLimits(&o.Limits)
	if err := CheckLimits(o.Limits, o.DialTimeout); err != nil {
		return nil, err
	}
	ca, err := loadCA(o)
	if err != nil {
		return nil, err
	}
	roots, err := upstreamRoots(o.UpstreamCAs)
	if err != nil {
		return nil, err
	}
	var allow []netip.Prefix
	for _, r := range o.AllowRanges {
		p, err := egress.ParseAllowRange(r)
		if err != nil {
			return nil, err
		}
		log.Warn("UNSAFE: SSRF guard relaxed by an allowed range", "range", p.String())
		allow = append(allow, p)
	}
	guard, err := egress.New(egress.Options{AllowRanges: allow, Resolve: o.Resolve, Self: hostAddrs(), DialTimeout: o.DialTimeout})
	if err != nil {
		return nil, err
	}
	audit, closeAudit, err := openAudit(o.AuditLog)
	if err != nil {
		return nil, err
	}
	if o.AuditFailOpen {
		log.Warn("UNSAFE: audit failure is warn: a decision the audit log cannot take is served anyway, with only an error logged")
	}
	p, err := New(Config{Decider: decider, CA: ca, Guard: guard, UpstreamRoots: roots, Audit: audit, AuditFailOpen: o.AuditFailOpen, AuditTee: o.AuditTee,
		Metrics: NewMetrics(ca), Limits: o.Limits, Logger: log})
	if err != nil {
		closeAudit()
		return nil, err
	}
	p.closeAudit = closeAudit
	return p, nil
}

// CheckFlags checks what an operator typed into o (its allowed ranges,
// --resolve pins and upstream CA files) without setting anything up: a
// mistake there is a usage error, said before a policy is compiled or a
// sandbox made. The system roots Build adds those files to are read
// meanwhile (PrepareRoots).
func CheckFlags(o Options) error {
	PrepareRoots()
	for _, r := range o.AllowRanges {
		if _, err := egress.ParseAllowRange(r); err != nil {
			return err
		}
	}
	if _, err := egress.New(egress.Options{Resolve: o.Resolve}); err != nil {
		return err
	}
	if err := appendCAs(x509.NewCertPool(), o.UpstreamCAs); err != nil {
		return fmt.Errorf("--upstream-ca: %w", err)
	}
	// Looked at here too, so that a link is a usage error before a policy
	// is compiled; the open (openAudit) refuses one all the same, swapped
	// in since.
	if _, own := OwnDescriptor(o.AuditLog); !own {
		if fi, err := os.Lstat(o.AuditLog); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			return auditLinkError(o.AuditLog)
		}
	}
	return nil
}

func auditLinkError(path string) error {
	return fmt.Errorf("audit log %s is a symbolic link: give the file itself (or -, stderr)", path)
}

func loadCA(o Options) (*certs.CA, error) {
	if o.CACert != "" || o.CAKey != "" {
		if o.CACert == "" || o.CAKey == "" {
			return nil, errors.New("an operator-supplied CA needs both its certificate and its key")
		}
		return certs.Load(o.CACert, o.CAKey, 4096)
	}
	dir := o.CADir
	if dir == "" {
		dir = DefaultCADir()
	}
	return certs.LoadOrCreate(dir, 4096)
}

// upstreamRoots are the system roots plus the operator's CA files.
func upstreamRoots(files []string) (*x509.CertPool, error) {
	roots, err := x509.SystemCertPool()
	if err != nil {
		return nil, fmt.Errorf("system roots: %w", err)
	}
	if err := appendCAs(roots, files); err != nil {
		return nil, err
	}
	return roots, nil
}

func appendCAs(pool *x509.CertPool, files []string) error {
	for _, file := range files {
		pem, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("upstream CA: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("upstream CA %s: no PEM certificates", file)
		}
	}
	return nil
}

// PrepareRoots starts reading the system's roots in the background, for a
// process to overlap with its other setup (its policy's compile): every
// certificate of the system's bundle is parsed, ~10 ms on the 2-vCPU VM.
// Build waits for what it has not finished; Go keeps the pool.
func PrepareRoots() { go x509.SystemCertPool() }

// OwnDescriptor says whether path names one of this process's own
// descriptors rather than a file ("-" and "" are stdout, "stderr"
// stderr; /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N), and
// which.
func OwnDescriptor(path string) (int, bool) {
	switch path {
	case "-", "", "/dev/stdout":
		return 1, true
	case "stderr", "/dev/stderr":
		return 2, true
	}
	for _, dir := range []string{"/dev/fd/", "/proc/self/fd/"} {
		if n, ok := strings.CutPrefix(path, dir); ok {
			if fd, err := strconv.Atoi(n); err == nil && fd >= 0 {
				return fd, true
			}
		}
	}
	return 0, false
}

// DupOwnDescriptor is a copy (close-on-exec) of this process's descriptor
// fd, which path (OwnDescriptor) names, for writing what the process makes
// there: one not open for writing is refused.
func DupOwnDescriptor(fd int, path string) (*os.File, error) {
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil || flags&unix.O_ACCMODE == unix.O_RDONLY {
		return nil, fmt.Errorf("descriptor %d is not open for writing", fd)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, &os.SyscallError{Syscall: "fcntl(F_DUPFD_CLOEXEC)", Err: err}
	}
	return os.NewFile(uintptr(dup), path), nil
}

// openAudit opens the audit log. A write to a closed stdout or stderr pipe
// is made an EPIPE error like any other, on which the proxy refuses what it
// cannot record, instead of the death by SIGPIPE Go gives a program that
// does not ask for the signal. The signal is asked for, never ignored: an
// ignored SIGPIPE would be inherited by the commands airlock sandboxes, and
// a handled one is reset by their execve.
func openAudit(path string) (io.Writer, func() error, error) {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	// The process's own descriptors by any of their names: reopened
	// through /proc, they would be whatever another user's shell made
	// them (and, links, refused below).
	if fd, ok := OwnDescriptor(path); ok {
		switch fd {
		case 1:
			return os.Stdout, func() error { return nil }, nil
		case 2:
			return os.Stderr, func() error { return nil }, nil
		}
		f, err := DupOwnDescriptor(fd, path)
		if err != nil {
			return nil, nil, fmt.Errorf("audit log %s: %w", path, err)
		}
		return f, f.Close, nil
	}
	// Not through a symbolic link, without blocking, and only a file root
	// or this user owns: one another user made there is theirs, not the
	// log.
	f, err := trusted.OpenOutput(path, unix.O_APPEND, 0o600)
	if errors.Is(err, unix.ELOOP) {
		return nil, nil, auditLinkError(path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err == nil {
		if err = trusted.Owner(fi); err != nil {
			err = fmt.Errorf("neither root nor this user owns it, and another user's file is not the log: %w", err)
		}
	}
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	return f, f.Close, nil
}

// hostAddrs are the proxy host's own interface addresses, which the SSRF
// guard refuses (loopback and private ones are refused anyway).
func hostAddrs() []netip.Addr {
	var out []netip.Addr
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}

// Metrics is the proxy's metrics, for a /metrics endpoint.
func (p *Proxy) Metrics() *Metrics { return p.cfg.Metrics }

// Close releases what Build opened (the audit file), once Shutdown has
// returned and the last close lines are written.
func (p *Proxy) Close() error {
	if p.closeAudit == nil {
		return nil
	}
	return p.closeAudit()
}

// AuditWriter takes audit lines of others into the proxy's log (the pod's
// ingress writes its own there, so that one log holds every way in and
// out), one line per Write. Each is written as the proxy writes its own,
// under the same lock: whole or not at all (a line a full disk cut short is
// removed), never inside another.
func (p *Proxy) AuditWriter() io.Writer { return otherLines{p.audit} }

type otherLines struct{ l *auditLog }

func (a otherLines) Write(line []byte) (int, error) {
	if err := a.l.put(line); err != nil {
		return 0, err
	}
	return len(line), nil
}
