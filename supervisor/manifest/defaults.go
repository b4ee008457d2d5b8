package manifest

import (
	"path/filepath"
	"time"
)

// Defaults, one place: the README's manifest table lists the same.
const (
	DefaultEventsFile   = "agent-inbox.jsonl"
	DefaultEventsBytes  = 10 << 20
	DefaultEventsKeep   = 3
	DefaultProxyPort    = 3128
	DefaultAuditFile    = "audit.jsonl"
	DefaultAdminSocket  = "admin.sock"
	DefaultUser         = "998:998"
	DefaultStopGrace    = 10 * time.Second
	DefaultLandlockMode = "hard"
)

// The limits of a one-off sandbox when the manifest names none: it runs
// model-written code, and without them one fork bomb takes the pod's
// supervisor down with it (no thread left to create) and one allocation
// the host's memory. 1024 tasks (threads count) is CRI-O's pids_limit;
// 2 GiB holds a toolchain's build and test run. A pod whose one-offs
// need more says so in its manifest.
const (
	DefaultSandboxMemoryMax = 2 << 30
	DefaultSandboxPidsMax   = 1024
)

// DefaultSandboxesMax is how many one-off sandboxes may run in a pod at
// once when the manifest does not say: 16 × 2 GiB and 1024 tasks is what a
// pod's launchers (sub-agents fanned out, operators' commands) can take of
// the host at most, rather than all of it.
const DefaultSandboxesMax = 16

// defaultPod is a Pod before the manifest is read into it: every field the
// manifest may leave out holds its default. Defaults that depend on the
// state dir are filled by resolve.
func defaultPod() *Pod {
	return &Pod{
		Events:    Events{File: DefaultEventsFile, MaxBytes: DefaultEventsBytes, Keep: DefaultEventsKeep},
		Policy:    Policy{KeyID: "default", SigningAlg: "RS256", Watch: true},
		Proxy:     Proxy{Port: DefaultProxyPort, AuditFailure: "closed"},
		Sandboxes: Sandboxes{MemoryMax: DefaultSandboxMemoryMax, PidsMax: DefaultSandboxPidsMax, Max: DefaultSandboxesMax},
		StopGrace: DefaultStopGrace,
	}
}

func defaultService() Service {
	return Service{
		User:     DefaultUser,
		Landlock: Landlock{Mode: DefaultLandlockMode},
		Restart: Restart{
			Policy:       "on-failure",
			Initial:      200 * time.Millisecond,
			Max:          30 * time.Second,
			Multiplier:   2,
			Jitter:       0.2,
			GiveUpAfter:  5,
			GiveUpWindow: 60 * time.Second,
		},
	}
}

func defaultHealth() Health {
	return Health{Interval: 2 * time.Second, Timeout: time.Second, Threshold: 3}
}

// resolve makes every path absolute: relative ones are taken from baseDir
// (the manifest's directory), but the events file from the state dir; the
// audit log and admin socket default to files in the state dir.
func resolve(p *Pod, baseDir string) {
	abs := func(s *string) {
		if *s != "" && !filepath.IsAbs(*s) {
			*s = filepath.Join(baseDir, *s)
		}
	}
	all := func(ss []string) {
		for i := range ss {
			abs(&ss[i])
		}
	}
	abs(&p.StateDir)
	if p.StateDir == "" {
		return // reported as missing; nothing else can be placed
	}
	if !filepath.IsAbs(p.Events.File) {
		p.Events.File = filepath.Join(p.StateDir, p.Events.File)
	}
	abs(&p.Policy.Bundle)
	abs(&p.Policy.Lock)
	abs(&p.Policy.PublicKey)
	abs(&p.Proxy.CADir)
	abs(&p.Proxy.CACert)
	abs(&p.Proxy.CAKey)
	all(p.Proxy.UpstreamCA)
	switch p.Proxy.AuditLog {
	case "-", "stderr": // stdout and stderr, as `airlock proxy --audit-log`
	case "":
		p.Proxy.AuditLog = filepath.Join(p.StateDir, DefaultAuditFile)
	default:
		abs(&p.Proxy.AuditLog)
	}
	if p.Admin.Socket == "" {
		p.Admin.Socket = filepath.Join(p.StateDir, DefaultAdminSocket)
	}
	abs(&p.Admin.Socket)
	for i := range p.Services {
		s := &p.Services[i]
		abs(&s.Dir)
		all(s.Landlock.RO)
		all(s.Landlock.RW)
		all(s.Landlock.Exec)
		for k, sec := range s.Secrets {
			abs(&sec.File)
			s.Secrets[k] = sec
		}
	}
	for i := range p.Ingress {
		abs(&p.Ingress[i].Keys)
	}
}
