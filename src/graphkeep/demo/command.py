"""``python -m graphkeep.demo``'s command line: the transcript on each backend picked, what the
``graphkeep`` command shows of its thread, then the OpenTelemetry summary."""

from __future__ import annotations

import argparse
import sys
import time
import traceback
import uuid
from collections.abc import Sequence
from typing import Any

from graphkeep.cli import show_thread
from graphkeep.demo.backends import (
    BACKEND_LIST,
    BACKEND_NAMES,
    KEY_PREFIX,
    local_aws_credentials,
    pick_backends,
)
from graphkeep.demo.metrics import SYSTEMS, Metrics, metrics_summary, say_metrics
from graphkeep.demo.transcript import Demo, DemoFailure, resume_child, say
from graphkeep.errors import mask_url

#: ``--help``'s description
DESCRIPTION = "``python -m graphkeep.demo``: a support-ticket assistant that survives restarts."


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m graphkeep.demo", description=DESCRIPTION)
    parser.add_argument("--backend", choices=[*BACKEND_NAMES, "all"], default=None)
    parser.add_argument("--resume-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--thread-id", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.resume_child:
        backend = next(b for b in BACKEND_LIST if b.name == (args.backend or "redis"))
        return resume_child(backend, args.thread_id)

    backends, notes, errors = pick_backends(args.backend)
    for note in notes:
        say(f"skipped: {note}")
    for error in errors:
        say(f"error: {error}")
    failed = bool(errors)
    if not backends and not errors:
        say("error: no backend to run the demo on (start the servers: ./dev services up)")
        return 1
    try:
        meter: Metrics | None = Metrics()
    except ImportError:  # opentelemetry-sdk is not installed: no summary
        meter = None
    summaries: list[tuple[str, dict[str, Any]]] = []
    for backend in backends:
        before = meter.snapshot() if meter else {}
        url = backend.url()
        if backend.name == "dynamodb":
            local_aws_credentials(url)  # the child process inherits them
        demo = Demo(backend, url, f"ticket-{uuid.uuid4().hex[:8]}")
        say()
        say(f"=== graphkeep demo on {backend.name}: {mask_url(url)} ===")
        started = time.perf_counter()
        try:
            demo.run()
        except DemoFailure:
            failed = True
        except Exception as exc:  # noqa: BLE001 - report and carry on with the next backend
            say(f"[FAIL] {type(exc).__name__}: {exc}", 2)
            traceback.print_exc()
            failed = True
        elapsed = time.perf_counter() - started
        say()
        say(f"thread id : {demo.thread_id}")
        say(
            f"stored in : {backend.name} at {mask_url(url)}, key prefix {KEY_PREFIX!r}"
            " (kept for inspection)"
        )
        if hint := backend.inspect_hint(url, demo.thread_id):
            say(f"inspect   : {hint}")
        say(f"({backend.name}: {elapsed:.1f} s)")
        say()
        say("What the graphkeep command shows of this thread:")
        sys.stdout.flush()
        code = show_thread(
            url, demo.thread_id, key_prefix=KEY_PREFIX, channels=["messages"], limit=5
        )
        if code != 0:
            say(f"[FAIL] graphkeep history/dump exited with {code}", 2)
            failed = True
        if meter is not None:
            system = SYSTEMS.get(backend.name, "aws.dynamodb")
            summaries.append((backend.name, metrics_summary(before, meter.snapshot(), system)))
    if summaries:
        failed = not say_metrics(summaries) or failed
    say()
    say("demo FAILED" if failed else "demo passed: every fact above was checked")
    return 1 if failed else 0
