// A WebSocket echo server with only Node's standard library, standing in
// for the pod's gateway: it answers the upgrade (RFC 6455 section 4.2.2),
// then echoes each text frame. The 101 response carries what the server
// saw of the operator headers, so a test can check what the ingress passed on.
// It prints {"port": N} on stdout once it listens on 127.0.0.1.
'use strict';
const http = require('http');
const crypto = require('crypto');

const GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

const server = http.createServer((req, res) => {
  res.writeHead(426, { 'Content-Type': 'text/plain' });
  res.end('websocket only\n');
});

server.on('upgrade', (req, socket, head) => {
  const key = req.headers['sec-websocket-key'];
  if ((req.headers.upgrade || '').toLowerCase() !== 'websocket' || !key) {
    socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
    return;
  }
  const accept = crypto.createHash('sha1').update(key + GUID).digest('base64');
  const seen = ['authorization', 'x-api-key'].filter((h) => h in req.headers).join(',') || 'none';
  socket.write('HTTP/1.1 101 Switching Protocols\r\n' +
    'Upgrade: websocket\r\nConnection: Upgrade\r\n' +
    `Sec-WebSocket-Accept: ${accept}\r\n` +
    `X-Echo-Operator: ${req.headers['x-airlock-operator'] || 'none'}\r\n` +
    `X-Echo-Key-Headers: ${seen}\r\n\r\n`);
  let buf = head;
  socket.on('data', (chunk) => {
    buf = Buffer.concat([buf, chunk]);
    for (;;) {
      const frame = parseFrame(buf);
      if (!frame) return;
      buf = buf.subarray(frame.length);
      if (frame.opcode === 0x1) socket.write(encodeFrame(0x1, frame.payload));
      else if (frame.opcode === 0x9) socket.write(encodeFrame(0xA, frame.payload));
      else if (frame.opcode === 0x8) { socket.end(encodeFrame(0x8, frame.payload)); return; }
    }
  });
  socket.on('error', () => socket.destroy());
});

// parseFrame reads one whole frame from buf, or returns null until there
// is one. Client frames are masked (RFC 6455 section 5.3).
function parseFrame(buf) {
  if (buf.length < 2) return null;
  const opcode = buf[0] & 0x0f;
  const masked = (buf[1] & 0x80) !== 0;
  let len = buf[1] & 0x7f;
  let off = 2;
  if (len === 126) {
    if (buf.length < 4) return null;
    len = buf.readUInt16BE(2);
    off = 4;
  } else if (len === 127) {
    if (buf.length < 10) return null;
    len = Number(buf.readBigUInt64BE(2));
    off = 10;
  }
  const maskOff = off;
  if (masked) off += 4;
  if (buf.length < off + len) return null;
  const payload = Buffer.from(buf.subarray(off, off + len));
  if (masked) for (let i = 0; i < len; i++) payload[i] ^= buf[maskOff + (i % 4)];
  return { opcode, payload, length: off + len };
}

// encodeFrame makes one unmasked, final server frame.
function encodeFrame(opcode, payload) {
  let header;
  if (payload.length < 126) {
    header = Buffer.from([0x80 | opcode, payload.length]);
  } else if (payload.length < 65536) {
    header = Buffer.alloc(4);
    header[0] = 0x80 | opcode; header[1] = 126; header.writeUInt16BE(payload.length, 2);
  } else {
    header = Buffer.alloc(10);
    header[0] = 0x80 | opcode; header[1] = 127; header.writeBigUInt64BE(BigInt(payload.length), 2);
  }
  return Buffer.concat([header, payload]);
}

server.listen(0, '127.0.0.1', () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + '\n');
});
