#!/usr/bin/env python3
"""The demo pod's shim: an OpenAI-style bridge to the model API.

Python's standard library only (it runs in a sandbox with nothing
installed). It listens on 127.0.0.1:$SHIM_PORT (default 8901; 0 picks a
free port) and calls the model API at $MODEL_API (default
https://api.model.test:18443) through the pod's egress proxy: the sandbox
sets HTTPS_PROXY and points SSL_CERT_FILE at a bundle holding the airlock
CA, which OpenSSL's default context reads.

  GET  /healthz              200 {"ok": true}
  GET  /v1/models            the model API's model list
  POST /v1/chat/completions  forwarded; the model API's answer returned

When the proxy denies a request (403 with a JSON reason, to the CONNECT or
to the request inside an inspected tunnel), the caller gets a 502 whose
OpenAI-style error carries the proxy's JSON under "airlock": the denial
says what failed, so the agent can act on it.
"""

import http.client
import http.server
import json
import os
import signal
import socket
import ssl
import sys
import urllib.parse
import urllib.request

HOST = os.environ.get("SHIM_HOST", "127.0.0.1")
PORT = int(os.environ.get("SHIM_PORT", "8901"))
MODEL_API = os.environ.get("MODEL_API", "https://api.model.test:18443")
TIMEOUT = float(os.environ.get("SHIM_TIMEOUT", "30"))
MAX_BODY = 1 << 20


class Denied(Exception):
    """The proxy refused the CONNECT: its status, reason and JSON body."""

    def __init__(self, status, reason, body):
        super().__init__(f"proxy refused the tunnel: {status} {reason}")
        self.status, self.reason, self.body = status, reason, body


def _proxy_for(scheme, host):
    """The proxy URL the environment names for this request, or None."""
    if urllib.request.proxy_bypass_environment(host):
        return None
    return urllib.request.getproxies_environment().get(scheme)


def _tunnel(proxy, host, port, context):
    """Opens a CONNECT tunnel through proxy and TLS inside it.

    http.client's own set_tunnel drops the proxy's answer to a refused
    CONNECT, and with it the denial's reason: this keeps it.
    """
    p = urllib.parse.urlsplit(proxy)
    sock = socket.create_connection((p.hostname, p.port or 80), timeout=TIMEOUT)
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode("ascii"))
    resp = http.client.HTTPResponse(sock, method="CONNECT")
    try:
        resp.begin()
        if resp.status != 200:
            raise Denied(resp.status, resp.getheader("X-Airlock-Reason", ""), resp.read())
    except BaseException:
        sock.close()
        raise
    conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT)
    conn.sock = context.wrap_socket(sock, server_hostname=host)
    return conn


def _connection(url):
    """A connection for url and the request target to send on it."""
    u = urllib.parse.urlsplit(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    proxy = _proxy_for(u.scheme, u.hostname)
    target = u.path or "/"
    if u.query:
        target += "?" + u.query
    if u.scheme == "https":
        context = ssl.create_default_context()
        if proxy:
            return _tunnel(proxy, u.hostname, port, context), target
        return http.client.HTTPSConnection(u.hostname, port, timeout=TIMEOUT, context=context), target
    if u.scheme != "http":
        raise ValueError(f"MODEL_API {MODEL_API!r}: want an http or https URL")
    if proxy:
        p = urllib.parse.urlsplit(proxy)
        return http.client.HTTPConnection(p.hostname, p.port or 80, timeout=TIMEOUT), url
    return http.client.HTTPConnection(u.hostname, port, timeout=TIMEOUT), target


def upstream(method, path, body=None):
    """Calls the model API: (status, headers, body)."""
    conn, target = _connection(MODEL_API.rstrip("/") + path)
    try:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, target, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


def _json_or_text(data):
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")


def error(message, kind, **extra):
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": kind, **extra}}


def forward(method, path, body=None):
    """Calls the model API: (status, JSON body) for the caller."""
    try:
        status, headers, data = upstream(method, path, body)
    except Denied as d:
        denial = _json_or_text(d.body)
        return 502, error(
            f"airlock denied the request to the model API: {d.reason or d.status}",
            "egress_denied", code=d.reason or None, airlock=denial)
    except (OSError, http.client.HTTPException, ValueError) as e:
        return 502, error(f"model API unreachable: {e}", "upstream_unreachable")
    reason = headers.get("X-Airlock-Reason")
    if reason:
        # Refused inside an inspected tunnel: the proxy answered, not the
        # model API.
        return 502, error(f"airlock denied the request to the model API: {reason}",
                          "egress_denied", code=reason, airlock=_json_or_text(data))
    answer = _json_or_text(data)
    if not 200 <= status < 300:
        return 502, error(f"model API answered {status}", "upstream_error", status=status, upstream=answer)
    if not isinstance(answer, dict):
        return 502, error("model API answered something that is not a JSON object", "upstream_error", upstream=answer)
    return 200, answer


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "airlock-demo-shim"
    protocol_version = "HTTP/1.1"

    def send_json(self, status, body):
        data = (json.dumps(body) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/healthz":
            return self.send_json(200, {"ok": True})
        if self.path == "/v1/models":
            return self.send_json(*forward("GET", "/v1/models"))
        return self.send_json(404, error(f"no route {self.path}", "invalid_request_error"))

    def do_POST(self):
        if self.path != "/v1/chat/completions":
            return self.send_json(404, error(f"no route {self.path}", "invalid_request_error"))
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            return self.send_json(411, error("a Content-Length is required", "invalid_request_error"))
        if not 0 <= length <= MAX_BODY:
            return self.send_json(413, error(f"the body must be at most {MAX_BODY} bytes", "invalid_request_error"))
        body = self.rfile.read(length)
        try:
            req = json.loads(body)
        except ValueError:
            return self.send_json(400, error("the body is not JSON", "invalid_request_error"))
        if not isinstance(req, dict) or not isinstance(req.get("model"), str) or not isinstance(req.get("messages"), list):
            return self.send_json(400, error("want {\"model\": ..., \"messages\": [...]}", "invalid_request_error"))
        return self.send_json(*forward("POST", "/v1/chat/completions", json.dumps(req).encode()))

    def log_message(self, fmt, *args):
        if self.path != "/healthz":  # the supervisor's probes, every second
            sys.stderr.write("shim: %s %s\n" % (self.address_string(), fmt % args))


def main():
    server = http.server.ThreadingHTTPServer((HOST, PORT), Handler)
    server.daemon_threads = True
    # The supervisor stops a service with SIGTERM: leave at once, cleanly.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    host, port = server.server_address[:2]
    print(f"shim listening on {host}:{port}, model API {MODEL_API}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
