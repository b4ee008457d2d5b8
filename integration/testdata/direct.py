"""A client that knows nothing of the proxy (http.client straight to the
host), for the transparent egress tests.

argv: URL [METHOD]. Prints "STATUS BODY", or "error: ..." and exits 1.
The airlock CA is trusted through SSL_CERT_FILE, as OpenSSL reads it.
"""
import http.client
import sys
from urllib.parse import urlparse

url = urlparse(sys.argv[1])
method = sys.argv[2] if len(sys.argv) > 2 else "GET"
conn_class = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
try:
    conn = conn_class(url.hostname, url.port, timeout=30)
    conn.request(method, url.path or "/")
    resp = conn.getresponse()
    print(resp.status, resp.read().decode())
except Exception as e:  # the test reads what failed
    print("error:", e)
    sys.exit(1)
