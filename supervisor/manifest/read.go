package manifest

import (
	"github.com/airlock-sandbox/airlock/internal/yamlobj"
	"gopkg.in/yaml.v3"
)

// readPod reads the whole document into a Pod holding the defaults for
// every field the manifest leaves out; nil when the YAML cannot be parsed.
func readPod(d *yamlobj.Decoder, data []byte) *Pod {
	doc := d.Document(data)
	if doc == nil {
		return nil
	}
	p := defaultPod()
	root := d.Object(doc, "")
	root.Str("name", true, &p.Name)
	root.Str("state_dir", true, &p.StateDir)
	root.Object("events", false, func(o *yamlobj.Obj) {
		o.Str("file", false, &p.Events.File)
		o.Size("max_bytes", &p.Events.MaxBytes)
		o.Int("keep", false, &p.Events.Keep)
	})
	root.Object("policy", false, func(o *yamlobj.Obj) { readPolicy(o, &p.Policy) })
	root.Object("proxy", false, func(o *yamlobj.Obj) { readProxy(o, &p.Proxy) })
	root.Object("admin", false, func(o *yamlobj.Obj) {
		o.Str("socket", false, &p.Admin.Socket)
		o.Str("http", false, &p.Admin.HTTP)
	})
	root.List("services", true, func(n *yaml.Node, path string) {
		s := defaultService()
		o := d.Object(n, path)
		readService(o, &s)
		o.End()
		p.Services = append(p.Services, s)
	})
	root.List("ingress", false, func(n *yaml.Node, path string) {
		var in Ingress
		o := d.Object(n, path)
		o.Str("name", true, &in.Name)
		o.Str("listen", true, &in.Listen)
		o.Str("service", true, &in.Service)
		o.Int("port", true, &in.Port)
		o.Str("keys", true, &in.Keys)
		o.End()
		p.Ingress = append(p.Ingress, in)
	})
	root.Object("sandboxes", false, func(o *yamlobj.Obj) {
		o.Size("memory_max", &p.Sandboxes.MemoryMax)
		o.Int64("pids_max", &p.Sandboxes.PidsMax)
		o.Int("max", false, &p.Sandboxes.Max)
	})
	root.Duration("stop_grace", &p.StopGrace)
	root.End()
	return p
}

func readPolicy(o *yamlobj.Obj, p *Policy) {
	o.Str("bundle", false, &p.Bundle)
	o.Str("sha256", false, &p.SHA256)
	o.Str("lock", false, &p.Lock)
	o.Str("public_key", false, &p.PublicKey)
	o.Str("key_id", false, &p.KeyID)
	o.Str("signing_alg", false, &p.SigningAlg)
	o.Bool("watch", &p.Watch)
	o.Bool("quarantine", &p.Quarantine)
}

func readProxy(o *yamlobj.Obj, p *Proxy) {
	o.Int("port", false, &p.Port)
	o.Str("ca_dir", false, &p.CADir)
	o.Str("ca_cert", false, &p.CACert)
	o.Str("ca_key", false, &p.CAKey)
	o.Strs("upstream_ca", false, &p.UpstreamCA)
	o.Strs("resolve", false, &p.Resolve)
	o.Strs("allow_range", false, &p.AllowRange)
	o.Str("audit_log", false, &p.AuditLog)
	o.Str("audit_failure", false, &p.AuditFailure)
	o.Object("limits", false, func(o *yamlobj.Obj) {
		l := &p.Limits
		o.Int("max_conns", false, &l.MaxConns)
		o.Int("max_header_bytes", false, &l.MaxHeaderBytes)
		o.Duration("read_header_timeout", &l.ReadHeaderTimeout)
		o.Duration("idle_timeout", &l.IdleTimeout)
		o.Duration("handshake_timeout", &l.HandshakeTimeout)
		o.Duration("tunnel_idle_timeout", &l.TunnelIdleTimeout)
		o.Duration("write_timeout", &l.WriteTimeout)
		o.Duration("upstream_header_timeout", &l.UpstreamHeaderTimeout)
		o.Duration("dial_timeout", &l.DialTimeout)
	})
}

func readService(o *yamlobj.Obj, s *Service) {
	d := o.Decoder()
	o.Str("name", true, &s.Name)
	o.Strs("command", true, &s.Command)
	o.Str("dir", false, &s.Dir)
	o.Str("user", false, &s.User)
	o.Strs("keep_caps", false, &s.KeepCaps)
	o.Str("preset", true, &s.Preset)
	o.Mapping("env", func(key string, n *yaml.Node, path string) {
		if v, ok := d.Str(n, path); ok {
			if s.Env == nil {
				s.Env = map[string]string{}
			}
			s.Env[key] = v
		}
	})
	o.Mapping("secrets", func(key string, n *yaml.Node, path string) {
		var sec Secret
		c := d.Object(n, path)
		c.Str("env", false, &sec.Env)
		c.Str("file", false, &sec.File)
		c.End()
		if s.Secrets == nil {
			s.Secrets = map[string]Secret{}
		}
		s.Secrets[key] = sec
	})
	o.Object("landlock", false, func(o *yamlobj.Obj) {
		o.Strs("ro", false, &s.Landlock.RO)
		o.Strs("rw", false, &s.Landlock.RW)
		o.Strs("exec", false, &s.Landlock.Exec)
		o.Str("mode", false, &s.Landlock.Mode)
	})
	o.Size("memory_max", &s.MemoryMax)
	o.Int64("pids_max", &s.PidsMax)
	if n, path := o.Get("ports", false); n != nil {
		s.Ports = d.Ints(n, path)
	}
	o.Object("health", false, func(o *yamlobj.Obj) {
		h := defaultHealth()
		o.Object("http", false, func(o *yamlobj.Obj) {
			h.HTTP = &HTTPCheck{Path: "/"}
			o.Int("port", true, &h.HTTP.Port)
			o.Str("path", false, &h.HTTP.Path)
		})
		o.Object("tcp", false, func(o *yamlobj.Obj) {
			h.TCP = &TCPCheck{}
			o.Int("port", true, &h.TCP.Port)
		})
		o.Strs("exec", false, &h.Exec)
		o.Duration("interval", &h.Interval)
		o.Duration("timeout", &h.Timeout)
		o.Int("threshold", false, &h.Threshold)
		o.Duration("start_period", &h.StartPeriod)
		s.Health = &h
	})
	o.Strs("after", false, &s.After)
	o.Object("restart", false, func(o *yamlobj.Obj) {
		r := &s.Restart
		o.Str("policy", false, &r.Policy)
		o.Object("backoff", false, func(o *yamlobj.Obj) {
			o.Duration("initial", &r.Initial)
			o.Duration("max", &r.Max)
			o.Float("multiplier", &r.Multiplier)
			o.Float("jitter", &r.Jitter)
		})
		o.Object("give_up", false, func(o *yamlobj.Obj) {
			o.Int("restarts", false, &r.GiveUpAfter)
			o.Duration("window", &r.GiveUpWindow)
		})
	})
}
