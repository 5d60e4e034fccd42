"""Entry point of //patches:bump_check (see patchchain/bump_main.py)."""

import sys

from patchchain.bump_main import main

if __name__ == "__main__":
    sys.exit(main())
