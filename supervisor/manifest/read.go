package manifest

import (
	"bytes"
	"errors"
	"io"
	"regexp"
	"strconv"

	"gopkg.in/yaml.v3"
)

// pod reads the whole document into a Pod holding the defaults for every
// field the manifest leaves out; nil when the YAML cannot be parsed.
func (d *decoder) pod(data []byte) *Pod {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.errorf(0, "", "the manifest is empty")
		} else {
			d.syntax(err)
		}
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			d.syntax(err)
		} else {
			d.errorf(extra.Line, "", "a second YAML document: a manifest is one document")
		}
		return nil
	}
	p := defaultPod()
	d.lines[""] = doc.Content[0].Line
	root := d.object(deref(doc.Content[0]), "")
	root.str("name", true, &p.Name)
	root.str("state_dir", true, &p.StateDir)
	root.object("events", false, func(o *obj) {
		o.str("file", false, &p.Events.File)
		o.size("max_bytes", &p.Events.MaxBytes)
		o.int("keep", false, &p.Events.Keep)
	})
	root.object("policy", false, func(o *obj) { readPolicy(o, &p.Policy) })
	root.object("proxy", false, func(o *obj) { readProxy(o, &p.Proxy) })
	root.object("admin", false, func(o *obj) {
		o.str("socket", false, &p.Admin.Socket)
		o.str("http", false, &p.Admin.HTTP)
	})
	root.list("services", true, func(n *yaml.Node, path string) {
		s := defaultService()
		o := d.object(n, path)
		readService(o, &s)
		o.end()
		p.Services = append(p.Services, s)
	})
	root.list("ingress", false, func(n *yaml.Node, path string) {
		var in Ingress
		o := d.object(n, path)
		o.str("name", true, &in.Name)
		o.str("listen", true, &in.Listen)
		o.str("service", true, &in.Service)
		o.int("port", true, &in.Port)
		o.str("keys", true, &in.Keys)
		o.end()
		p.Ingress = append(p.Ingress, in)
	})
	root.duration("stop_grace", &p.StopGrace)
	root.end()
	return p
}

// yamlLine finds the line in a yaml.v3 syntax error ("yaml: line 3: ...").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func (d *decoder) syntax(err error) {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		d.errorf(line, "", "%s", m[2])
		return
	}
	d.errorf(0, "", "%v", err)
}

func readPolicy(o *obj, p *Policy) {
	o.str("bundle", false, &p.Bundle)
	o.str("sha256", false, &p.SHA256)
	o.str("lock", false, &p.Lock)
	o.str("public_key", false, &p.PublicKey)
	o.str("key_id", false, &p.KeyID)
	o.str("signing_alg", false, &p.SigningAlg)
	o.bool("watch", &p.Watch)
	o.bool("quarantine", &p.Quarantine)
}

func readProxy(o *obj, p *Proxy) {
	o.int("port", false, &p.Port)
	o.str("ca_dir", false, &p.CADir)
	o.str("ca_cert", false, &p.CACert)
	o.str("ca_key", false, &p.CAKey)
	o.strs("upstream_ca", false, &p.UpstreamCA)
	o.strs("resolve", false, &p.Resolve)
	o.strs("allow_range", false, &p.AllowRange)
	o.str("audit_log", false, &p.AuditLog)
	o.str("audit_failure", false, &p.AuditFailure)
	o.object("limits", false, func(o *obj) {
		l := &p.Limits
		o.int("max_conns", false, &l.MaxConns)
		o.int("max_header_bytes", false, &l.MaxHeaderBytes)
		o.duration("read_header_timeout", &l.ReadHeaderTimeout)
		o.duration("idle_timeout", &l.IdleTimeout)
		o.duration("handshake_timeout", &l.HandshakeTimeout)
		o.duration("tunnel_idle_timeout", &l.TunnelIdleTimeout)
		o.duration("write_timeout", &l.WriteTimeout)
		o.duration("upstream_header_timeout", &l.UpstreamHeaderTimeout)
		o.duration("dial_timeout", &l.DialTimeout)
	})
}

func readService(o *obj, s *Service) {
	d := o.d
	o.str("name", true, &s.Name)
	o.strs("command", true, &s.Command)
	o.str("dir", false, &s.Dir)
	o.str("user", false, &s.User)
	o.strs("keep_caps", false, &s.KeepCaps)
	o.str("preset", true, &s.Preset)
	o.mapping("env", func(key string, n *yaml.Node, path string) {
		if v, ok := d.str(n, path); ok {
			if s.Env == nil {
				s.Env = map[string]string{}
			}
			s.Env[key] = v
		}
	})
	o.mapping("secrets", func(key string, n *yaml.Node, path string) {
		var sec Secret
		c := d.object(n, path)
		c.str("env", false, &sec.Env)
		c.str("file", false, &sec.File)
		c.end()
		if s.Secrets == nil {
			s.Secrets = map[string]Secret{}
		}
		s.Secrets[key] = sec
	})
	o.object("landlock", false, func(o *obj) {
		o.strs("ro", false, &s.Landlock.RO)
		o.strs("rw", false, &s.Landlock.RW)
		o.strs("exec", false, &s.Landlock.Exec)
		o.str("mode", false, &s.Landlock.Mode)
	})
	o.size("memory_max", &s.MemoryMax)
	o.int64("pids_max", &s.PidsMax)
	if n, path := o.get("ports", false); n != nil {
		s.Ports = d.ints(n, path)
	}
	o.object("health", false, func(o *obj) {
		h := defaultHealth()
		o.object("http", false, func(o *obj) {
			h.HTTP = &HTTPCheck{Path: "/"}
			o.int("port", true, &h.HTTP.Port)
			o.str("path", false, &h.HTTP.Path)
		})
		o.object("tcp", false, func(o *obj) {
			h.TCP = &TCPCheck{}
			o.int("port", true, &h.TCP.Port)
		})
		o.strs("exec", false, &h.Exec)
		o.duration("interval", &h.Interval)
		o.duration("timeout", &h.Timeout)
		o.int("threshold", false, &h.Threshold)
		o.duration("start_period", &h.StartPeriod)
		s.Health = &h
	})
	o.strs("after", false, &s.After)
	o.object("restart", false, func(o *obj) {
		r := &s.Restart
		o.str("policy", false, &r.Policy)
		o.object("backoff", false, func(o *obj) {
			o.duration("initial", &r.Initial)
			o.duration("max", &r.Max)
			o.float("multiplier", &r.Multiplier)
			o.float("jitter", &r.Jitter)
		})
		o.object("give_up", false, func(o *obj) {
			o.int("restarts", false, &r.GiveUpAfter)
			o.duration("window", &r.GiveUpWindow)
		})
	})
}
