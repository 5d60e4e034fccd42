"""Exit 0 iff the arguments after `--` equal the JSON list in --expected and every argument that
names a runfile exists (the launcher quoting test)."""

import json
import os
import sys


def main(argv: list[str]) -> int:
    if argv[:1] != ["--expected"] or argv[2:3] != ["--"]:
        print(f"usage: check_args.py --expected FILE -- WORDS..., got {argv!r}")
        return 2
    with open(argv[1], encoding="utf-8") as f:
        expected = json.load(f)
    got = argv[3:]
    if got != expected:
        print(f"FAIL: the launcher passed {got!r}, expected {expected!r}")
        return 1
    files = [w for w in got if "/" in w]
    missing = [w for w in files if not os.path.exists(w)]
    if missing:
        print(f"FAIL: runfiles not found: {missing!r}")
        return 1
    print(f"PASS: {len(got)} words unchanged, {len(files)} runfiles found")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
