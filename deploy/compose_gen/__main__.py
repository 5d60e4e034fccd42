"""`bazel run //deploy/compose_gen:generate -- --help` (or `python3 -m deploy.compose_gen`)."""

import sys

from deploy.compose_gen.cli import main

if __name__ == "__main__":
    sys.exit(main())
