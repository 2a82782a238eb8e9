"""``python -m graphkeep.cli``: the same as the ``graphkeep`` console script."""

from __future__ import annotations

from graphkeep.cli import main

raise SystemExit(main())
