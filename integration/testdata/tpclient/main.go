// Command tpclient is a client that knows nothing of the proxy, for the
// transparent egress tests: it runs inside a sandbox, ignores every proxy
// setting and prints what it got, one line per run, for the test to read.
//
//	tpclient get|post URL               an http.Transport with Proxy nil: "STATUS BODY"
//	tpclient dns udp|tcp TYPE NAME [SERVER]
//	                                    one query to SERVER (IP:PORT) or the first
//	                                    nameserver of /etc/resolv.conf: "RCODE ADDR..."
//	tpclient udp HOST:PORT              one datagram, then a read: "ADDR ERRNO"
//
// Failures are printed as "error: ..." and exit 1, so a shell script of
// several runs goes on.
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: tpclient get|post URL | dns udp|tcp TYPE NAME [SERVER] | udp HOST:PORT")
		os.Exit(2)
	}
	var out string
	var err error
	switch os.Args[1] {
	case "get", "post":
		out, err = fetch(strings.ToUpper(os.Args[1]), os.Args[2])
	case "dns":
		if len(os.Args) != 5 && len(os.Args) != 6 {
			fmt.Fprintln(os.Stderr, "usage: tpclient dns udp|tcp TYPE NAME [SERVER]")
			os.Exit(2)
		}
		server := ""
		if len(os.Args) == 6 {
			server = os.Args[5]
		}
		out, err = query(os.Args[2], os.Args[3], os.Args[4], server)
	case "udp":
		out, err = datagram(os.Args[2])
	default:
		fmt.Fprintf(os.Stderr, "tpclient: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(out)
}

// fetch sends one request straight to the URL's host: Proxy nil is what
// a program that never heard of HTTPS_PROXY does. The airlock CA is
// trusted through SSL_CERT_FILE, as crypto/x509 reads it.
func fetch(method, url string) (string, error) {
	client := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 30 * time.Second}
	req, err := http.NewRequest(method, url, strings.NewReader(""))
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("%s %s: read body: %w", method, url, err)
	}
	return fmt.Sprintf("%d %s", resp.StatusCode, body), nil
}

// query asks server, or the system's nameserver as any resolver would,
// with a DNS library rather than a parser of the test's own.
func query(network, qtype, name, server string) (string, error) {
	if server == "" {
		conf, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil {
			return "", err
		}
		if len(conf.Servers) == 0 {
			return "", errors.New("/etc/resolv.conf names no nameserver")
		}
		server = net.JoinHostPort(conf.Servers[0], conf.Port)
	}
	t, ok := dns.StringToType[qtype]
	if !ok {
		return "", fmt.Errorf("unknown query type %q", qtype)
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), t)
	c := &dns.Client{Net: network, Timeout: 10 * time.Second}
	r, _, err := c.Exchange(m, server)
	if err != nil {
		return "", fmt.Errorf("%s %s over %s to %s: %w", qtype, name, network, server, err)
	}
	fields := []string{dns.RcodeToString[r.Rcode]}
	for _, rr := range r.Answer {
		switch a := rr.(type) {
		case *dns.A:
			fields = append(fields, a.A.String())
		case *dns.AAAA:
			fields = append(fields, a.AAAA.String())
		}
	}
	return strings.Join(fields, " "), nil
}

// datagram sends one UDP datagram and reads for an answer: the errno it
// fails with says what stopped it (an answer, or no error within the
// read's bound, is what a way out looks like).
func datagram(addr string) (string, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	remote := c.RemoteAddr().String()
	if _, err := c.Write([]byte("anyone there?")); err != nil {
		return remote + " " + errnoName(err), nil
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 512)); err != nil {
		return remote + " " + errnoName(err), nil
	}
	return remote + " answered", nil
}

func errnoName(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		for _, e := range []syscall.Errno{syscall.EPERM, syscall.EACCES, syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.ENETUNREACH} {
			if errno == e {
				return e.Error()
			}
		}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return err.Error()
}
