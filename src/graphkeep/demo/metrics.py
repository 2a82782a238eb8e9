"""What OpenTelemetry recorded of each backend's run, read from the demo's in-memory SDK and
printed as one summary table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from graphkeep.demo.transcript import say


class Metrics:
    """The demo's own OpenTelemetry SDK (an in-memory reader as the global meter provider),
    read after each backend's run for its summary: what graphkeep records on every call."""

    def __init__(self) -> None:
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        self.reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[self.reader]))

    def snapshot(self) -> dict[tuple[str, frozenset[tuple[str, Any]]], Any]:
        """Cumulative points: (metric, attributes) -> histogram point or counter value."""
        found: dict[tuple[str, frozenset[tuple[str, Any]]], Any] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        key = (metric.name, frozenset((point.attributes or {}).items()))
                        found[key] = point
        return found


def _quantile(q: float, bounds: Sequence[float], counts: Sequence[float]) -> float | None:
    """Prometheus' histogram_quantile over one histogram's bucket counts (seconds)."""
    total = sum(counts)
    if not total:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for upper, count in zip([*bounds, bounds[-1]], counts, strict=True):
        if below + count >= rank:
            return lower + (upper - lower) * (rank - below) / count if count else lower
        lower, below = upper, below + count
    return lower


def metrics_summary(
    before: Mapping[tuple[str, frozenset[tuple[str, Any]]], Any],
    after: Mapping[tuple[str, frozenset[tuple[str, Any]]], Any],
    system: str,
) -> dict[str, Any]:
    """One backend's run, from the difference of two snapshots: saver/store calls, the
    checkpoint write latency P50/P99, requests per call and resume failures."""
    calls = requests = failures = 0
    put_counts: list[float] = []
    bounds: Sequence[float] = ()
    for (name, attrs), point in after.items():
        if dict(attrs).get("db.system.name") != system:
            continue
        old = before.get((name, attrs))
        if name == "db.client.operation.duration":
            calls += point.count - (old.count if old else 0)
            if dict(attrs).get("db.operation.name") == "checkpoint.put":
                bounds = point.explicit_bounds
                earlier = old.bucket_counts if old else [0] * len(point.bucket_counts)
                delta = [n - o for n, o in zip(point.bucket_counts, earlier, strict=True)]
                if put_counts:
                    put_counts = [a + b for a, b in zip(put_counts, delta, strict=True)]
                else:
                    put_counts = delta
        elif name == "graphkeep.call.requests":  # a counter: requests over the calls
            requests += point.value - (old.value if old else 0)
        elif name == "graphkeep.resume.failures":
            failures += point.value - (old.value if old else 0)
    p50 = _quantile(0.5, bounds, put_counts) if bounds else None
    p99 = _quantile(0.99, bounds, put_counts) if bounds else None
    return {
        "calls": calls,
        "puts": sum(put_counts),
        "p50_ms": None if p50 is None else p50 * 1000,
        "p99_ms": None if p99 is None else p99 * 1000,
        "requests_per_call": requests / calls if calls else None,
        "resume_failures": failures,
    }


SYSTEMS = {"redis": "redis", "redis-cluster": "redis", "mongodb": "mongodb"}


def say_metrics(summaries: Sequence[tuple[str, dict[str, Any]]]) -> bool:
    """Print the OpenTelemetry summary of each backend's run; whether every fact holds."""
    say()
    say("What OpenTelemetry recorded (graphkeep's metrics, read from the SDK; this process):")
    say("backend        calls  puts  put P50 ms  put P99 ms  requests/call  resume failures", 2)

    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1f}"

    ok = True
    for name, m in summaries:
        per_call = m["requests_per_call"]
        say(
            f"{name:<13} {m['calls']:>6} {m['puts']:>5.0f} {ms(m['p50_ms']):>11}"
            f" {ms(m['p99_ms']):>11} {'n/a' if per_call is None else f'{per_call:.2f}':>14}"
            f" {m['resume_failures']:>16}",
            2,
        )
        ok = ok and m["calls"] > 0 and m["puts"] > 0 and m["resume_failures"] == 0
    fact = "every backend recorded its calls and checkpoint writes, and no resume failure"
    say(f"[ok] {fact}" if ok else f"[FAIL] {fact}", 4)
    return ok
