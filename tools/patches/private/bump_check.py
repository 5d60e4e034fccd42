"""Entry point of //patches:bump_check (see patchchain/bump_main.py)."""

import sys

from tools.patches.private.patchchain.bump_main import main

if __name__ == "__main__":
    sys.exit(main())
