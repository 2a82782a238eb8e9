"""A graph run in its own process (the parent test restarts, kills or resumes it).

    python -m tests.scenarios.worker JOB URL PREFIX THREAD RUNS [options]

Jobs:
- ``resume-interview``: resume :func:`~tests.scenarios.graphs.interview_graph` with
  ``Command(resume=--answer)``.
- ``crash-run``: start the fast || slow fan-out; the slow branch touches ``--started`` and
  hangs while ``--hang-flag`` exists (the parent SIGKILLs us then).
- ``crash-resume``: continue that thread with ``invoke(None)``.

The saver comes from ``graphkeep.connect`` (``--mode sync``) or ``graphkeep.aconnect``
(``--mode async``). The final state's values are printed as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import StateGraph
from langgraph.types import Command

import graphkeep
from tests.scenarios.graphs import RunLog, fan_out_graph, hang_if, interview_graph

CRASH_BRANCHES = ("fast", "slow")
REPO = Path(__file__).resolve().parents[2]


def job(args: argparse.Namespace) -> tuple[StateGraph[Any], Any]:
    """The graph and the input of a job."""
    runs = RunLog(args.runs)
    if args.job == "resume-interview":
        return interview_graph(runs), Command(resume=args.answer)
    hook = hang_if(Path(args.hang_flag), Path(args.started))
    graph = fan_out_graph(runs, CRASH_BRANCHES, hook)
    return graph, ({"log": ["in"]} if args.job == "crash-run" else None)


def run_sync(args: argparse.Namespace, config: RunnableConfig) -> dict[str, Any]:
    builder, payload = job(args)
    with graphkeep.connect(args.url, key_prefix=args.prefix) as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke(payload, config)
        return dict(graph.get_state(config).values)


async def run_async(args: argparse.Namespace, config: RunnableConfig) -> dict[str, Any]:
    builder, payload = job(args)
    async with graphkeep.aconnect(args.url, key_prefix=args.prefix) as saver:
        graph = builder.compile(checkpointer=saver)
        await graph.ainvoke(payload, config)
        return dict((await graph.aget_state(config)).values)


def command(
    job_name: str, url: str, prefix: str, thread: str, runs: Path, *options: str
) -> list[str]:
    """The command line that runs ``job_name`` in a new process (cwd: the repository)."""
    module = "tests.scenarios.worker"
    return [sys.executable, "-m", module, job_name, url, prefix, thread, str(runs), *options]


def run(job_name: str, url: str, prefix: str, thread: str, runs: Path, *options: str) -> Any:
    """Run a job to completion in a new process; its final values (JSON)."""
    done = subprocess.run(
        command(job_name, url, prefix, thread, runs, *options),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"worker {job_name} failed ({done.returncode}):\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.scenarios.worker")
    parser.add_argument("job", choices=("resume-interview", "crash-run", "crash-resume"))
    parser.add_argument("url")
    parser.add_argument("prefix")
    parser.add_argument("thread")
    parser.add_argument("runs", help="RunLog file")
    parser.add_argument("--mode", choices=("sync", "async"), default="sync")
    parser.add_argument("--answer", default="")
    parser.add_argument("--hang-flag", default="/nonexistent")
    parser.add_argument("--started", default="/dev/null")
    args = parser.parse_args(argv)
    config: RunnableConfig = {"configurable": {"thread_id": args.thread}}
    if args.mode == "sync":
        values = run_sync(args, config)
    else:
        values = asyncio.run(run_async(args, config))
    json.dump(values, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
