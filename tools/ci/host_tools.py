"""The host programs the integration tests run, with their versions, as one text file.

`@host_tools//:versions.txt` (tools/ci/host_tools.bzl) is this script's output; the tests that
start containers, nginx, a registry, skopeo or a nested Bazel carry it as data, so upgrading one
of these programs (or booting another kernel) changes their action keys and they rerun instead
of being served from a cache. Each program is found in the directories of Bazel's strict action
PATH and the sbin directories; a missing one is written as `absent` (the test that needs it
fails on its own). Debian's package version comes first because it moves on security updates
that leave `--version` unchanged.

    python3 tools/ci/host_tools.py      # prints the file
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import dataclass

SEARCH = ("/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin")


@dataclass(frozen=True)
class Tool:
    name: str  # the executable
    package: str  # the Debian package that ships it
    version_args: tuple[str, ...] = ("--version",)


TOOLS = (
    Tool("podman", "podman"),
    Tool("runc", "runc"),
    Tool("conmon", "conmon"),
    Tool("crun", "crun"),
    Tool("bwrap", "bubblewrap"),
    Tool("skopeo", "skopeo"),
    Tool("nginx", "nginx", ("-v",)),
    Tool("docker-registry", "docker-registry"),
    Tool("oci-image-tool", "oci-image-tool"),
    Tool("bazel-4", "bazel-bootstrap"),
)


def find(name: str) -> str | None:
    for d in SEARCH:
        path = os.path.join(d, name)
        if os.access(path, os.X_OK):
            return path
    return None


def packages(names: list[str]) -> dict[str, str]:
    """Installed Debian package versions; {} on a host without dpkg."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${db:Status-Abbrev}\t${Version}\n", *names],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    except FileNotFoundError:
        return {}
    got = {}
    for line in out.splitlines():
        name, status, version = line.split("\t")
        if status.startswith("ii"):
            got[name] = version
    return got


def version_line(path: str, args: tuple[str, ...]) -> str:
    proc = subprocess.run([path, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}, timeout=60)
    first = proc.stdout.strip().splitlines()[:1]
    return first[0] if first else f"(exit {proc.returncode}, no output)"


def render() -> str:
    debs = packages([t.package for t in TOOLS])
    lines = [f"kernel {platform.release()}"]
    for tool in TOOLS:
        path = find(tool.name)
        if path is None:
            lines.append(f"{tool.name} absent")
            continue
        lines.append(f"{tool.name} {path} deb={debs.get(tool.package, 'none')} {version_line(path, tool.version_args)}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
