// A Node gateway for the watchdog's tests, on 127.0.0.1:PORT:
//   GET /healthz  200
//   GET /leak     fills the V8 heap until it runs out (NODE_OPTIONS
//                 --max-old-space-size bounds it): "JavaScript heap out of memory"
//   GET /hog      allocates memory outside the heap (Buffers) until its
//                 cgroup's OOM killer kills it
// node gateway.js PORT [--crash | --crash-if FILE | --leak-if FILE]
//   --crash: exit 1 at once; --crash-if: exit 1 at once when FILE exists;
//   --leak-if: once it answers, run out of heap when FILE exists
const fs = require("fs");
const http = require("http");
const crashIf = process.argv.indexOf("--crash-if");
if (process.argv.includes("--crash") || (crashIf > 0 && fs.existsSync(process.argv[crashIf + 1]))) process.exit(1);
const kept = [];
http.createServer((req, res) => {
  if (req.url === "/leak") {
    for (;;) kept.push(new Array(1 << 16).fill({ n: kept.length }));
  }
  if (req.url === "/hog") {
    for (;;) kept.push(Buffer.alloc(8 << 20, 1));
  }
  res.writeHead(req.url === "/healthz" ? 200 : 404, { "Content-Type": "text/plain" });
  res.end("ok\n");
}).listen(Number(process.argv[2]), "127.0.0.1", () => {
  const leakIf = process.argv.indexOf("--leak-if");
  if (leakIf > 0 && fs.existsSync(process.argv[leakIf + 1])) {
    for (;;) kept.push(new Array(1 << 16).fill({ n: kept.length }));
  }
});
