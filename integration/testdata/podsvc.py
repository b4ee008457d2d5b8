"""A pod service for the supervisor's integration tests (standard library only).

argv: PORT NAME. Listens on 127.0.0.1:PORT inside the pod and answers:
  /healthz              200 ok
  /whoami               {"name", "pid"}
  /fetch?url=U          U fetched through the proxy (HTTPS_PROXY): {"status", "body"} or {"error"}
  /peer?port=P          GET http://127.0.0.1:P/healthz directly (a pod peer): {"status", "body"} or {"error"}
  /direct?addr=H:P      a TCP connect to H:P without the proxy: {"connected": true} or {"errno"}
"""
import errno
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


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        u = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(u.query).items()}
        if u.path == "/healthz":
            out = "ok"
        elif u.path == "/whoami":
            out = {"name": NAME, "pid": os.getpid()}
        elif u.path == "/fetch":
            out = get(q["url"], True)
        elif u.path == "/peer":
            out = get("http://127.0.0.1:%s/whoami" % q["port"], False)
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
