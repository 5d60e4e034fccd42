"""Proves the registered Python toolchain is Debian's CPython 3.11 at /usr/bin/python3."""

import platform
import sys
import unittest


class ToolchainTest(unittest.TestCase):
    def test_interpreter_is_debian_cpython_311(self) -> None:
        self.assertEqual(platform.python_implementation(), "CPython")
        self.assertEqual(sys.version_info[:2], (3, 11), sys.version)
        self.assertIn(sys.executable, ("/usr/bin/python3", "/usr/bin/python3.11"))


if __name__ == "__main__":
    unittest.main()
