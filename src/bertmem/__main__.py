"""`python -m bertmem …` runs the command line (chapter 5)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
