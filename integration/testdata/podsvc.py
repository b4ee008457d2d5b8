"""A pod service for the supervisor's integration tests (standard library only).

argv: PORT NAME. Listens on 127.0.0.1:PORT inside the pod and answers:
  /healthz              200 ok
  /moved                302 to a port where nothing listens (a health check takes it as it is)
  /whoami               {"name", "pid"}
  /fetch?url=U          U fetched through the proxy (HTTPS_PROXY): {"status", "body"} or {"error"}
  /peer?port=P          GET http://127.0.0.1:P/healthz directly (a pod peer): {"status", "body"} or {"error"}
  /connect?target=H:P   a CONNECT to the proxy, by hand (urllib hides a refusal's body): {"status", "body"}
  /direct?addr=H:P      a TCP connect to H:P without the proxy: {"connected": true} or {"errno"}
  /straight?url=U       U fetched with http.client straight to its host, never told of the
                        proxy (the transparent path): {"status", "body"} or {"error"}
"""
import errno
import http.client
import json
import os
import socket
import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

PORT, NAME = int(sys.argv[1]), sys.argv[2]


def get(url, proxied):
    handlers = [] if proxied else [urllib.request.ProxyHandler({})]
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(url, timeout=10) as r:
            return {"status": r.status, "body": r.read().decode()}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "body": e.read().decode()}
    except Exception as e:  # the test reads the reason
        return {"error": str(e)}


def straight(url):
    u = urlparse(url)
    conn_class = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    try:
        conn = conn_class(u.hostname, u.port, timeout=10)
        conn.request("GET", u.path or "/")
        r = conn.getresponse()
        return {"status": r.status, "body": r.read().decode()}
    except Exception as e:  # the test reads the reason
        return {"error": str(e)}


def connect(target):
    proxy = urlparse(os.environ["HTTPS_PROXY"])
    with socket.create_connection((proxy.hostname, proxy.port), timeout=10) as s:
        s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
        f = s.makefile("rb")
        status = int(f.readline().split()[1])
        length = 0
        while True:
            line = f.readline().strip()
            if not line:
                break
            k, _, v = line.decode().partition(":")
            if k.lower() == "content-length":
                length = int(v)
        return {"status": status, "body": f.read(length).decode() if length else ""}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        u = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(u.query).items()}
        if u.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:9/login")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if u.path == "/healthz":
            out = "ok"
        elif u.path == "/whoami":
            out = {"name": NAME, "pid": os.getpid()}
        elif u.path == "/fetch":
            out = get(q["url"], True)
        elif u.path == "/peer":
            out = get("http://127.0.0.1:%s/whoami" % q["port"], False)
        elif u.path == "/straight":
            out = straight(q["url"])
        elif u.path == "/connect":
            out = connect(q["target"])
        elif u.path == "/direct":
            host, port = q["addr"].rsplit(":", 1)
            try:
                socket.create_connection((host, int(port)), timeout=5).close()
                out = {"connected": True}
            except OSError as e:
                out = {"errno": errno.errorcode.get(e.errno, str(e))}
        else:
            self.send_error(404)
            return
        body = (out if isinstance(out, str) else json.dumps(out)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
