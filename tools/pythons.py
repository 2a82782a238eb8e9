"""Every Python graphkeep claims, tested: for each CPython version pyproject.toml's classifiers
name besides the one running this (the main suite's), a side venv that imports every module of
the package, runs the conformance matrix on Redis and MongoDB and the smoke run of every product
(tools/pythons_smoke.py) on the servers of ``.services/env``.

    python tools/pythons.py [--python 3.10 ...]       (./dev test runs it with the venv's Python)

An interpreter is found under pyenv's versions, then as ``pythonX.Y`` on PATH; a missing one is
installed with ``pyenv install`` when pyenv is there, else that version fails: never skipped.
Each venv (``.services/py3.10/venv``, ...) is made by uv (pip when there is no uv) with the
``pythons`` extra and ``constraints.txt``, again only when either file changed. One line per
version says what passed; the exit code is non-zero unless every version passed everything.
Stdlib only: any supported Python runs it.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ROOT / ".services"
LOGS = SERVICES / "logs"
EXTRA = "pythons"
#: the conformance set-ups run on each version: one Redis and the cheapest other backend
#: (measured on 3.12, each on a server of its own: mongodb's rows on FerretDB 138 s and 55 CPU
#: seconds, client and server; dynamodb's on moto 359 s and 129 CPU seconds)
SETUPS = ("redis", "mongodb")
#: uv does not read pip's configuration: the machine's pip settings passed on (as ./dev does)
PIP_TO_UV = {
    "PIP_INDEX_URL": "UV_INDEX_URL",
    "PIP_EXTRA_INDEX_URL": "UV_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS": "UV_FIND_LINKS",
    "PIP_DEFAULT_TIMEOUT": "UV_HTTP_TIMEOUT",
}
#: imports every module of the package (``__main__`` modules run a CLI: left out); prints the count
IMPORT_ALL = """
import importlib, pkgutil, sys, traceback
import graphkeep
names = ["graphkeep"] + sorted(
    m.name for m in pkgutil.walk_packages(graphkeep.__path__, "graphkeep.")
    if not m.name.endswith(".__main__")
)
failed = 0
for name in names:
    try:
        importlib.import_module(name)
    except Exception:
        failed += 1
        print(f"import {name} failed:", file=sys.stderr)
        traceback.print_exc()
print(f"{len(names) - failed}/{len(names)} modules")
sys.exit(1 if failed else 0)
"""


class Failed(Exception):
    """A step that did not pass: its message is the version's report line."""


def claimed_versions(pyproject: str) -> list[str]:
    """The ``X.Y`` of every ``Programming Language :: Python :: X.Y`` classifier, in order."""
    found = re.findall(r'"Programming Language :: Python :: (3\.\d+)"', pyproject)
    return sorted(set(found), key=lambda v: tuple(map(int, v.split("."))))


def claim_problems(versions: list[str], pyproject: str, workflow: str) -> list[str]:
    """Where pyproject.toml's and the CI workflow's other statements of the range differ from
    the classifiers (``versions``)."""
    lowest = versions[0]
    short = lowest.replace(".", "")
    problems = []
    if f'requires-python = ">={lowest}"' not in pyproject:
        problems.append(f'requires-python is not ">={lowest}"')
    if f'target-version = "py{short}"' not in pyproject:
        problems.append(f'[tool.ruff] target-version is not "py{short}"')
    if f'python_version = "{lowest}"' not in pyproject:
        problems.append(f'[tool.mypy] python_version is not "{lowest}"')
    # the workflow's jobs between them (the suite per backend, the pythons job) run every one
    matrices = re.findall(r"^\s*python: \[(.*)\]", workflow, re.MULTILINE)
    listed = sorted(
        {v for matrix in matrices for v in re.findall(r'"(3\.\d+)"', matrix)},
        key=lambda v: tuple(map(int, v.split("."))),
    )
    if listed != versions:
        problems.append(f".github/workflows/ci.yml's python matrices name {listed}")
    return problems


# -- interpreters ---------------------------------------------------------------------------


def _pyenv() -> str | None:
    return shutil.which("pyenv") or next(
        (str(p) for p in [Path.home() / ".pyenv/bin/pyenv"] if p.is_file()), None
    )


def _pyenv_root() -> Path:
    root = os.environ.get("PYENV_ROOT")
    return Path(root) if root else Path.home() / ".pyenv"


def _describe(python: str) -> str | None:
    """``CPython X.Y.Z`` of ``python``, or None when it does not run."""
    code = "import platform; print(platform.python_implementation(), platform.python_version())"
    try:
        done = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def find_interpreter(version: str) -> tuple[str, str] | None:
    """(path, "CPython X.Y.Z") of a CPython ``version``: pyenv's newest patch release, else
    ``pythonX.Y`` on PATH."""
    pattern = re.compile(rf"^{re.escape(version)}\.(\d+)$")
    releases = sorted(
        (int(m.group(1)), d)
        for d in (_pyenv_root() / "versions").glob(f"{version}.*")
        if (m := pattern.match(d.name))
    )
    candidates = [str(d / "bin" / f"python{version}") for _, d in reversed(releases)]
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(on_path)
    for python in candidates:
        described = _describe(python)
        if described and described.startswith(f"CPython {version}."):
            return python, described
    return None


def install_interpreter(version: str, log: Path) -> None:
    pyenv = _pyenv()
    if pyenv is None:
        raise Failed(
            f"no CPython {version} (not under {_pyenv_root() / 'versions'}, no python{version}"
            f" on PATH) and no pyenv to install it: install CPython {version} and run again"
        )
    with log.open("w") as out:
        done = subprocess.run(
            [pyenv, "install", "--skip-existing", version],
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if done.returncode != 0:
        raise Failed(
            f"no CPython {version}, and `pyenv install {version}` failed (exit"
            f" {done.returncode}; no network?): {_tail(log)} (log: {_shown(log)}); install"
            f" CPython {version} and run again"
        )


# -- side venvs -----------------------------------------------------------------------------


def _uv() -> str | None:
    here = Path(sys.executable).parent / "uv"
    for uv in (here, ROOT / ".venv/bin/uv"):
        if uv.is_file() and os.access(uv, os.X_OK):
            return str(uv)
    return shutil.which("uv")


def _uv_environment() -> dict[str, str]:
    env = dict(os.environ)
    for pip, uv in PIP_TO_UV.items():
        if os.environ.get(pip):
            env[uv] = os.environ[pip]
    if os.environ.get("PIP_CERT") and not os.environ.get("SSL_CERT_FILE"):
        env["SSL_CERT_FILE"] = os.environ["PIP_CERT"]
    return env


def ensure_venv(version: str, interpreter: str, described: str) -> Path:
    """The side venv's Python, (re)installed when pyproject.toml, constraints.txt or the
    interpreter changed since the last install (a stamp beside it, as ./dev's)."""
    home = SERVICES / f"py{version}"
    venv = home / "venv"
    python = venv / "bin" / "python"
    stamp = venv / ".graphkeep-stamp"
    digest = hashlib.sha256(f"{interpreter} {described}\n".encode())
    for name in ("pyproject.toml", "constraints.txt"):
        digest.update((ROOT / name).read_bytes())
    want = digest.hexdigest()
    home.mkdir(parents=True, exist_ok=True)
    with (home / "install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run installing the same venv: wait for it
        if python.exists() and stamp.exists() and stamp.read_text().strip() == want:
            return python
        log = LOGS / f"pythons-{version}-install.log"
        if venv.exists():
            shutil.rmtree(venv)
        uv = _uv()
        requirement = f"{ROOT}[{EXTRA}]"
        if uv:
            steps = [
                [uv, "venv", "-q", "--python", interpreter, str(venv)],
                [uv, "pip", "install", "--python", str(python), "-c", "constraints.txt"]
                + ["-e", requirement],
            ]
        else:
            steps = [
                [interpreter, "-m", "venv", str(venv)],
                [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
                + ["-c", "constraints.txt", "-e", requirement],
            ]
        log.write_text("")
        for step in steps:
            if _start(step, log, _uv_environment(), append=True).wait() != 0:
                raise Failed(f"install failed: {_tail(log)} (log: {_shown(log)})")
        stamp.write_text(want + "\n")
    return python


# -- checks ---------------------------------------------------------------------------------


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _tail(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    lines = [line for line in lines if line]
    return lines[-1][:300] if lines else "no output"


def _check_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.pop("VIRTUAL_ENV", None)
    return env


def _start(
    command: list[str], log: Path, env: dict[str, str], *, append: bool = False
) -> subprocess.Popen[bytes]:
    """``command`` started in ROOT, its output and errors written to ``log``."""
    with log.open("a" if append else "w") as out:
        return subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def run_check(name: str, version: str, command: list[str]) -> str:
    """Run one check in ROOT; its last output line on success, else :class:`Failed`."""
    log = LOGS / f"pythons-{version}-{name}.log"
    if _start(command, log, _check_environment()).wait() != 0:
        raise Failed(f"{name} failed: {_tail(log)} (log: {_shown(log)})")
    return _tail(log)


def run_conformance(version: str, python: Path, setups: list[str]) -> None:
    """The conformance matrix of each of ``setups``, all at once, one process per set-up: its
    cases mostly wait (TTLs, leases, polls), and each server still sees one case at a time."""
    runs = []
    for name in setups:
        log = LOGS / f"pythons-{version}-conformance-{name}.log"
        command = [str(python), "-m", "conformance", "--backend", name]
        runs.append((name, log, _start(command, log, _check_environment())))
    failed = [
        f"{name}: {_tail(log)} (log: {_shown(log)})"
        for name, log, run in runs
        if run.wait() != 0  # every process waited for, failed or not
    ]
    if failed:
        raise Failed(f"conformance failed: {'; '.join(failed)}")


def check_version(version: str, setups: list[str]) -> str:
    """Every check on ``version``; the report line (raises :class:`Failed` with it)."""
    passed: list[str] = []
    try:
        found = find_interpreter(version)
        if found is None:
            install_interpreter(version, LOGS / f"pythons-{version}-pyenv.log")
            found = find_interpreter(version)
            if found is None:
                raise Failed(f"no CPython {version} even after `pyenv install {version}`")
        interpreter, described = found
        started = time.monotonic()
        python = ensure_venv(version, interpreter, described)
        passed.append(f"{described} venv ({time.monotonic() - started:.0f} s)")
        started = time.monotonic()
        count = run_check("imports", version, [str(python), "-c", IMPORT_ALL])
        passed.append(f"imports {count} ({time.monotonic() - started:.0f} s)")
        started = time.monotonic()
        run_conformance(version, python, setups)
        passed.append(f"conformance {'+'.join(setups)} ({time.monotonic() - started:.0f} s)")
        started = time.monotonic()
        summary = run_check(
            "smoke",
            version,
            [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
            + ["--graphkeep-servers=env", "tools/pythons_smoke.py"],
        )
        passed.append(f"smoke {summary.strip('= ')} ({time.monotonic() - started:.0f} s)")
    except Failed as failure:
        done = f"; passed: {', '.join(passed)}" if passed else ""
        raise Failed(f"FAILED: {failure}{done}") from None
    return "ok: " + ", ".join(passed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/pythons.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--python",
        action="append",
        metavar="X.Y",
        help="a version to check (repeatable; default: every claimed one but this Python's)",
    )
    parser.add_argument(
        "--backend",
        action="append",
        metavar="NAME",
        help=f"a conformance set-up to run (repeatable; default: {', '.join(SETUPS)})",
    )
    args = parser.parse_args(argv)
    pyproject = (ROOT / "pyproject.toml").read_text()
    versions = claimed_versions(pyproject)
    main_version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    LOGS.mkdir(parents=True, exist_ok=True)
    failed = False
    if not versions:
        print("pythons: FAILED: pyproject.toml has no 'Programming Language :: Python :: 3.X'")
        return 1
    problems = claim_problems(versions, pyproject, (ROOT / ".github/workflows/ci.yml").read_text())
    if problems:
        failed = True
        print(f"pythons: claim {versions[0]}-{versions[-1]}: FAILED: {'; '.join(problems)}")
    selected = args.python or [v for v in versions if v != main_version]
    print(
        f"pythons: claimed {', '.join(versions)}; {main_version} is the main suite's (this"
        f" Python); checking {', '.join(selected)}",
        flush=True,
    )
    for version in selected:
        started = time.monotonic()
        try:
            line = check_version(version, args.backend or list(SETUPS))
        except Failed as failure:
            failed = True
            line = str(failure)
        print(f"pythons: {version}: {line}; {time.monotonic() - started:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
