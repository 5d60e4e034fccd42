"""Fails when a build action under the given patterns runs outside the sandbox or with network.

Reads `bazel aquery --include_aspects --output=jsonproto` (or runs it; aspects because the
layer SBOM scans are aspect actions): a build action (any mnemonic but TestRunner) may carry
none of `no-sandbox`, `local`, `requires-network`; a test action that does must also carry a
`requires-<what>` tag naming why (e.g. requires-podman). This is what the graph declares; what
ran is checked from the execution log by tools/ci/exec_log_check.py. Run from the workspace:

    python3 tools/oci/sandbox_check.py                        # //..., runs ./tools/bazel aquery --config=ci
    python3 tools/oci/sandbox_check.py --aquery-json FILE     # checks a saved aquery
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

UNSANDBOXED = ("no-sandbox", "local", "requires-network")


def violations(aquery: dict) -> list[str]:
    """One line per action that breaks the rule above, naming the target and the keys."""
    targets = {t["id"]: t["label"] for t in aquery.get("targets", [])}
    out = []
    for action in aquery.get("actions", []):
        keys = {e["key"] for e in action.get("executionInfo", [])}
        bad = sorted(keys & set(UNSANDBOXED))
        if not bad:
            continue
        where = f"{targets.get(action.get('targetId'), '?')} ({action.get('mnemonic')})"
        if action.get("mnemonic") != "TestRunner":
            out.append(f"{where}: build action with {', '.join(bad)}; declare its inputs and let it run sandboxed")
        elif not any(k.startswith("requires-") and k != "requires-network" for k in keys):
            out.append(f"{where}: test with {', '.join(bad)} but no requires-<reason> tag saying why")
    return out


def aquery_argv(bazel: str, patterns: list[str]) -> list[str]:
    query = "mnemonic('.*', {})".format(" + ".join(patterns))
    return [bazel, "aquery", "--config=ci", "--include_aspects", query, "--output=jsonproto"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("patterns", nargs="*", default=["//..."])
    p.add_argument("--aquery-json", type=Path, help="a saved `aquery --output=jsonproto` instead of running it")
    p.add_argument("--bazel", default="./tools/bazel")
    args = p.parse_args(argv)
    if args.aquery_json:
        text = args.aquery_json.read_text()
    else:
        proc = subprocess.run(aquery_argv(args.bazel, args.patterns), stdout=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            print(f"sandbox_check.py: error: bazel aquery failed (rc {proc.returncode})", file=sys.stderr)
            return 2
        text = proc.stdout
    aquery = json.loads(text)
    bad = violations(aquery)
    for line in bad:
        print(line)
    n = len(aquery.get("actions", []))
    print(f"sandbox_check: {n} actions, {len(bad)} outside the sandbox or with network", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
