#!/usr/bin/python3
"""A sub-agent for the spawn tests (standard library only).

argv: PROMPT_FILE MODE [URL...]. It reads its prompt, then by MODE:
  net URL_OK URL_DENIED  GETs both through the sandbox's proxy (HTTPS_PROXY)
  sleep MARKER           starts a child that sleeps, then sleeps itself
  quick                  nothing
  garbage                prints a last line that is not JSON
and prints one JSON object as its last line.
"""
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

prompt_file, mode = sys.argv[1], sys.argv[2]
with open(prompt_file) as f:
    prompt = f.read()
print("sub-agent starting")  # output before the result line is not the result


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return {"status": r.status, "body": r.read().decode()}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "body": e.read().decode()}
    except Exception as e:  # the test reads the reason
        return {"error": str(e)}


out = {"prompt": prompt}
if mode == "net":
    out["allowed"], out["denied"] = get(sys.argv[3]), get(sys.argv[4])
    out["usage"] = {"tokens": 42}
elif mode == "sleep":
    # The marker in the child's argv (sleep(1) would refuse it as an
    # interval): the tests find both processes by it.
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", sys.argv[3]])
    time.sleep(600)
elif mode == "garbage":
    print("not json")
    sys.exit(0)
print(json.dumps(out))
