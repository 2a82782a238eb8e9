"""The measured apps and the measuring loop, independent of any store.

W50: a 2-node StateGraph on ``messages`` (``add_messages``); node ``assistant``
appends an AI message of about 200 characters with a tool call, node ``tool``
appends the tool's answer; one thread, one human message per turn, 50 turns.
Each turn makes four checkpoints (input, after START, after each node), so 50
turns leave 200 of them for the history read.

W50-delta: the same graph with ``messages`` in a ``DeltaChannel`` (batch messages
reducer, ``snapshot_frequency=10``): checkpoints store only every 10th value and
the runtime rebuilds the others from the writes of their ancestors.

Growth (issue 13): in the first round, the W50 run goes on after its history read
for as many turns again on the same thread (W50-100: 100 turns), and the store is
measured again, so "stored after 50 turns", "stored after 100 turns" and their
ratio come from one thread. Every turn also records the bytes the saver sent to
the store (counted at the client, see :mod:`.probes`); :func:`new_message_bytes`
is the reference those are compared with.

Client CPU (issue 48): each turn is also timed with ``time.process_time()``, the CPU
seconds of every thread of the process that runs the turns (LangGraph's background puts
included), i.e. the saver's client, its driver, LangGraph and the graph; the servers are
other processes and are not counted. A saver run in another interpreter
(:class:`bench.worker.InSubprocess`) is measured in that interpreter, where its turns run.

Large message (:func:`measure_large`, for suites whose store has an item limit):
the W50 graph on a fresh thread whose first human message is one big text (a
pasted document), then two ordinary turns; the state must read back exactly.
"""

from __future__ import annotations

import importlib
import random
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, TypedDict, cast

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph

from bench.probes import Probe, Tally, trace_lease

HISTORY_LIMIT = 200
CHECKPOINTS_PER_TURN = 4
MESSAGES_PER_TURN = 3
FILLER = (
    "Checked the order history, the carrier's tracking feed and the warehouse notes;"
    " everything is consistent, so here is the summary you asked for, with the next"
    " step spelled out for the customer. "
)


def _batch_add_messages(state: Any, writes: Sequence[Any]) -> Any:
    """A batch messages reducer built from ``add_messages`` (one write after the other)."""
    value: Any = list(state or [])
    for write in writes:
        value = add_messages(value, write)
    return value


def messages_batch_reducer() -> Callable[[Any, Sequence[Any]], Any]:
    """LangGraph's (private) messages delta reducer, else :func:`_batch_add_messages`."""
    found = getattr(
        importlib.import_module("langgraph.graph.message"), "_messages_delta_reducer", None
    )
    return (
        cast(Callable[[Any, Sequence[Any]], Any], found) if callable(found) else _batch_add_messages
    )


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


# module level: LangGraph resolves the (string) annotation below in this module's globals
DELTA_REDUCER = messages_batch_reducer()
DELTA_MESSAGES: DeltaChannel[list[AnyMessage]] = DeltaChannel(DELTA_REDUCER, snapshot_frequency=10)
DELTA_REDUCER_NAME = (
    "langgraph's _messages_delta_reducer"
    if DELTA_REDUCER is not _batch_add_messages
    else "add_messages applied write by write"
)


class DeltaChatState(TypedDict):
    messages: Annotated[list[AnyMessage], DELTA_MESSAGES]


def _turn_number(state: Any) -> int:
    return sum(1 for m in state["messages"] if isinstance(m, HumanMessage))


def human_message(n: int) -> HumanMessage:
    return HumanMessage(f"Where is my order #{1000 + n}? (turn {n})")


def ai_message(n: int) -> AIMessage:
    text = f"Turn {n}: {FILLER}"[:200]
    call = {"name": "lookup_order", "args": {"order": f"#{1000 + n}"}, "id": f"call-{n}"}
    return AIMessage(text, tool_calls=[call])


def tool_message(n: int) -> ToolMessage:
    answer = f'{{"order": "#{1000 + n}", "status": "shipped", "eta_days": {n % 5 + 1}}}'
    return ToolMessage(answer, tool_call_id=f"call-{n}", name="lookup_order")


def assistant(state: Any) -> dict[str, list[AnyMessage]]:
    return {"messages": [ai_message(_turn_number(state))]}


def tool(state: Any) -> dict[str, list[AnyMessage]]:
    return {"messages": [tool_message(_turn_number(state))]}


def new_message_bytes(n: int) -> int:
    """Serialized bytes of the messages turn ``n`` adds (the human message, the AI message,
    the tool message), each with the 36-character id ``add_messages`` gives it, by
    LangGraph's default serializer (``JsonPlusSerializer``, msgpack): what a saver that
    stores only what changed must at least send."""
    serde = JsonPlusSerializer()
    total = 0
    for message in (human_message(n), ai_message(n), tool_message(n)):
        message.id = str(uuid.UUID(int=n))
        total += len(serde.dumps_typed(message)[1])
    return total


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    state: type[Any]

    def build(
        self, checkpointer: BaseCheckpointSaver[Any]
    ) -> CompiledStateGraph[Any, Any, Any, Any]:
        builder = StateGraph(self.state)
        builder.add_node("assistant", assistant)
        builder.add_node("tool", tool)
        builder.add_edge(START, "assistant")
        builder.add_edge("assistant", "tool")
        return builder.compile(checkpointer=checkpointer)


WORKLOADS: tuple[Workload, ...] = (
    Workload("W50", "2 nodes, messages with add_messages", ChatState),
    Workload(
        "W50-delta",
        f"same, messages in a DeltaChannel({DELTA_REDUCER_NAME}, snapshot_frequency=10)",
        DeltaChatState,
    ),
)


#: the workload whose thread goes on for the growth rows (W50 -> W50-100)
GROWTH_WORKLOAD = "W50"


def workload(name: str) -> Workload:
    for item in WORKLOADS:
        if item.name == name:
            return item
    raise KeyError(f"unknown workload {name!r}; known: {', '.join(w.name for w in WORKLOADS)}")


@dataclass
class Result:
    """One saver on one workload. ``None`` means not applicable (no requests, no store)."""

    suite: str
    saver: str
    workload: str
    turns: int
    ms_per_turn: float
    requests_per_turn: float | None
    stored_bytes: int | None
    history_entries: int
    history_ms: float
    history_requests: int | None
    turn_tally: Tally = field(default_factory=Tally)
    history_tally: Tally = field(default_factory=Tally)
    #: raw samples behind the medians (pooled when rounds are combined)
    turn_samples_ms: list[float] = field(default_factory=list)
    history_samples_ms: list[float] = field(default_factory=list)
    rounds: int = 1
    #: bytes sent to the store in each turn, the growth turns included (empty: not counted)
    sent_bytes: list[int] = field(default_factory=list)
    #: turns run after the history read on the same thread (0: no growth measured)
    extra_turns: int = 0
    #: the growth gauge (:attr:`Opened.data_bytes`) after ``turns`` and after
    #: ``turns + extra_turns`` turns
    stored_first: int | None = None
    stored_last: int | None = None
    #: capacity units consumed per turn (DynamoDB's WCU and RCU; None: not counted)
    write_units_per_turn: float | None = None
    read_units_per_turn: float | None = None
    #: median ms of the first and of the last :data:`EDGE_TURNS` turns (a cost that grows
    #: with the thread or the table shows as last above first)
    first_ms: float | None = None
    last_ms: float | None = None
    #: median client CPU ms per turn (``time.process_time()`` of the process that ran the
    #: turns, every thread; servers not counted), and its samples (pooled over rounds)
    cpu_ms_per_turn: float | None = None
    cpu_samples_ms: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["turn_tally"] = self.turn_tally.to_json()
        data["history_tally"] = self.history_tally.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Result:
        values = dict(data)
        values["turn_tally"] = Tally.from_json(values.get("turn_tally", {}))
        values["history_tally"] = Tally.from_json(values.get("history_tally", {}))
        return cls(**values)


@dataclass
class Opened:
    """A saver ready for one measured run, with its probe and its storage gauge."""

    saver: BaseCheckpointSaver[Any]
    probe: Probe
    stored_bytes: Callable[[], int] | None = None
    #: the stored bytes of the growth rows, when they are measured otherwise than
    #: ``stored_bytes`` (MongoDB: data only, as issue 13 states them); default ``stored_bytes``
    data_bytes: Callable[[], int] | None = None
    #: run every turn through ``saver.exclusive(graph)`` (a graphkeep saver): each turn
    #: holds the thread's fenced lease, whose requests the probe counts apart
    exclusive: bool = False


def turn_runner(opened: Opened, app: Any) -> Any:
    """What the turns are run on: ``app``, or ``saver.exclusive(app)`` when ``opened`` asks
    for it, its leases traced by the probe (:func:`bench.probes.trace_lease`)."""
    if not opened.exclusive:
        return app
    saver: Any = opened.saver
    return trace_lease(saver, opened.probe).exclusive(app)


def measure(
    opened: Opened,
    work: Workload,
    *,
    suite: str,
    saver_name: str,
    turns: int,
    history_runs: int,
    extra_turns: int = 0,
) -> Result:
    """Run ``turns`` turns of ``work`` on one fresh thread, then read its history.

    ``extra_turns``: then run that many more turns on the thread (untimed) and measure
    the store again (the growth rows).
    """
    probe = opened.probe
    app = work.build(probe.trace(opened.saver))
    runner = turn_runner(opened, app)
    config: RunnableConfig = {"configurable": {"thread_id": f"bench-{uuid.uuid4().hex[:12]}"}}
    probe.take()
    sent: list[int] = []
    cpu: list[float] = []

    def run_turn(turn: int) -> float:
        before = probe.bytes_sent
        cpu_started = time.process_time()
        started = time.perf_counter()
        runner.invoke({"messages": [human_message(turn)]}, config)
        elapsed = time.perf_counter() - started
        cpu.append(time.process_time() - cpu_started)
        sent.append(probe.bytes_sent - before)
        return elapsed

    def check_messages(done: int) -> None:
        count = len(app.get_state(config).values["messages"])
        if count != MESSAGES_PER_TURN * done:
            raise AssertionError(
                f"{saver_name} on {work.name}: {count} messages after {done} turns,"
                f" expected {MESSAGES_PER_TURN * done}"
            )

    durations: list[float] = []
    requests_before = probe.total
    units_before = probe.write_units, probe.read_units
    for turn in range(1, turns + 1):
        durations.append(run_turn(turn))
    turn_requests = probe.total - requests_before
    turn_cpu = cpu[:turns]
    turn_units = probe.write_units - units_before[0], probe.read_units - units_before[1]
    turn_tally = probe.take()

    check_messages(turns)
    stored = opened.stored_bytes() if opened.stored_bytes else None
    data_gauge = opened.data_bytes or opened.stored_bytes
    stored_first = stored_last = None
    if extra_turns and data_gauge is not None:
        stored_first = data_gauge() if opened.data_bytes else stored
    probe.take()

    history_times: list[float] = []
    history_requests: int | None = None
    history_tally = Tally()
    entries = 0
    for run in range(max(history_runs, 1)):
        before = probe.total
        started = time.perf_counter()
        snapshots = list(app.get_state_history(config, limit=HISTORY_LIMIT))
        history_times.append(time.perf_counter() - started)
        if run == 0:
            history_requests = probe.total - before
            history_tally = probe.take()
            entries = len(snapshots)
            _check_history(saver_name, work, snapshots, turns)

    if extra_turns:
        for turn in range(turns + 1, turns + extra_turns + 1):
            run_turn(turn)
        check_messages(turns + extra_turns)
        stored_last = data_gauge() if data_gauge is not None else None
        probe.take()

    counted = probe.counts_requests
    return Result(
        suite=suite,
        saver=saver_name,
        workload=work.name,
        turns=turns,
        ms_per_turn=statistics.median(durations) * 1000,
        requests_per_turn=turn_requests / turns if counted else None,
        stored_bytes=stored,
        history_entries=entries,
        history_ms=statistics.median(history_times) * 1000,
        history_requests=history_requests if counted else None,
        turn_tally=turn_tally,
        history_tally=history_tally,
        turn_samples_ms=[d * 1000 for d in durations],
        history_samples_ms=[d * 1000 for d in history_times],
        sent_bytes=sent if counted else [],
        extra_turns=extra_turns,
        stored_first=stored_first,
        stored_last=stored_last,
        write_units_per_turn=turn_units[0] / turns if probe.counts_capacity else None,
        read_units_per_turn=turn_units[1] / turns if probe.counts_capacity else None,
        first_ms=statistics.median(durations[:EDGE_TURNS]) * 1000,
        last_ms=statistics.median(durations[-EDGE_TURNS:]) * 1000,
        cpu_ms_per_turn=statistics.median(turn_cpu) * 1000,
        cpu_samples_ms=[c * 1000 for c in turn_cpu],
    )


#: turns at each end of a run whose median ms :attr:`Result.first_ms` / ``last_ms`` show
EDGE_TURNS = 10


def combine(rounds: list[Result]) -> Result:
    """One result from several rounds of the same saver and workload: pooled medians.

    Counts are deterministic per round (a DeltaChannel run can differ by a request
    or two), so requests are averaged and the tallies are the first round's; bytes
    sent and the growth figures are those of the round that measured growth (else
    the first's).
    """
    first = rounds[0]
    if len(rounds) == 1:
        return first
    turn_samples = [x for r in rounds for x in r.turn_samples_ms]
    history_samples = [x for r in rounds for x in r.history_samples_ms]
    per_turn = [r.requests_per_turn for r in rounds if r.requests_per_turn is not None]
    stored = [r.stored_bytes for r in rounds if r.stored_bytes is not None]
    grown = next((r for r in rounds if r.extra_turns), first)
    wcu = [r.write_units_per_turn for r in rounds if r.write_units_per_turn is not None]
    rcu = [r.read_units_per_turn for r in rounds if r.read_units_per_turn is not None]
    cpu_samples = [x for r in rounds for x in r.cpu_samples_ms]
    return Result(
        suite=first.suite,
        saver=first.saver,
        workload=first.workload,
        turns=first.turns,
        ms_per_turn=statistics.median(turn_samples),
        requests_per_turn=statistics.fmean(per_turn) if per_turn else None,
        stored_bytes=int(statistics.median(stored)) if stored else None,
        history_entries=first.history_entries,
        history_ms=statistics.median(history_samples),
        history_requests=first.history_requests,
        turn_tally=first.turn_tally,
        history_tally=first.history_tally,
        turn_samples_ms=turn_samples,
        history_samples_ms=history_samples,
        rounds=len(rounds),
        sent_bytes=grown.sent_bytes,
        extra_turns=grown.extra_turns,
        stored_first=grown.stored_first,
        stored_last=grown.stored_last,
        write_units_per_turn=statistics.fmean(wcu) if wcu else None,
        read_units_per_turn=statistics.fmean(rcu) if rcu else None,
        first_ms=_median_of([r.first_ms for r in rounds]),
        last_ms=_median_of([r.last_ms for r in rounds]),
        cpu_ms_per_turn=statistics.median(cpu_samples) if cpu_samples else None,
        cpu_samples_ms=cpu_samples,
    )


def _median_of(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _check_history(saver: str, work: Workload, snapshots: list[Any], turns: int) -> None:
    """The history must be complete and rebuilt correctly, or the timings mean nothing."""
    expected = min(HISTORY_LIMIT, CHECKPOINTS_PER_TURN * turns)
    if len(snapshots) != expected:
        raise AssertionError(
            f"{saver} on {work.name}: {len(snapshots)} history entries, expected {expected}"
        )
    counts = [len(s.values.get("messages", [])) for s in snapshots]
    if counts != sorted(counts, reverse=True) or counts[0] != MESSAGES_PER_TURN * turns:
        raise AssertionError(f"{saver} on {work.name}: history message counts are wrong: {counts}")


@dataclass
class LargeResult:
    """One saver given one large message: did it store and read it back, and at what cost."""

    suite: str
    saver: str
    size_bytes: int
    turns: int
    ok: bool
    #: "stored and read back", or where and how it failed
    outcome: str
    #: wall time of the turn that sent the large message
    ms_large_turn: float | None = None
    requests_per_turn: float | None = None
    stored_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LargeResult:
        return cls(**data)


def large_text(size: int, seed: int = 0) -> str:
    """``size`` bytes of ASCII prose-like text: words drawn at random, about as compressible
    as a real document (zlib gets it to roughly a third)."""
    rng = random.Random(seed)
    words = FILLER.replace(",", "").replace(";", "").replace(".", "").split()
    words += [f"{rng.getrandbits(40):x}" for _ in range(200)]
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(words)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)[:size]


def measure_large(
    opened: Opened, *, suite: str, saver_name: str, size: int, turns: int = 3
) -> LargeResult:
    """Turn 1 sends ``size`` bytes as one human message, then ``turns - 1`` ordinary turns."""
    probe = opened.probe
    app = WORKLOADS[0].build(probe.trace(opened.saver))
    config: RunnableConfig = {"configurable": {"thread_id": f"bench-big-{uuid.uuid4().hex[:12]}"}}
    big = large_text(size)
    probe.take()
    before = probe.total
    durations: list[float] = []

    def failed(where: str, exc: BaseException) -> LargeResult:
        text = " ".join(str(exc).split())
        return LargeResult(
            suite, saver_name, size, turns, False, f"{where}: {type(exc).__name__}: {text[:160]}"
        )

    for turn in range(1, turns + 1):
        content = big if turn == 1 else f"Where is my order #{1000 + turn}? (turn {turn})"
        started = time.perf_counter()
        try:
            app.invoke({"messages": [HumanMessage(content)]}, config)
        except Exception as exc:  # noqa: BLE001 - the outcome is what the table reports
            return failed(f"turn {turn}", exc)
        durations.append(time.perf_counter() - started)
    requests = probe.total - before
    try:
        messages = app.get_state(config).values["messages"]
    except Exception as exc:  # noqa: BLE001
        return failed("read back", exc)
    if len(messages) != MESSAGES_PER_TURN * turns or messages[0].content != big:
        return LargeResult(
            suite, saver_name, size, turns, False,
            f"read back wrong: {len(messages)} messages, first of"
            f" {len(str(messages[0].content)) if messages else 0} characters",
        )  # fmt: skip
    return LargeResult(
        suite,
        saver_name,
        size,
        turns,
        True,
        "stored and read back",
        ms_large_turn=durations[0] * 1000,
        requests_per_turn=requests / turns if probe.counts_requests else None,
        stored_bytes=opened.stored_bytes() if opened.stored_bytes else None,
    )
