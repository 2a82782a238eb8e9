"""The ``graphkeep`` command run in-process, as tests call it: exit code, stdout and stderr."""

from __future__ import annotations

import io
import json
import signal
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Any

from graphkeep.cli import main


def ctrl_c_reaches_it() -> None:
    """A ``preexec_fn`` for a subprocess a test interrupts with SIGINT: Ctrl-C's default
    action, even when this test run was started with SIGINT ignored (a background job of a
    shell without job control: Python then installs no KeyboardInterrupt handler, and the
    child would never see the test's Ctrl-C)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


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
