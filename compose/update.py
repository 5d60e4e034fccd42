"""`bazel run //compose:update`: regenerate compose/*.yaml from the tables and release records.

The release records arrive as --release NAME=PATH arguments bound in compose/BUILD.bazel; the
files are written into the workspace ($BUILD_WORKSPACE_DIRECTORY/compose), each atomically.
"""

import sys

from deploy.compose_gen.cli import main

if __name__ == "__main__":
    sys.exit(main())
