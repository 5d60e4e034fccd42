"""Entry point of //patches:rehash (see patchchain/rehash_main.py)."""

import sys

from tools.patches.private.patchchain.rehash_main import main

if __name__ == "__main__":
    sys.exit(main())
