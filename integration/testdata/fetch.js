// A client that knows nothing of the proxy (Node's fetch with the proxy
// variables unset), for the transparent egress tests.
//
// argv: URL [METHOD]. Prints "STATUS BODY", or "error: ..." and exits 1.
// The airlock CA is trusted through NODE_EXTRA_CA_CERTS.
const [url, method = "GET"] = process.argv.slice(2);
fetch(url, { method })
  .then(async (r) => console.log(r.status, await r.text()))
  .catch((e) => {
    console.log("error:", e.message, e.cause ? e.cause.code || e.cause.message : "");
    process.exitCode = 1;
  });
