"""Proves the registered Python toolchain is Debian's CPython 3.11 at /usr/bin/python3, at the
Debian version the image ships (recipes/bases/debian.lock): host tools and tests run the same
interpreter as the image. `tools/bazel` installs the locked version on the host."""

import platform
import subprocess
import sys
import unittest
from pathlib import Path

LOCK = Path("recipes/bases/debian.lock")
# The interpreter, its C runtime and its stdlib: the packages the host and the image share.
PACKAGES = ("python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib")


def locked_versions(text: str) -> dict[str, str]:
    """name -> version of every `name version sha256` line of the Debian lock."""
    rows = (line.split() for line in text.splitlines() if line.strip() and not line.startswith("#"))
    return {row[0]: row[1] for row in rows if len(row) >= 2}


def host_version(package: str) -> str:
    done = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "(not installed)"


class ToolchainTest(unittest.TestCase):
    def test_interpreter_is_debian_cpython_311(self) -> None:
        self.assertEqual(platform.python_implementation(), "CPython")
        self.assertEqual(sys.version_info[:2], (3, 11), sys.version)
        self.assertIn(sys.executable, ("/usr/bin/python3", "/usr/bin/python3.11"))

    def test_host_interpreter_is_the_image_version(self) -> None:
        locked = locked_versions(LOCK.read_text())
        for package in PACKAGES:
            with self.subTest(package=package):
                self.assertIn(package, locked, f"{LOCK} does not lock {package}")
                self.assertEqual(
                    host_version(package), locked[package],
                    f"the host's {package} is not the version the image ships ({LOCK}); install it with "
                    f"`apt-get install {package}={locked[package]}` (tools/bazel does this) or relock with "
                    "`./tools/bazel run //recipes/bases:lock`",
                )


if __name__ == "__main__":
    unittest.main()
