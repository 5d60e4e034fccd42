"""The server's /metrics: a GET on loopback and a small parser of Prometheus' text format.

Stdlib only (it runs in every image; the lab's host deps have no prometheus_client). The
parser reads the text exposition format 0.0.4, which prometheus_client's `generate_latest`
(sglang's /metrics) writes:

    # HELP name text            (comments: skipped, as is any other '#' line)
    # TYPE name counter
    name{label="value",other="a \\"quoted\\" \\\\ value\\n"} 12.0 [timestamp]
    name 3

Label values escape backslash, double quote and newline; values are floats, `+Inf`, `-Inf`
or `NaN`. Names may contain ':' (sglang's `sglang:` prefix).

offload_counters() picks the v3 engine's offload counters out of the samples, matched by their
`path` and `event` labels only (the server adds model_name, engine_type and others):

    sglang:offload_events_total{path=P, event=E}   -> {"P.E": value}, summed over other labels
    sglang:offload_queue_depth{path=P}             -> {"P": value}
"""

from __future__ import annotations

import http.client
import math
from dataclasses import dataclass, field

OFFLOAD_EVENTS = "sglang:offload_events_total"
OFFLOAD_QUEUE_DEPTH = "sglang:offload_queue_depth"
OFFLOAD_PATHS = ("tokenizer_process", "json_process", "preprocessing_lane_bulk", "preprocessing_lane_small")
OFFLOAD_EVENT_NAMES = ("uses", "fallbacks", "deadline_kills", "restarts", "start_failures", "rejected")

_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


class MetricsParseError(ValueError):
    """A line that is not a sample of the text format; the message names the line."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict = field(default_factory=dict)
    value: float = 0.0


def _value(text: str, number: int) -> float:
    word = text.strip()
    special = {"+inf": math.inf, "inf": math.inf, "-inf": -math.inf, "nan": math.nan}
    if word.lower() in special:
        return special[word.lower()]
    try:
        return float(word)
    except ValueError:
        raise MetricsParseError(f"line {number}: value {word!r} is not a number") from None


def _labels(line: str, start: int, number: int) -> tuple[dict, int]:
    """Parses `{a="x",b="y"}` from line[start] == '{'; returns (labels, index after '}')."""
    labels: dict = {}
    i = start + 1
    n = len(line)
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == "}":
            return labels, i + 1
        name_start = i
        while i < n and (line[i].isalnum() or line[i] == "_"):
            i += 1
        name = line[name_start:i]
        while i < n and line[i] in " \t":
            i += 1
        if not name or i >= n or line[i] != "=":
            raise MetricsParseError(f"line {number}: expected label=\"value\" at column {i + 1}: {line!r}")
        i += 1
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != '"':
            raise MetricsParseError(f"line {number}: label {name} has no quoted value: {line!r}")
        i += 1
        chars = []
        while True:
            if i >= n:
                raise MetricsParseError(f"line {number}: unterminated value of label {name}: {line!r}")
            ch = line[i]
            if ch == "\\":
                if i + 1 >= n:
                    raise MetricsParseError(f"line {number}: dangling backslash in label {name}: {line!r}")
                nxt = line[i + 1]
                chars.append(_ESCAPES.get(nxt, "\\" + nxt))  # unknown escapes are kept as written
                i += 2
                continue
            if ch == '"':
                i += 1
                break
            chars.append(ch)
            i += 1
        labels[name] = "".join(chars)
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == ",":
            i += 1
            continue
        if i < n and line[i] == "}":
            return labels, i + 1
        raise MetricsParseError(f"line {number}: expected ',' or '}}' after label {name}: {line!r}")


def parse(text: str) -> list[Sample]:
    """Every sample of a text-format exposition, in order; comments and blank lines skipped."""
    samples = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        i = 0
        while i < len(line) and (line[i].isalnum() or line[i] in "_:"):
            i += 1
        name = line[:i]
        if not name or name[0].isdigit():
            raise MetricsParseError(f"line {number}: no metric name: {raw!r}")
        labels: dict = {}
        j = i
        while j < len(line) and line[j] in " \t":  # blanks may separate the tokens
            j += 1
        if j < len(line) and line[j] == "{":
            labels, i = _labels(line, j, number)
        rest = line[i:].split()
        if not rest or len(rest) > 2:
            raise MetricsParseError(f"line {number}: expected a value (and an optional timestamp): {raw!r}")
        samples.append(Sample(name, labels, _value(rest[0], number)))
    return samples


def _number(value: float):
    return int(value) if math.isfinite(value) and value == int(value) else value


def offload_counters(samples: list[Sample]) -> dict | None:
    """{"events": {"path.event": n}, "queue_depth": {path: n}}, or None when the server exports
    no sglang:offload_events_total sample at all (stock and upstream: no offload paths)."""
    events: dict = {}
    depth: dict = {}
    found = False
    for sample in samples:
        if sample.name == OFFLOAD_EVENTS:
            found = True
            path, event = sample.labels.get("path"), sample.labels.get("event")
            if path is None or event is None:
                continue
            key = f"{path}.{event}"
            events[key] = events.get(key, 0.0) + sample.value
        elif sample.name == OFFLOAD_QUEUE_DEPTH and "path" in sample.labels:
            path = sample.labels["path"]
            depth[path] = depth.get(path, 0.0) + sample.value
    if not found:
        return None
    return {"events": {k: _number(v) for k, v in sorted(events.items())},
            "queue_depth": {k: _number(v) for k, v in sorted(depth.items())}}


def scrape(port: int, timeout_s: float = 10.0, host: str = "127.0.0.1") -> tuple[int, str, str | None]:
    """GET /metrics: (HTTP status, body text, error); status 0 when no answer came."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        body = response.read().decode("utf-8", "replace")
        return response.status, body, None if response.status == 200 else f"HTTP {response.status}: {body[:200]!r}"
    except (OSError, http.client.HTTPException) as err:
        return 0, "", f"{type(err).__name__}: {err}"
    finally:
        conn.close()
