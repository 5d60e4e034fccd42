"""Operator-only semantic check of each engine replica (profile `verification`).

Source: generators/assets/perception_check.py, embedded into the compose file as a config.
For every replica in PERCEPTION_TARGETS ("name=url,name=url"): /health answers 200,
/v1/models lists MODEL_NAME, and the model names the colour of a generated solid-colour PNG.
Standard library only; talks to the engines directly on the compose network. Exit 1 on any
failure, with one line per check.

GLM thinks before it answers (`--reasoning-parser glm45`): the thinking comes back in
`reasoning_content`, the answer in `content`. The token budget leaves room for the thinking,
and when the budget ran out before an answer (`content` empty) the thinking is what is judged,
so a healthy replica is not failed (and rolled back) for thinking at length.
"""

from __future__ import annotations

import base64
import json
import os
import re
import struct
import sys
import urllib.error
import urllib.request
import zlib

TIMEOUT_S = 300
# Room for GLM's thinking before the one-word answer (a few hundred to a few thousand tokens
# on this question); PERCEPTION_MAX_TOKENS overrides it.
MAX_TOKENS = 8192
_RED = re.compile(r"\bred\b", re.IGNORECASE)


def solid_png(rgb: tuple[int, int, int], size: int = 64) -> bytes:
    """A size x size PNG of one colour, built without imaging libraries."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    row = b"\x00" + bytes(rgb) * size
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(row * size)) + chunk(b"IEND", b""))


def request(url: str, body: dict | None = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def judged_text(message: dict) -> tuple[str, str]:
    """(which field, its text): the answer when there is one, else the thinking."""
    content = (message.get("content") or "").strip()
    if content:
        return "content", content
    return "reasoning_content", (message.get("reasoning_content") or "").strip()


def check_replica(name: str, base: str, model: str, max_tokens: int = MAX_TOKENS) -> list[str]:
    failures = []
    status, _ = request(f"{base}/health")
    if status != 200:
        failures.append(f"{name}: /health answered {status}")
    status, body = request(f"{base}/v1/models")
    ids = [m.get("id") for m in json.loads(body or b"{}").get("data", [])] if status == 200 else []
    if model not in ids:
        failures.append(f"{name}: /v1/models ({status}) does not list {model}: {ids}")
    image = base64.b64encode(solid_png((220, 20, 20))).decode()
    status, body = request(f"{base}/v1/chat/completions", {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0,
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
            {"type": "text", "text": "What colour fills this image? Answer with one word."},
        ]}],
    })
    if status != 200:
        failures.append(f"{name}: chat completion answered {status}: {body[:200]!r}")
    else:
        choice = json.loads(body)["choices"][0]
        field, answer = judged_text(choice.get("message") or {})
        if not _RED.search(answer):
            why = f" (finish_reason {choice.get('finish_reason')!r}, max_tokens {max_tokens})" if not answer else ""
            failures.append(f"{name}: expected 'red' in the answer, got {field} {answer[-200:]!r}{why}")
    return failures


def main() -> int:
    model = os.environ["MODEL_NAME"]
    max_tokens = int(os.environ.get("PERCEPTION_MAX_TOKENS") or MAX_TOKENS)
    targets = [t.split("=", 1) for t in os.environ["PERCEPTION_TARGETS"].split(",") if t]
    failures = []
    for name, base in targets:
        found = check_replica(name, base.rstrip("/"), model, max_tokens)
        print(f"{name}: {'FAIL' if found else 'ok'}", flush=True)
        failures += found
    for line in failures:
        print(line, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
