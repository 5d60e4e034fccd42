"""Where a compose service uses a Hugging Face pin, read back from what the generator writes.

One reader for the deployability gate (deploy/deployable.py) and the validators' model-revision
rule (deploy/validators/request_path.py), so the two agree on what a use is:

  * the downloader's shell script: `hf download REPO [FILE] --revision 'REV'` and the chat
    template check `echo 'SHA  <hf cache>/models--ORG--NAME/snapshots/REV/FILE' | sha256sum -c -`;
  * an engine's argv: `--model-path REPO ... --revision REV` and `--chat-template
    <hf cache>/models--ORG--NAME/snapshots/REV/FILE`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

DOWNLOAD = re.compile(r"\bhf download (?P<repo>\S+)(?: (?P<file>[^\s-]\S*))? --revision "
                      r"'?(?P<rev>[^'\s]+)'?")
SHA_CHECK = re.compile(r"echo '(?P<sha>\S+)  (?P<path>\S+)' \| sha256sum -c")
SNAPSHOT = re.compile(r"/models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/(?P<rev>[^/]+)/"
                      r"(?P<file>.+)$")


@dataclass(frozen=True)
class Use:
    """One value a Hub pin fixes: `field` (revision or sha256) of REPO [FILE] at `where`."""

    where: str  # dotted path, e.g. services.model-downloader.command[0]
    line: int  # line of a script (1-based); 0 for an argv token
    repository: str
    file: str | None  # None: the whole model (hf_model), else the file (hf_file)
    field: str  # "revision" or "sha256"
    value: str


def _snapshot(path: str) -> tuple[str, str, str] | None:
    match = SNAPSHOT.search(path)
    if not match:
        return None
    return f"{match.group('org')}/{match.group('name')}", match.group("rev"), match.group("file")


def script_uses(where: str, script: str) -> Iterator[Use]:
    """Downloads and sha256 checks in a downloader script (`$$` already undone)."""
    for number, line in enumerate(script.splitlines(), start=1):
        for match in DOWNLOAD.finditer(line):
            yield Use(where, number, match.group("repo"), match.group("file"), "revision",
                      match.group("rev"))
        for match in SHA_CHECK.finditer(line):
            found = _snapshot(match.group("path"))
            if found:
                repo, rev, file = found
                yield Use(where, number, repo, file, "revision", rev)
                yield Use(where, number, repo, file, "sha256", match.group("sha"))


def argv_uses(where: str, argv: list[str]) -> Iterator[Use]:
    """The model revision and the chat template snapshot an engine's argv loads; `where` is the
    argv's dotted path (the token index is appended)."""
    if "--model-path" in argv[:-1] and "--revision" in argv[:-1]:
        index = argv.index("--revision") + 1
        yield Use(f"{where}[{index}]", 0, argv[argv.index("--model-path") + 1], None,
                  "revision", argv[index])
    if "--chat-template" in argv[:-1]:
        index = argv.index("--chat-template") + 1
        found = _snapshot(argv[index])
        if found:
            repo, rev, file = found
            yield Use(f"{where}[{index}]", 0, repo, file, "revision", rev)
