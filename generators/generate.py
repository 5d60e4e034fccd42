"""Entry point of //generators:generate (see generators/compose_gen/cli.py)."""

import sys

from generators.compose_gen.cli import main

if __name__ == "__main__":
    sys.exit(main())
