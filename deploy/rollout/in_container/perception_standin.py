"""The rehearsal's perception check: the committed check's interface, what a fake scheduler can pass.

The committed check (generators/assets/perception_check.py) asks the model the colour of an
image; the rehearsal's engines run the fake scheduler, which answers "ok" to everything. This
stand-in keeps the interface the rollout drives (PERCEPTION_TARGETS="name=url,...", MODEL_NAME,
one line per replica, exit 1 on any failure) and checks, on each replica directly: /health
answers 200, /v1/models lists MODEL_NAME, a chat completion answers 200 with a message.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request

TIMEOUT_S = 60


def request(url: str, body: dict | None = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except OSError as err:
        return 0, str(err).encode()


def check_replica(name: str, base: str, model: str) -> list[str]:
    failures = []
    status, body = request(f"{base}/health")
    if status != 200:
        failures.append(f"{name}: /health answered {status}: {body[:200]!r}")
    status, body = request(f"{base}/v1/models")
    ids = [m.get("id") for m in json.loads(body or b"{}").get("data", [])] if status == 200 else []
    if model not in ids:
        failures.append(f"{name}: /v1/models ({status}) does not list {model}: {ids}")
    status, body = request(f"{base}/v1/chat/completions", {
        "model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "Say ok."}]})
    if status != 200:
        failures.append(f"{name}: chat completion answered {status}: {body[:200]!r}")
    elif not (json.loads(body)["choices"][0]["message"].get("content") or ""):
        failures.append(f"{name}: chat completion answered an empty message")
    return failures


def main() -> int:
    model = os.environ["MODEL_NAME"]
    targets = [t.split("=", 1) for t in os.environ["PERCEPTION_TARGETS"].split(",") if t]
    failures = []
    for name, base in targets:
        found = check_replica(name, base.rstrip("/"), model)
        print(f"{name}: {'FAIL' if found else 'ok'}", flush=True)
        failures += found
    for line in failures:
        print(line, flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
