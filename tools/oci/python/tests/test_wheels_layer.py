"""The built wheels layer (//recipes/bases:*_wheels) agrees with its RECORD files.

Every RECORD row names a file that is in the layer at that path (relative to dist-packages;
console scripts as ../../../local/bin/<name>) with the recorded sha256 and size, and every file
of the layer except the compiled .pyc is listed by exactly one RECORD: what importlib.metadata
and `pip uninstall` read is what the image holds.
"""

from __future__ import annotations

import base64
import csv
import functools
import hashlib
import io
import posixpath
import tarfile
from pathlib import Path

import pytest

SITE = "usr/lib/python3/dist-packages"
LAYERS = sorted(Path("recipes/bases").glob("*_wheels.tar"))


def _hash(f) -> str:
    digest = hashlib.sha256()
    while chunk := f.read(1 << 20):
        digest.update(chunk)
    return "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def test_the_layers_are_given() -> None:
    assert LAYERS, "no recipes/bases/*_wheels.tar in the test's runfiles; add the layers to its data"


@pytest.mark.parametrize("layer", LAYERS, ids=[p.name for p in LAYERS])
def test_every_file_is_where_its_record_says(layer: Path) -> None:
    problems: list[str] = []
    with tarfile.open(layer) as tar:
        members = {m.name: m for m in tar if m.isfile()}
        owner: dict[str, str] = {}
        # Installed distributions only: vendored copies (setuptools/_vendor/*.dist-info) are files.
        records = [n for n in members if posixpath.dirname(posixpath.dirname(n)) == SITE and n.endswith(".dist-info/RECORD")]
        for name in records:
            text = tar.extractfile(members[name]).read().decode()
            for path, hash_, size in csv.reader(io.StringIO(text)):
                target = posixpath.normpath(posixpath.join(SITE, path))
                if target in owner:
                    problems.append(f"{target} is listed by {owner[target]} and {name}")
                owner[target] = name
                member = members.get(target)
                if member is None:
                    problems.append(f"{name} lists {path}, but the layer has no /{target}")
                elif hash_ and (member.size != int(size) or _hash(tar.extractfile(member)) != hash_):
                    problems.append(f"/{target} does not match its row in {name}")
        unlisted = [n for n in members if n not in owner and "/__pycache__/" not in n]
    assert not unlisted, f"{len(unlisted)} files of {layer.name} are in no RECORD, e.g. {unlisted[:5]}"
    assert not problems, f"{len(problems)} RECORD problems in {layer.name}, e.g. {problems[:5]}"


SHARED = [p for p in LAYERS if "_shared_" in p.name]
OWN = [p for p in LAYERS if p not in SHARED]


@functools.cache  # the shared layer is read once, not once per own layer
def _files(layer: Path) -> frozenset[str]:
    with tarfile.open(layer) as tar:
        return frozenset(m.name for m in tar if not m.isdir())


@pytest.mark.parametrize("own", OWN, ids=[p.name for p in OWN])
def test_no_file_of_the_shared_layer_is_in_a_bases_own_layer(own: Path) -> None:
    """A base stacks its own wheels on the shared layer: a path in both would be hidden by the
    upper layer, and the shared layer's RECORD would then describe bytes the image does not hold."""
    assert SHARED, "no recipes/bases/*_shared_wheels.tar in the test's runfiles; add it to the data"
    both = sorted(frozenset.intersection(*(_files(p) for p in SHARED + [own])))
    assert not both, f"{len(both)} paths are in {SHARED[0].name} and {own.name}, e.g. {both[:5]}"
