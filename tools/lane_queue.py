"""The main lane's tests that ``./dev test``'s lanes share out (docs/development.md).

The main lane (every test but the MongoDB ones) is the longest of the three: the MongoDB lane
and the third taker end first and would then only take conformance rows, leaving a core idle
while the main lane runs on alone. So some of its files are a queue instead: CHUNKS, a few
files each, the slowest first. The main lane leaves them out (``ignore``); every lane, once its
own tests end (the third taker: once its conformance rows end), claims the next chunk no lane
has claimed yet and runs it as one pytest session with the main lane's selection, until none
is left (``./dev`` has each lane claim the Valkey rules run of tools/rules_lanes.py first, the
same way: one lane runs it). None of these files uses the Redis Stack server (its
``redis_stack`` tests, and the tests that flush its database 0, stay in the main lane, in
order), so a chunk may run beside any other lane; each test's data is its own, as between the
lanes before.

    python tools/lane_queue.py ignore        the main lane's --ignore arguments, one a line
    python tools/lane_queue.py take DIR      run the chunks no one has claimed (exit 0)
    python tools/lane_queue.py report DIR    each chunk's log; exit 1 unless every chunk ran
                                             and passed

Run them on the servers of ``.services/env`` (``./dev`` sources it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: the shared files, in chunks of about one to four minutes each in CI, the slowest first (a
#: chunk claimed last decides when the lanes end: the short ones come last). Seconds in the
#: comments: the last two full runs' (F and G of issue 48, a chunk's pytest session in a lane)
CHUNKS = (
    ("tests/scenarios/test_live.py", "tests/scenarios/test_bad_input.py"),  # 247, 202
    ("tests/test_effects.py", "tests/scenarios/test_delta.py"),  # 188, 147
    ("tests/test_concurrency_pools.py",),  # 182, 146
    ("tests/test_agui_exclusive.py", "tests/test_exclusive.py"),  # 156, 147
    ("tests/test_fallback_lease.py",),  # 151, 147: mostly sleeps through leases
    ("tests/scenarios/test_faults.py", "tests/scenarios/test_concurrency.py"),  # 94, 78
    # two chunks more since FerretDB's _id lookups use its index (the MongoDB lane ends minutes
    # sooner, the main lane is the longest): files of the main lane's slowest tests in run I
    # (test_hot's two processes 18 s, test_materialize 17 s, test_store_dynamodb's server
    # filter 16 s, test_store_fallback's readers and writers 12 s), not timed as chunks yet
    ("tests/test_hot.py", "tests/test_materialize.py"),
    ("tests/test_store_dynamodb.py", "tests/test_store_fallback.py"),
    ("tests/test_store_encryption.py",),  # 79, 76: the encrypted store, its contract
    ("tests/test_rekey.py",),  # 68, 62
    ("tests/scenarios/test_graphs.py", "tests/scenarios/test_lists.py"),  # 78, 47
    ("tests/test_check.py", "tests/test_check_forks.py"),  # 52, 45
    ("tests/test_events_redis.py",),  # 34, 35
)


def chunk_name(index: int) -> str:
    return f"chunk-{index + 1}"


def ignore() -> str:
    return "\n".join(f"--ignore={path}" for chunk in CHUNKS for path in chunk)


def main_lane_selection() -> list[str]:
    """The main lane's ``-m`` and ``-k`` (./dev test's), which each chunk runs with."""
    sys.path.insert(0, str(ROOT / "tools"))
    from rules_lanes import main_lane_k  # noqa: PLC0415 - a sibling script, run as a script

    return ["-m", "not mongodb or redis_stack", "-k", main_lane_k()]


def claim(queue: Path, name: str) -> bool:
    try:
        (queue / f"{name}.claimed").mkdir()
    except FileExistsError:
        return False
    return True


def take(queue: Path) -> int:
    queue.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["--graphkeep-servers=env", *main_lane_selection(), "--durations=10"]
    for index, files in enumerate(CHUNKS):
        name = chunk_name(index)
        if not claim(queue, name):
            continue
        began = time.monotonic()
        with open(queue / f"{name}.log", "w") as log:
            log.write(f"{name}: {' '.join(files)}\n")
            log.flush()
            code = subprocess.call([*command, *files], cwd=ROOT, stdout=log, stderr=log)
            log.write(f"{name}: exit {code} in {time.monotonic() - began:.0f}s\n")
        (queue / f"{name}.rc").write_text(f"{code}\n")
    return 0


def report(queue: Path) -> int:
    failed = []
    for index, _ in enumerate(CHUNKS):
        name = chunk_name(index)
        log, rc = queue / f"{name}.log", queue / f"{name}.rc"
        print(log.read_text() if log.exists() else f"{name}: not run\n", flush=True)
        if not rc.exists() or rc.read_text().strip() != "0":
            failed.append(name)
    if failed:
        print(f"shared chunks failed or not run: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if argv == ["ignore"]:
        print(ignore())
        return 0
    if len(argv) == 2 and argv[0] in ("take", "report"):
        queue = Path(argv[1])
        return take(queue) if argv[0] == "take" else report(queue)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main(sys.argv[1:]))
