"""Entry point of //tools/patches/private:apply (see patchchain/apply_main.py)."""

import sys

from tools.patches.private.patchchain.apply_main import main

if __name__ == "__main__":
    sys.exit(main())
