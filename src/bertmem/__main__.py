"""`python -m bertmem …` runs the command line (chapter 5)."""

from __future__ import annotations

import sys

from bertmem.cli import main

if __name__ == "__main__":
    sys.exit(main())
