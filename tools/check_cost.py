"""What ``graphkeep check`` costs: requests and seconds per 1,000 threads, with and without --deep.

    python tools/check_cost.py URL [--threads 1000] [--checkpoints 3]

Writes ``--threads`` threads of ``--checkpoints`` checkpoints each (and a pending write on
each thread's newest checkpoint: ``health_cost.populate``) under a fresh key prefix (Redis)
or into the URL's database / table as given (use a fresh one), runs ``graphkeep check URL
--all --json`` and then with ``--deep``, each twice, prints the faster run of each, then
deletes the threads. Figures in docs/check.md come from this script.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
import uuid
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

from health_cost import populate

import graphkeep
from graphkeep.cli import main as cli


def check(url: str, *extra: str) -> dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli(["check", url, "--all", "--json", "--no-progress", *extra])
    if code != 0:
        raise SystemExit(f"check exited {code}: {err.getvalue()}{out.getvalue()[:2000]}")
    report: dict[str, Any] = json.loads(out.getvalue())
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--checkpoints", type=int, default=3)
    args = parser.parse_args()
    url = args.url
    if url.startswith("redis"):
        url += ("&" if "?" in url else "?") + f"key_prefix=cost{uuid.uuid4().hex[:6]}"
    with graphkeep.connect(url) as saver:
        started = time.perf_counter()
        ids = populate(saver, args.threads, args.checkpoints)
        made = time.perf_counter() - started
        try:
            for extra in ((), ("--deep",)):
                best = min(
                    (check(url, *extra) for _ in range(2)), key=lambda r: r["scan"]["seconds"]
                )
                per = 1000 / best["threads"]
                scan = best["scan"]
                print(
                    f"{url.split('://', 1)[0]}{' --deep' if extra else ''}: {best['threads']}"
                    f" threads ({args.checkpoints} checkpoints each, written in {made:.1f}s):"
                    f" {scan['requests']} requests, {scan['seconds']:.3f}s, at most"
                    f" {scan['thread_requests_max']} per thread; per 1,000 threads"
                    f" {scan['requests'] * per:.0f} requests, {scan['seconds'] * per:.2f}s;"
                    f" findings {len(best['findings'])}"
                )
        finally:
            for thread_id in ids:
                saver.delete_thread(thread_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
