"""The ``graphkeep`` command run in-process, as tests call it: exit code, stdout and stderr."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Any

from graphkeep.cli import main


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def gk(*argv: str) -> Result:
    """``graphkeep ARGV...`` in this process (what it prints is captured, not shown)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return Result(code, out.getvalue(), err.getvalue())
