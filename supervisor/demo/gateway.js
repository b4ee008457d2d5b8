// The demo pod's gateway: the service an operator reaches through the
// pod's ingress. Node's standard library only (it runs in a sandbox with
// nothing installed): HTTP and a WebSocket echo on 127.0.0.1:$GATEWAY_PORT
// (default 18789; 0 picks a free port), and the shim at $SHIM_URL (default
// http://127.0.0.1:8901), reached on the pod's loopback, never through the
// proxy.
//
//   GET /healthz  200 {"ok":true}
//   GET /         a hello naming the operator (X-Airlock-Operator, set by
//                 the ingress: believed only on a connection from the
//                 ingress's address, 127.0.0.254, which no other process
//                 of the pod may send from; another service could send
//                 the header too)
//   GET /models   the shim's /v1/models, status and body as the shim gave
//   GET /models/direct
//                 the same list asked of the model API ($MODEL_API) by the
//                 gateway itself, through the proxy ($HTTPS_PROXY): decided
//                 by the gateway's own preset, which in the demo (strict)
//                 denies it; the answer is then a 502 with the proxy's JSON
//   GET /ws       WebSocket (RFC 6455): text and binary messages echoed
'use strict';

const crypto = require('node:crypto');
const http = require('node:http');
const tls = require('node:tls');

const host = process.env.GATEWAY_HOST || '127.0.0.1';
const port = Number(process.env.GATEWAY_PORT || 18789);
const shimURL = new URL(process.env.SHIM_URL || 'http://127.0.0.1:8901');
const modelAPI = new URL(process.env.MODEL_API || 'https://api.model.test:18443');

function sendJSON(res, status, body) {
  const data = JSON.stringify(body) + '\n';
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) });
  res.end(data);
}

// models asks the shim with http.get, which never uses an HTTP proxy: the
// shim is on the pod's own loopback.
function models(res) {
  const req = http.get(new URL('/v1/models', shimURL), { timeout: 10000 }, (up) => {
    const chunks = [];
    up.on('data', (c) => chunks.push(c));
    up.on('end', () => {
      const body = Buffer.concat(chunks);
      res.writeHead(up.statusCode, {
        'Content-Type': up.headers['content-type'] || 'application/json',
        'Content-Length': body.length,
      });
      res.end(body);
    });
    up.on('error', (err) => sendJSON(res, 502, { error: 'shim answer cut short', detail: err.message }));
  });
  req.on('timeout', () => req.destroy(new Error('shim did not answer within 10s')));
  req.on('error', (err) => {
    if (!res.headersSent) sendJSON(res, 502, { error: 'shim unreachable', shim: shimURL.href, detail: err.message });
  });
}

// readAll collects a message's body: what came with the headers (head),
// then the rest of stream, up to length bytes or its end.
function readAll(stream, head, length, done) {
  const chunks = head && head.length ? [head] : [];
  let size = chunks.length ? head.length : 0;
  if (size >= length) return done(Buffer.concat(chunks));
  stream.on('data', (c) => {
    chunks.push(c);
    size += c.length;
    if (size >= length) stream.destroy();
  });
  stream.on('close', () => done(Buffer.concat(chunks)));
  return undefined;
}

function parseJSON(buf) {
  try {
    return JSON.parse(buf.toString('utf8'));
  } catch {
    return buf.toString('utf8');
  }
}

// denied answers with the proxy's refusal: its reason, and its JSON.
function denied(res, up, body) {
  sendJSON(res, 502, {
    error: "airlock denied the gateway's own request to the model API",
    reason: up.headers['x-airlock-reason'] || `proxy answered ${up.statusCode}`,
    airlock: parseJSON(body),
  });
}

// direct asks the model API for its models as the gateway's own egress:
// a CONNECT through the proxy (Node's http client ignores HTTPS_PROXY), TLS
// inside it trusting the CAs in NODE_EXTRA_CA_CERTS (the sandbox points it
// at the airlock CA), and a refusal at either step passed on with its
// reason.
function direct(res) {
  const proxy = process.env.HTTPS_PROXY || process.env.https_proxy;
  if (!proxy) return sendJSON(res, 502, { error: 'no HTTPS_PROXY: the gateway has no way out' });
  const p = new URL(proxy);
  const target = `${modelAPI.hostname}:${modelAPI.port || 443}`;
  const fail = (err) => {
    if (!res.headersSent) sendJSON(res, 502, { error: 'model API unreachable', detail: err.message });
  };
  const tunnel = http.request({
    host: p.hostname, port: p.port || 80, method: 'CONNECT', path: target, headers: { host: target }, timeout: 10000,
  });
  tunnel.on('timeout', () => tunnel.destroy(new Error('the proxy did not answer within 10s')));
  tunnel.on('error', fail);
  tunnel.on('connect', (up, socket, head) => {
    if (up.statusCode !== 200) {
      return readAll(socket, head, Number(up.headers['content-length'] || 0), (body) => denied(res, up, body));
    }
    const secure = tls.connect({ socket, servername: modelAPI.hostname });
    secure.on('error', fail);
    const path = `${modelAPI.pathname.replace(/\/$/, '')}/v1/models`;
    const req = http.request({ createConnection: () => secure, path, headers: { host: target, accept: 'application/json' } }, (ans) => {
      readAll(ans, null, Number(ans.headers['content-length'] || Infinity), (body) => {
        secure.destroy();
        if (ans.headers['x-airlock-reason']) return denied(res, ans, body); // refused inside the tunnel
        res.writeHead(ans.statusCode < 300 ? 200 : 502, { 'Content-Type': 'application/json', 'Content-Length': body.length });
        return res.end(body);
      });
    });
    req.on('error', fail);
    req.end();
    return undefined;
  });
  tunnel.end();
  return undefined;
}

// fromIngress says whether req came from the pod's ingress (its source
// address, sandbox.IngressSource).
function fromIngress(req) {
  const a = req.socket.remoteAddress;
  return a === '127.0.0.254' || a === '::ffff:127.0.0.254';
}

const server = http.createServer((req, res) => {
  const path = new URL(req.url, 'http://gateway').pathname;
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.setHeader('Allow', 'GET, HEAD');
    return sendJSON(res, 405, { error: 'method not allowed', method: req.method });
  }
  switch (path) {
    case '/healthz':
      return sendJSON(res, 200, { ok: true });
    case '/':
      return sendJSON(res, 200, {
        hello: (fromIngress(req) && req.headers['x-airlock-operator']) || 'unknown operator',
        service: 'gateway',
        routes: ['/healthz', '/models', '/models/direct', '/ws'],
      });
    case '/models':
      return models(res);
    case '/models/direct':
      return direct(res);
    default:
      return sendJSON(res, 404, { error: 'not found', path });
  }
});

// WebSocket (RFC 6455), only what an echo needs: the handshake, frames of
// any length, fragmented messages, ping/pong and the closing handshake.
const GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';
const MAX_MESSAGE = 1 << 20; // larger messages are refused with 1009

function refuse(socket, status, reason) {
  const body = JSON.stringify({ error: reason }) + '\n';
  socket.end(`HTTP/1.1 ${status}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}

server.on('upgrade', (req, socket, head) => {
  const key = req.headers['sec-websocket-key'];
  if (new URL(req.url, 'http://gateway').pathname !== '/ws') return refuse(socket, '404 Not Found', 'no WebSocket here; use /ws');
  if ((req.headers.upgrade || '').toLowerCase() !== 'websocket') return refuse(socket, '400 Bad Request', 'Upgrade must be websocket');
  if (req.headers['sec-websocket-version'] !== '13') return refuse(socket, '426 Upgrade Required', 'Sec-WebSocket-Version must be 13');
  if (!key || Buffer.from(key, 'base64').length !== 16) return refuse(socket, '400 Bad Request', 'Sec-WebSocket-Key must be 16 bytes, base64');
  const accept = crypto.createHash('sha1').update(key + GUID).digest('base64');
  socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
    `Sec-WebSocket-Accept: ${accept}\r\n\r\n`);
  echo(socket, head);
});

// frame encodes one unmasked (server) frame.
function frame(opcode, payload) {
  const n = payload.length;
  let header;
  if (n < 126) {
    header = Buffer.from([0x80 | opcode, n]);
  } else if (n < 65536) {
    header = Buffer.alloc(4);
    header[0] = 0x80 | opcode;
    header[1] = 126;
    header.writeUInt16BE(n, 2);
  } else {
    header = Buffer.alloc(10);
    header[0] = 0x80 | opcode;
    header[1] = 127;
    header.writeBigUInt64BE(BigInt(n), 2);
  }
  return Buffer.concat([header, payload]);
}

function closeFrame(code, reason) {
  const p = Buffer.alloc(2 + Buffer.byteLength(reason));
  p.writeUInt16BE(code, 0);
  p.write(reason, 2);
  return frame(0x8, p);
}

function echo(socket, head) {
  let buf = head && head.length ? Buffer.from(head) : Buffer.alloc(0);
  let message = null; // {opcode, parts, size} while a fragmented message arrives
  let closed = false;
  const utf8 = new TextDecoder('utf-8', { fatal: true });

  const fail = (code, reason) => {
    if (closed) return;
    closed = true;
    socket.end(closeFrame(code, reason));
  };

  const onFrame = (fin, opcode, payload) => {
    if (opcode >= 0x8) { // control frames: never fragmented, at most 125 bytes
      if (!fin || payload.length > 125) return fail(1002, 'bad control frame');
      if (opcode === 0x8) {
        closed = true;
        const code = payload.length >= 2 ? payload.readUInt16BE(0) : 1000;
        return socket.end(closeFrame(code, ''));
      }
      if (opcode === 0x9) return socket.write(frame(0xA, payload));
      if (opcode === 0xA) return undefined;
      return fail(1002, `unknown opcode ${opcode}`);
    }
    if (opcode === 0x0 && !message) return fail(1002, 'continuation without a message');
    if (opcode !== 0x0 && message) return fail(1002, 'new message inside a fragmented one');
    if (opcode !== 0x0 && opcode !== 0x1 && opcode !== 0x2) return fail(1002, `unknown opcode ${opcode}`);
    if (opcode !== 0x0) message = { opcode, parts: [], size: 0 };
    message.parts.push(payload);
    message.size += payload.length;
    if (message.size > MAX_MESSAGE) return fail(1009, 'message too big');
    if (!fin) return undefined;
    const data = Buffer.concat(message.parts);
    const op = message.opcode;
    message = null;
    if (op === 0x1) {
      try {
        utf8.decode(data);
      } catch {
        return fail(1007, 'text is not UTF-8');
      }
    }
    return socket.write(frame(op, data));
  };

  const parse = () => {
    while (!closed && buf.length >= 2) {
      const fin = (buf[0] & 0x80) !== 0;
      const rsv = buf[0] & 0x70;
      const opcode = buf[0] & 0x0f;
      const masked = (buf[1] & 0x80) !== 0;
      let len = buf[1] & 0x7f;
      let off = 2;
      if (rsv) return fail(1002, 'reserved bits set');
      if (!masked) return fail(1002, 'client frames must be masked');
      if (len === 126) {
        if (buf.length < 4) return undefined;
        len = buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (buf.length < 10) return undefined;
        const big = buf.readBigUInt64BE(2);
        if (big > BigInt(MAX_MESSAGE)) return fail(1009, 'message too big');
        len = Number(big);
        off = 10;
      }
      if (len > MAX_MESSAGE) return fail(1009, 'message too big');
      if (buf.length < off + 4 + len) return undefined;
      const mask = buf.subarray(off, off + 4);
      const payload = Buffer.from(buf.subarray(off + 4, off + 4 + len));
      for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i & 3];
      buf = buf.subarray(off + 4 + len);
      onFrame(fin, opcode, payload);
    }
    return undefined;
  };

  socket.on('data', (chunk) => {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    parse();
  });
  socket.on('error', () => socket.destroy());
  parse();
}

server.listen(port, host, () => {
  const a = server.address();
  console.log(`gateway listening on ${a.address}:${a.port}`);
});

// The supervisor stops a service with SIGTERM: leave at once, cleanly.
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => process.exit(0));
