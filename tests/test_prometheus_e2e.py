"""End to end with the real parts: Debian's Prometheus (``./dev services up prometheus``)
scrapes a process running graphs on graphkeep through the OpenTelemetry Prometheus exporter,
and PromQL over its HTTP API answers the checkpoint write P99 — the same the process's own
exposition gives — and the one resume failure the test caused, on every backend."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.scenarios.servers import free_port

ROOT = Path(__file__).resolve().parent.parent
READY = "graphkeep-e2e: ready"
OPERATION = "checkpoint.put"


def worker(backend: str, url: str, port: int) -> None:
    """The scraped process: graph turns on ``url``, then one corrupted read; serves
    ``/metrics`` on ``port`` until it is stopped."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import start_http_server

    import graphkeep
    from tests.test_telemetry import MARKER, corrupt, two_nodes

    start_http_server(port, addr="127.0.0.1")
    provider = MeterProvider(metric_readers=[PrometheusMetricReader()])
    options: dict[str, Any] = {"telemetry": {"meter_provider": provider}}
    if backend == "dynamodb":
        options["compress"] = False  # the marker must stay findable on the server
    with graphkeep.connect(url, **options) as saver:
        graph = two_nodes().compile(checkpointer=saver)
        for i in range(20):
            graph.invoke({"log": [f"turn {i}"]}, {"configurable": {"thread_id": f"t{i}"}})
        damaged = {"configurable": {"thread_id": "damaged"}}
        graph.invoke({"log": [MARKER]}, damaged)
        assert corrupt(backend, url, MARKER.encode()) >= 1
        try:
            saver.get_tuple(damaged)
        except Exception:  # noqa: BLE001 - the failure is what the test counts
            pass
        else:
            raise AssertionError("a corrupted checkpoint was read back")
    print(READY, flush=True)
    while True:
        time.sleep(1)


def query(base: str, promql: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=10) as reply:
        body = json.loads(reply.read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def exposition_p99(port: int, operation: str) -> float:
    """The P99 Prometheus' histogram_quantile gives, computed from the process's own
    ``/metrics`` (cumulative buckets, linear interpolation inside the bucket)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("db_client_operation_duration_seconds_bucket{") and (
            f'db_operation_name="{operation}"' in line
        ):
            labels, value = line.rsplit(" ", 1)
            le = labels.split('le="', 1)[1].split('"', 1)[0]
            bound = math.inf if le == "+Inf" else float(le)
            buckets[bound] = buckets.get(bound, 0.0) + float(value)
    bounds = sorted(buckets)
    total = buckets[math.inf]
    rank = 0.99 * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        if buckets[bound] >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / (buckets[bound] - below)
        lower, below = bound, buckets[bound]
    raise AssertionError(f"no bucket holds rank {rank}: {buckets}")


def test_prometheus_scrapes_the_p99_and_the_resume_failure_of_a_graph_process(
    graphkeep_backend: str, graphkeep_url: str
) -> None:
    base = os.environ.get("GRAPHKEEP_PROMETHEUS_URL")
    targets = os.environ.get("GRAPHKEEP_PROMETHEUS_TARGETS")
    if not base or not targets:
        pytest.fail("Prometheus is not running: ./dev services up prometheus", pytrace=False)
    port = free_port()
    job = f"e2e-{graphkeep_backend}-{uuid.uuid4().hex[:8]}"
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from tests.test_prometheus_e2e import worker;"
            " worker(sys.argv[1], sys.argv[2], int(sys.argv[3]))",
            graphkeep_backend,
            graphkeep_url,
            str(port),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])},
        stdout=subprocess.PIPE,
        text=True,
    )
    target = Path(targets) / f"{job}.json"
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert READY in line, f"the worker ended: {line!r} (exit {process.poll()})"
        target.write_text(json.dumps([{"targets": [f"127.0.0.1:{port}"], "labels": {"e2e": job}}]))
        failures_q = f'sum(graphkeep_resume_failures_total{{e2e="{job}"}})'
        p99_q = (
            "histogram_quantile(0.99, sum by (le) (db_client_operation_duration_seconds_bucket"
            f'{{e2e="{job}", db_operation_name="{OPERATION}"}}))'
        )
        deadline = time.monotonic() + 60
        failures: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            failures = query(base, failures_q)
            if failures:
                break
            time.sleep(0.5)
        assert failures, f"Prometheus at {base} never scraped 127.0.0.1:{port}"
        assert float(failures[0]["value"][1]) == 1.0
        (p99,) = query(base, p99_q)
        answered = float(p99["value"][1])
        assert 0 < answered <= 10
        assert answered == pytest.approx(exposition_p99(port, OPERATION), rel=1e-6)
        print(f"{graphkeep_backend}: PromQL {OPERATION} P99 {answered:.4f} s, resume failures 1")
    finally:
        target.unlink(missing_ok=True)
        process.terminate()
        process.wait(10)
