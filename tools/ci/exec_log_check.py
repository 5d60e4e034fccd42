"""Fails when a build spawn in a Bazel execution log ran outside the sandbox.

`tools/oci/sandbox_check.py` reads the declared execution requirements (aquery); what actually
ran each spawn is only in the execution log (`--execution_log_json_file`): a `--strategy` or
`--spawn_strategy` flag, a `.bazelrc.user` line, or Bazel 4's silent fallback to local
execution when the sandbox cannot start never show in the action graph. Every spawn but a test's
(`TestRunner`: a test's isolation is its tags, which sandbox_check judges) must have run in
linux-sandbox, remotely, or come from the disk or remote cache. processwrapper-sandbox does not
count: it has no network namespace, so `--nosandbox_default_allow_network` does not hold there.

    python3 tools/ci/exec_log_check.py EXECUTION_LOG.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Iterator

# SpawnExec.runner values (Bazel 4.2.3 reports a disk-cache hit as "remote cache hit").
SANDBOXED = frozenset({"linux-sandbox"})
NOT_RUN_HERE = frozenset({"remote cache hit", "disk cache hit", "remote"})


def spawns(text: str, where: str) -> Iterator[dict]:
    """The SpawnExec objects of a JSON execution log (concatenated JSON objects)."""
    decoder, i = json.JSONDecoder(), 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return
        try:
            obj, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise SystemExit(f"{where}: not a Bazel JSON execution log at offset {i}: {e.msg}; "
                             "write it with --execution_log_json_file") from None
        yield obj


def describe(spawn: dict) -> str:
    outputs = spawn.get("listedOutputs") or [o.get("path") for o in spawn.get("actualOutputs", [])]
    what = spawn.get("progressMessage") or (outputs[0] if outputs else "?")
    return f"{spawn.get('mnemonic', '?')} `{what}`"


def violations(log: list[dict]) -> list[str]:
    out = []
    for spawn in log:
        runner = spawn.get("runner", "")
        if spawn.get("mnemonic") == "TestRunner" or runner in SANDBOXED or runner in NOT_RUN_HERE:
            continue
        out.append(f"{describe(spawn)}: ran by {runner or 'an unnamed runner'!r}, not linux-sandbox; "
                   "remove its no-sandbox/local tag or the --strategy/--spawn_strategy flag that sent it there, "
                   "or fix the sandbox on this machine (Bazel falls back to local when linux-sandbox cannot start)")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("log", type=Path, help="the file --execution_log_json_file wrote")
    args = p.parse_args(argv)
    log = list(spawns(args.log.read_text(), str(args.log)))
    bad = violations(log)
    for line in bad:
        print(f"exec_log_check: {line}")
    runners = Counter("test" if s.get("mnemonic") == "TestRunner" else s.get("runner", "") for s in log)
    tally = ", ".join(f"{n} {r}" for r, n in sorted(runners.items()))
    print(f"exec_log_check: {len(log)} spawns ({tally or 'none'}); {len(bad)} build spawns outside the sandbox")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
