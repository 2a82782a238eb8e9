"""``python -m graphkeep.demo``: runs the demo's command line."""

from __future__ import annotations

import sys

from graphkeep.demo.command import main

if __name__ == "__main__":
    sys.exit(main())
