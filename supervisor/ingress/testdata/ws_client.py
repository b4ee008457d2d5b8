#!/usr/bin/env python3
"""A WebSocket client with only Python's standard library.

Usage: ws_client.py HOST:PORT MESSAGE [HEADER: VALUE ...]

It sends the opening handshake (RFC 6455 section 4.1) with the given extra
headers, checks Sec-WebSocket-Accept, sends MESSAGE as one masked text
frame, reads the echoed frame, and closes. It prints one JSON object:
{"status", "headers" (lower-case names), "body" (when not 101), "echo"}.
It exits 1 when the server breaks the protocol.
"""
import base64
import hashlib
import json
import os
import socket
import struct
import sys

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def read_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError("connection closed after %d of %d bytes" % (len(data), n))
        data += chunk
    return data


def masked_frame(opcode, payload):
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        header = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def read_frame(sock):
    b0, b1 = read_exact(sock, 2)
    if b1 & 0x80:
        raise ValueError("the server masked its frame")
    n = b1 & 0x7F
    if n == 126:
        (n,) = struct.unpack("!H", read_exact(sock, 2))
    elif n == 127:
        (n,) = struct.unpack("!Q", read_exact(sock, 8))
    return b0 & 0x0F, read_exact(sock, n)


def main():
    addr, message, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    host, port = addr.rsplit(":", 1)
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        "GET /ws HTTP/1.1",
        "Host: " + addr,
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: " + key,
        "Sec-WebSocket-Version: 13",
    ] + extra
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())

    raw = b""
    while b"\r\n\r\n" not in raw:
        chunk = sock.recv(4096)
        if not chunk:
            break
        raw += chunk
    head, _, rest = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    status = int(status_line.split(" ")[1])
    headers = {}
    for h in header_lines:
        name, _, value = h.partition(":")
        headers[name.strip().lower()] = value.strip()
    out = {"status": status, "headers": headers}
    if status != 101:
        n = int(headers.get("content-length", "0"))
        out["body"] = (rest + read_exact(sock, n - len(rest)) if n > len(rest) else rest).decode()
        print(json.dumps(out))
        return 0

    want = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
    if headers.get("sec-websocket-accept") != want:
        print("bad Sec-WebSocket-Accept %r, want %r" % (headers.get("sec-websocket-accept"), want), file=sys.stderr)
        return 1
    if rest:
        print("unexpected bytes after the 101: %r" % rest, file=sys.stderr)
        return 1
    sock.sendall(masked_frame(0x1, message.encode()))
    opcode, payload = read_frame(sock)
    if opcode != 0x1:
        print("got opcode %d, want a text frame" % opcode, file=sys.stderr)
        return 1
    out["echo"] = payload.decode()
    sock.sendall(masked_frame(0x8, struct.pack("!H", 1000)))
    opcode, _ = read_frame(sock)
    if opcode != 0x8:
        print("got opcode %d, want the close frame" % opcode, file=sys.stderr)
        return 1
    sock.close()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
