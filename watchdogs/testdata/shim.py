#!/usr/bin/env python3
"""A model shim for the watchdog's tests: GET /v1/models on 127.0.0.1:PORT.

  shim.py PORT          serve until killed
  shim.py PORT --crash  exit 1 at once (a shim in a crash loop)
"""

import http.server
import json
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "test-model", "object": "model"}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass  # the test reads the inbox, not the shim's log


if __name__ == "__main__":
    if "--crash" in sys.argv:
        sys.exit(1)
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
