"""Entry point of ``python -m graphkeep.bench``."""

from __future__ import annotations

import sys

from graphkeep.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
