"""One measurement in a child process, for savers that need their own virtualenv.

Some rival savers pin dependencies that clash with ours (``langgraph-checkpoint-aws``
wants a newer boto3), so a suite can run them as :class:`InSubprocess`: the child
is another interpreter with this checkout on ``PYTHONPATH``, runs
:func:`bench.workloads.measure` there and prints the result as one JSON
line::

    python -m bench.worker --factory pkg.module:open_saver --workload W50 \\
        --turns 50 --history-runs 5 --suite dynamodb --saver DynamoDBSaver [--extra-turns 50]

``--large BYTES`` runs :func:`bench.workloads.measure_large` instead.

``--factory`` names a function ``(Workload) -> ContextManager[Opened]`` importable
in the child. :func:`ensure_venv` makes such a virtualenv on demand.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import venv
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from bench.probes import Probe
from bench.workloads import (
    WORKLOADS,
    LargeResult,
    Opened,
    Result,
    Workload,
    measure,
    measure_large,
    workload,
)

RESULT_MARK = "GRAPHKEEP-BENCH-RESULT "
ROOT = Path(__file__).resolve().parents[1]  # the checkout: bench/ here, graphkeep in src/


def pythonpath() -> str:
    """A child's ``PYTHONPATH``: this checkout's graphkeep and bench, then the caller's own."""
    entries = (str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH"))
    return os.pathsep.join(p for p in entries if p)


@contextmanager
def in_memory(work: Workload) -> Iterator[Opened]:
    """A factory for checking the subprocess path itself."""
    yield Opened(InMemorySaver(), Probe(counts_requests=False))


#: uv's settings of the machine's pip ones (uv does not read pip's configuration), as ./dev
#: passes them when it installs .venv
UV_SETTINGS = {
    "UV_INDEX_URL": "PIP_INDEX_URL",
    "UV_EXTRA_INDEX_URL": "PIP_EXTRA_INDEX_URL",
    "UV_FIND_LINKS": "PIP_FIND_LINKS",
    "UV_HTTP_TIMEOUT": "PIP_DEFAULT_TIMEOUT",
    "SSL_CERT_FILE": "PIP_CERT",
}


def ensure_venv(path: Path, requirements: Sequence[str]) -> Path:
    """A virtualenv at ``path`` with ``requirements`` installed; return its python.

    Installed by the uv beside this interpreter when there is one (``./dev``'s .venv has it:
    langgraph-checkpoint-aws and its dependencies in a few seconds where pip takes tens),
    else, or should uv fail, by pip. One process at a time makes it (a lock file beside it):
    the suite's lanes may all want it first on a fresh clone."""
    import fcntl  # noqa: PLC0415 - POSIX only, as the bench's venvs are

    python = path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    stamp = path / ".graphkeep-bench-requirements"
    wanted = "\n".join(sorted(requirements))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.exists() and stamp.exists() and stamp.read_text() == wanted:
            return python
        uv = Path(sys.executable).with_name("uv")
        if not python.exists():
            venv.EnvBuilder(with_pip=not uv.exists()).create(path)
        if not (uv.exists() and _uv_install(uv, python, requirements)):
            if subprocess.run(
                [str(python), "-m", "pip", "--version"], capture_output=True
            ).returncode:
                subprocess.run([str(python), "-m", "ensurepip"], check=True, capture_output=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", *requirements], check=True
            )
        stamp.write_text(wanted)
    return python


def _uv_install(uv: Path, python: Path, requirements: Sequence[str]) -> bool:
    env = dict(os.environ)
    for setting, pip_setting in UV_SETTINGS.items():
        if os.environ.get(pip_setting) and not os.environ.get(setting):
            env[setting] = os.environ[pip_setting]
    command = [str(uv), "pip", "install", "--quiet", "--python", str(python), *requirements]
    return subprocess.run(command, env=env).returncode == 0


@dataclass
class InSubprocess:
    """A contender measured by :mod:`bench.worker` under another interpreter."""

    name: str
    python: str
    factory: str
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 1800.0

    def run(self, work: Workload, options: Any, suite: str, extra_turns: int = 0) -> Result:
        args = ["--workload", work.name, "--turns", str(options.turns)]
        args += ["--history-runs", str(options.history_runs), "--suite", suite]
        args += ["--extra-turns", str(extra_turns)]
        return Result.from_json(self._child(*args))

    def run_large(self, size: int, suite: str) -> LargeResult:
        return LargeResult.from_json(self._child("--large", str(size), "--suite", suite))

    def _child(self, *args: str) -> Any:
        command = [
            self.python, "-m", "bench.worker",
            "--factory", self.factory, "--saver", self.name, *args,
        ]  # fmt: skip
        env = {**os.environ, **self.env, "PYTHONPATH": pythonpath()}
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=self.timeout
        )
        for line in reversed(done.stdout.splitlines()):
            if line.startswith(RESULT_MARK):
                return json.loads(line[len(RESULT_MARK) :])
        tail = "\n".join((done.stderr or done.stdout).splitlines()[-20:])
        raise RuntimeError(f"{self.name} worker failed (exit {done.returncode}):\n{tail}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.worker")
    parser.add_argument("--factory", required=True, help="module:function")
    parser.add_argument("--workload", default=WORKLOADS[0].name)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--large", type=int, default=None, help="bytes of the large message")
    parser.add_argument("--history-runs", type=int, default=5)
    parser.add_argument(
        "--extra-turns", type=int, default=0, help="growth turns after the history read"
    )
    parser.add_argument("--suite", required=True)
    parser.add_argument("--saver", required=True)
    args = parser.parse_args(argv)

    module_name, _, function = args.factory.partition(":")
    factory = getattr(importlib.import_module(module_name), function)
    work = workload(args.workload)
    opened_cm: AbstractContextManager[Opened] = factory(work)
    result: Result | LargeResult
    with opened_cm as opened:
        if args.large is not None:
            result = measure_large(opened, suite=args.suite, saver_name=args.saver, size=args.large)
        else:
            result = measure(
                opened,
                work,
                suite=args.suite,
                saver_name=args.saver,
                turns=args.turns,
                history_runs=args.history_runs,
                extra_turns=args.extra_turns,
            )
    print(RESULT_MARK + json.dumps(result.to_json()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
