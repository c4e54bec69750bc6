"""Supervision: one watcher's failure never stops another. Escalation on time when the wall
clock steps."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import traceback
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from forewarn.agent import runner
from forewarn.agent import state as state_module
from forewarn.agent import statewriter as statewriter_module
from forewarn.agent.board import NoticeBoard, Sequencer
from forewarn.agent.config import load_settings
from forewarn.agent.observer import Observer
from forewarn.agent.protocol import AckRequest, ClearRequest, Notice, Report
from forewarn.agent.runner import Agent
from forewarn.agent.state import load_state
from forewarn.providers import Emit, PollHealth
from hypothesis import given, settings
from hypothesis import strategies as st
from support import eventually_async, examples, free_port, wire_notice


class Crashing:
    name: ClassVar[str] = "crashing"
    runs = 0

    async def detect(self) -> bool:
        return True

    async def watch(self, emit: Emit) -> None:
        Crashing.runs += 1
        raise RuntimeError("endpoint exploded")


class Steady:
    name: ClassVar[str] = "steady"

    async def detect(self) -> bool:
        return True

    async def watch(self, emit: Emit) -> None:
        n = 0
        while True:
            n += 1
            emit(Report(id=f"steady/{n}", action="drain", reason="manual", provider="steady"))
            await asyncio.sleep(0.05)


async def test_a_crashing_watcher_is_retried_with_backoff_and_others_keep_going(
    tmp_path: Path,
) -> None:
    settings = load_settings(
        providers=["local"], runtime_dir=tmp_path / "run", state_dir=tmp_path / "state"
    )
    agent = Agent(settings)
    agent.board = NoticeBoard(Sequencer(), 30.0)  # a crash holds its provider's notices there
    reports: list[Report] = []
    agent._emit = reports.append  # type: ignore[method-assign]
    agent.watchers = {"crashing": Crashing(), "steady": Steady()}  # type: ignore[dict-item]
    bad, good = PollHealth("crashing"), PollHealth("steady")
    tasks = [
        asyncio.create_task(agent._supervise("crashing", bad)),
        asyncio.create_task(agent._supervise("steady", good)),
    ]
    # The crashed watcher is rebuilt from its module; here that fails too and counts as well.
    agent._build = lambda name, health: Crashing()  # type: ignore[method-assign,assignment,return-value]
    await asyncio.sleep(1.6)  # the scenario: a stretch of supervision, retries counted in it
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert len(reports) >= 20, "the steady watcher kept emitting"
    assert 2 <= Crashing.runs <= 4, "retried, with backoff between tries"
    assert bad.errors_by_kind["watcher-failed"] == Crashing.runs
    assert good.errors == 0


async def test_a_crashing_watcher_s_line_carries_its_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A watcher's crash (a bug in forewarn, not its endpoint failing) was logged as
    `crashing: watcher-failed: RuntimeError: endpoint exploded; restarting in 1.0s` and
    nothing more: no traceback at any log level, so neither the operator nor a bug report
    could say where it crashed. The line logged (once a minute) now carries it."""
    settings = load_settings(
        providers=["local"], runtime_dir=tmp_path / "run", state_dir=tmp_path / "state"
    )
    agent = Agent(settings)
    agent.board = NoticeBoard(Sequencer(), 30.0)
    agent.watchers = {"crashing": Crashing()}  # type: ignore[dict-item]
    agent._build = lambda name, health: Crashing()  # type: ignore[method-assign,assignment,return-value]
    health = PollHealth("crashing")
    caplog.set_level(logging.WARNING, logger="forewarn.providers")
    task = asyncio.create_task(agent._supervise("crashing", health))
    for _ in range(200):
        await asyncio.sleep(0.01)  # polls for the first crash's line
        if health.errors:
            break
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    (record,) = [r for r in caplog.records if "watcher-failed" in r.getMessage()]
    assert record.exc_info is not None, record.getMessage()
    assert "endpoint exploded" in "".join(traceback.format_exception(*record.exc_info))


class Recorder:
    """Stands in for the publisher: keeps what the agent sends."""

    def __init__(self) -> None:
        self.sent: list[Notice] = []

    def publish(self, notice: Notice) -> None:
        self.sent.append(notice)

    def control_file_ours(self) -> bool:
        return True  # it has no socket file


async def test_a_wall_clock_step_forward_escalates_a_drain_at_once_not_after_the_old_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # NTP stepping the clock, a resume or a live migration: the deadline is 120 s away when
    # the loop goes to sleep (escalation due in 90 s with a 30 s margin), then only 10 s.
    clock = [datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)]

    def now() -> datetime:
        return clock[0]

    monkeypatch.setattr(runner, "utcnow", now)
    settings = load_settings(
        providers=["local"], runtime_dir=tmp_path / "run", state_dir=tmp_path / "state"
    )
    agent = Agent(settings)
    agent.board = NoticeBoard(Sequencer(), 30.0, now=now)
    publisher = Recorder()
    agent.publisher = publisher  # type: ignore[assignment]
    report = Report(
        id="local/step",
        action="drain",
        reason="manual",
        provider="local",
        deadline=clock[0] + timedelta(seconds=120),
    )
    raised = agent.board.report(report, manual=True)
    assert raised is not None and raised.action == "drain"
    looked = asyncio.Event()
    next_due = agent.board.next_due

    def spy() -> datetime | None:
        looked.set()
        return next_due()

    agent.board.next_due = spy  # type: ignore[method-assign]
    task = asyncio.create_task(agent._escalations())
    try:
        await asyncio.wait_for(looked.wait(), 5)  # the loop has computed its wait
        assert publisher.sent == []
        clock[0] += timedelta(seconds=110)
        await eventually_async(
            lambda: [n for n in publisher.sent if n.action == "terminate"],
            timeout=runner.CLOCK_RECHECK + 4,
            what="the escalation after the clock step",
            alive=lambda: task.result() if task.done() else None,
        )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    (escalated,) = publisher.sent
    assert escalated.id == "local/step" and escalated.deadline == report.deadline
    assert escalated.sent_at == clock[0]


class CrashingWithClient:
    """A watcher that holds a resource (an HTTP client, an IMAP session) and then crashes."""

    name: ClassVar[str] = "holding"

    def __init__(self) -> None:
        self.closed = False

    async def detect(self) -> bool:
        return True

    async def watch(self, emit: Emit) -> None:
        raise RuntimeError("endpoint exploded")

    async def aclose(self) -> None:
        self.closed = True


async def test_a_crashed_watcher_is_closed_before_it_is_rebuilt(tmp_path: Path) -> None:
    settings = load_settings(
        providers=["local"], runtime_dir=tmp_path / "run", state_dir=tmp_path / "state"
    )
    agent = Agent(settings)
    agent.board = NoticeBoard(Sequencer(), 30.0)  # a crash holds its provider's notices there
    built = [CrashingWithClient()]
    agent.watchers = {"holding": built[0]}  # type: ignore[dict-item]

    def build(name: str, health: PollHealth) -> CrashingWithClient:
        built.append(CrashingWithClient())
        return built[-1]

    agent._build = build  # type: ignore[method-assign,assignment]
    task = asyncio.create_task(agent._supervise("holding", PollHealth("holding")))
    try:
        await eventually_async(lambda: len(built) >= 2, what="the watcher rebuilt")
        assert built[0].closed, "the crashed watcher's resources were closed"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_clear_is_on_disk_before_it_is_published(tmp_path: Path) -> None:
    """A crash between publishing a clear and saving the state brought the notice back as
    active at the next start, after clients had been told it was gone."""
    settings = load_settings(
        providers=["local"], runtime_dir=tmp_path / "run", state_dir=tmp_path / "state"
    )
    agent = Agent(settings)
    agent.sequencer = Sequencer()
    agent.board = NoticeBoard(agent.sequencer, 30.0)
    saved_when_sent: dict[str, list[str]] = {}

    class SavedAtPublish(Recorder):
        def publish(self, notice: Notice) -> None:
            super().publish(notice)
            manual = load_state(agent.state_path).manual
            saved_when_sent[notice.action] = [saved.id for saved in manual]

    agent.publisher = SavedAtPublish()  # type: ignore[assignment]
    await agent._handle({"op": "notify", "action": "drain", "id": "local/gone"})
    assert load_state(agent.state_path).manual[0].id == "local/gone"
    agent._clear(ClearRequest(op="clear", id="local/gone"))
    assert saved_when_sent["clear"] == []


async def test_a_part_whose_restart_logic_raises_stops_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watcher crashed and then its supervisor's own restart step raised: the task ended
    with the exception, which nothing logged (the task is kept in `parts`), and the agent
    ran on without the watcher. It must stop with exit 1 so systemd or Kubernetes restart
    a whole agent."""
    settings = load_settings(
        providers=["local"],
        runtime_dir=tmp_path / "run",
        state_dir=tmp_path / "state",
        control_probe_interval=0,
    )
    agent = Agent(settings)

    def no_watcher(name: str, health: PollHealth) -> None:
        raise RuntimeError("endpoint exploded")

    def broken_restart(self: PollHealth, kind: str, message: str) -> None:
        raise ValueError("restart logic broke")

    agent._build = no_watcher  # type: ignore[method-assign,assignment]
    monkeypatch.setattr(PollHealth, "error", broken_restart)
    assert await asyncio.wait_for(agent.run(), 10) == 1


async def test_a_dead_metrics_thread_or_webhook_task_is_a_dead_part(tmp_path: Path) -> None:
    """The metrics server's thread and the webhook's delivery task are the agent's parts
    too: with either dead, the agent kept pinging the systemd watchdog (and /healthz, when
    its thread was the one alive, said 200) while nothing served metrics or webhooks."""
    settings = load_settings(
        providers=["local"],
        runtime_dir=tmp_path / "run",
        state_dir=tmp_path / "state",
        metrics_address="127.0.0.1:0",
        webhook={"url": f"http://127.0.0.1:{free_port()}/hook"},
    )
    agent = Agent(settings)
    agent.observers.on_start(["local"])
    try:
        assert agent.liveness() == {"metrics": True, "webhook": True}
        metrics, webhook = agent.observers.observers[0], agent.observers.observers[-1]

        def broken() -> None:
            raise RuntimeError("metrics server broke")

        metrics.server.service_actions = broken  # type: ignore[attr-defined]
        # Shaped enough to be queued and kept in the pending file, not to be delivered: the
        # delivery task dies on its seq (a list, unhashable).
        broken_notice = SimpleNamespace(
            id="local/broken", action="drain", seq=[1], model_dump_json=lambda: "{}"
        )
        webhook.on_notice(broken_notice, escalated=False)  # type: ignore[arg-type]
        await eventually_async(
            lambda: agent.liveness() == {"metrics": False, "webhook": False},
            5,
            "both parts dead",
        )
    finally:
        agent.observers.on_stop()


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@settings(max_examples=examples(150), deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "seq",
                "manual",
                "acked",
                "provider",
                "flushes",
                "escalated",
                "boot_id",
                "booted",
                "windows",
                "acked_by",
                "expected_by",
                "raised",
            ]
        ),
        _json | st.dictionaries(st.text(max_size=8), st.just("2026-11-30T03:00:00Z") | _json),
    )
)
def test_any_state_file_loads_into_well_typed_state(tmp_path_factory: Any, raw: Any) -> None:
    """Whatever a state file holds, a start never fails on it, and what the board gets is of
    the right types: flush times finite and in range (they size the exit margin)."""
    path = tmp_path_factory.mktemp("state") / "state.json"
    path.write_text(json.dumps({"version": 1, **raw}, allow_nan=True))
    # Hypothesis rarely draws these on its own.
    path.with_name("big.json").write_text(
        '{"version": 1, "flushes": [1e999, -0.0, 10' + "0" * 400 + ", 5]}"
    )
    assert load_state(path.with_name("big.json")).flushes == [-0.0, 5.0]
    state = load_state(path)
    assert all(isinstance(f, float) and math.isfinite(f) and 0 <= f <= 3600 for f in state.flushes)
    assert all(isinstance(i, str) for i in [*state.escalated, *state.acked])
    assert all(isinstance(n, Notice) for n in [*state.manual, *state.provider])
    assert isinstance(state.seq, int) and state.seq >= 0
    assert state.boot_id is None or isinstance(state.boot_id, str)
    assert state.booted is None or state.booted.tzinfo is not None
    assert all(
        isinstance(i, str) and isinstance(end, datetime) and end.tzinfo is not None
        for i, end in [*state.windows.items(), *state.raised.items()]
    )
    assert all(
        isinstance(i, str) and all(isinstance(c, str) for c in clients)
        for i, clients in state.acked_by.items()
    )
    assert all(
        isinstance(i, str)
        and len(clients) <= state_module.MAX_EXPECTED_SAVED
        and all(isinstance(c, str) for c in clients)
        for i, clients in state.expected_by.items()
    )


def test_the_acking_clients_are_saved_bounded_and_an_older_file_loads_without_them(
    tmp_path: Path,
) -> None:
    """Which clients acked each notice is saved (a restarted agent counts them), at most
    MAX_ACKED_SAVED per notice, ids no ack could name left out; a state file written before
    they were saved loads with none."""
    path = tmp_path / "state.json"
    path.write_text('{"version": 1, "seq": 7, "acked": ["local/manual/x"]}')
    older = load_state(path)
    assert older.acked == ["local/manual/x"] and older.acked_by == {}
    many = [f"rank-{n:03}" for n in range(state_module.MAX_ACKED_SAVED + 10)]
    state_module.save_state(
        path, state_module.AgentState(seq=7, acked_by={"local/manual/x": many, "x/y": ["a"]})
    )
    assert load_state(path).acked_by == {
        "local/manual/x": many[: state_module.MAX_ACKED_SAVED],
        "x/y": ["a"],
    }
    path.write_text(
        '{"version": 1, "acked_by": {"a/b": ["ok", 3, "two\\nlines", ""], "c/d": "ok", "e/f": []}}'
    )
    assert load_state(path).acked_by == {"a/b": ["ok"], "e/f": []}


def test_the_receiving_clients_are_saved_whole_or_not_at_all(tmp_path: Path) -> None:
    """Which clients each acked notice was sent to is saved, so a restarted agent knows which
    notices every client had flushed; a list over MAX_EXPECTED_SAVED, or with an id no client
    could have, is left out rather than cut (a part could make a notice count as flushed by
    every client when it was not)."""
    path = tmp_path / "state.json"
    bound = state_module.MAX_EXPECTED_SAVED
    many = [f"rank-{n:03}" for n in range(bound + 1)]
    state_module.save_state(
        path,
        state_module.AgentState(
            expected_by={"x/many": many, "x/bound": many[:bound], "x/none": []}
        ),
    )
    assert load_state(path).expected_by == {"x/bound": many[:bound], "x/none": []}
    path.write_text('{"version": 1, "expected_by": {"a/b": ["ok", "two\nlines"], "c/d": 3}}')
    assert load_state(path).expected_by == {}


@pytest.mark.parametrize(
    "text",
    ['{"epoch": 12, "best": 0.93}', '{"version": 2, "seq": 9}', '{"version": true, "seq": 9}'],
    ids=["another-program", "another-version", "not-a-version"],
)
def test_a_state_file_that_is_not_forewarns_is_set_aside_not_overwritten(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    """A `state.json` that some other program keeps in the directory given as `state_dir`
    (or one of another version of the format) loaded as an empty state without a word, and
    the agent's next save replaced it: the other program's data was gone. Every state file
    the agent writes says `"version": 1`; one that does not is set aside as a broken one is."""
    path = tmp_path / "state.json"
    path.write_text(text)
    assert load_state(path) == state_module.AgentState()
    assert not path.exists() and path.with_name("state.json.broken").read_text() == text
    assert "not a forewarn state file of version 1" in caplog.text


def test_a_lone_surrogate_in_a_saved_or_reported_notice_is_replaced_not_fatal(
    tmp_path: Path,
) -> None:
    """JSON may escape half of a UTF-16 pair (`"\\ud83d"`, an emoji cut short), which Python
    reads as a string no UTF-8 can hold. In a state file's notice, every start of the agent
    failed ('unexpected PydanticSerializationError', exit 1) as it published the restored
    notice; in a provider's detail (Azure's event as the metadata service sent it), the
    publish raised in the watcher's emit: the notice was never sent, and each replay of it
    crashed the subscriptions. Such a character becomes U+FFFD in a detail; a notice whose
    provider holds one is dropped from the state file like any that does not validate."""
    path = tmp_path / "state.json"
    notice = (
        '{"id": "%s", "seq": 4, "action": "drain", "reason": "manual", "provider": "%s", '
        '"noticed_at": "2026-12-02T14:00:00Z", "sent_at": "2026-12-02T14:00:00Z", '
        '"detail": {"note": "caf\\ud83d", "\\udc80": ["\\ud800x"]}}'
    )
    good, bad = notice % ("local/manual/x", "local"), notice % ("local/manual/y", "lo\\ud800")
    path.write_text(f'{{"version": 1, "seq": 5, "manual": [{good}, {bad}]}}')
    state = load_state(path)
    assert [saved.id for saved in state.manual] == ["local/manual/x"]
    assert state.manual[0].detail == {"note": "caf\ufffd", "\ufffd": ["\ufffdx"]}
    assert b"caf\\ufffd" in state_module.encode_state(state)
    reported = NoticeBoard(Sequencer(), 30.0).report(
        Report(
            id="azure/event-1",
            action="drain",
            reason="host-maintenance",
            provider="azure",
            detail={"Description": "Host update \udc80"},
        )
    )
    assert reported is not None
    assert json.loads(reported.model_dump_json())["detail"] == {"Description": "Host update \ufffd"}


def _agent_publishing_to_a_recorder(tmp_path: Path) -> tuple[Agent, Recorder]:
    """An agent whose board and publisher are set up as `run` would, without its sockets."""
    settings = load_settings(
        providers=["local"], runtime_dir=tmp_path / "run", state_dir=tmp_path / "state"
    )
    (tmp_path / "state").mkdir()
    agent = Agent(settings)
    agent.board = NoticeBoard(Sequencer(), 30.0)
    agent.sequencer = agent.board.sequencer
    publisher = Recorder()
    agent.publisher = publisher  # type: ignore[assignment]
    return agent, publisher


def _slow_disk(monkeypatch: pytest.MonkeyPatch, seconds: float) -> list[float]:
    """Each write of the agent's state takes `seconds` (a disk busy with a checkpoint); the
    times the writes began."""
    began: list[float] = []
    write = statewriter_module.write_atomically

    def slow(path: Path, data: bytes, mode: int = 0o640) -> None:
        began.append(time.monotonic())
        time.sleep(seconds)
        write(path, data, mode=mode)

    monkeypatch.setattr(statewriter_module, "write_atomically", slow)
    return began


async def test_state_saves_after_a_notice_or_an_ack_do_not_hold_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each state save fsyncs in the event loop: with a checkpoint being written to the same
    disk one took up to 0.45 s here, and a drain, its acks and the terminate after it each
    waited for the save before. A slow disk must delay no publish and no ack."""
    agent, publisher = _agent_publishing_to_a_recorder(tmp_path)
    began = _slow_disk(monkeypatch, 1.0)
    deadline = datetime.now(timezone.utc) + timedelta(minutes=10)
    started = time.monotonic()
    agent._emit(
        Report(
            id="aws/rebalance/1",
            action="drain",
            reason="rebalance-recommendation",
            provider="aws",
        )
    )
    acks = [
        asyncio.create_task(
            agent._handle(
                {"op": "ack", "notice_id": "aws/rebalance/1", "client": f"rank{rank}"}
                | {"flush_seconds": 3.0 + rank}
            )
        )
        for rank in range(4)
    ]
    await asyncio.sleep(0)  # the acks are handled as far as their wait for the disk
    agent._emit(
        Report(
            id="aws/spot/1",
            action="terminate",
            reason="spot-interruption",
            provider="aws",
            deadline=deadline,
        )
    )
    published = time.monotonic()
    assert [notice.id for notice in publisher.sent] == ["aws/rebalance/1", "aws/spot/1"]
    # Held against the disk, not a fixed figure: a publish that waited for a save went out
    # after the write ended; a loaded machine took 0.72 s without any wait.
    assert not began or published < began[0] + 1.0, (
        f"the terminate went out {published - started:.2f} s after the drain, after the "
        f"state write that began at {began[0] - started:.2f} s had ended"
    )
    # Each ack is answered once its state is on disk (an accepted ack survives a crash); the
    # saves asked for while one was being written were written as one.
    assert [(await ack)["ok"] for ack in acks] == [True] * 4
    assert "aws/rebalance/1" in load_state(tmp_path / "state" / "state.json").acked
    await agent.state_writer.settled()
    agent.state_writer.close()
    assert len(began) <= 3, began
    saved = load_state(tmp_path / "state" / "state.json")
    assert {notice.id for notice in saved.provider} == {"aws/rebalance/1", "aws/spot/1"}
    assert 6.0 in saved.flushes


async def test_a_notify_is_answered_once_its_state_is_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saves left the event loop; the reply to a notify still waits for the disk, so an
    accepted notify survives a SIGKILL right after it."""
    agent, _ = _agent_publishing_to_a_recorder(tmp_path)
    _slow_disk(monkeypatch, 0.3)
    reply = await agent._handle({"op": "notify", "action": "drain", "id": "local/manual/a"})
    assert reply["notice"]["id"] == "local/manual/a"
    saved = load_state(tmp_path / "state" / "state.json")
    assert [notice.id for notice in saved.manual] == ["local/manual/a"]
    agent.state_writer.close()


class Unanswered:
    """A control probe whose requests are never answered."""

    def __init__(self) -> None:
        self.asked = 0

    async def answers(self, timeout: float, token: str | None) -> bool:
        self.asked += 1
        return False


async def test_control_busy_answering_a_request_is_not_rebound(tmp_path: Path) -> None:
    """A notify's or an ack's reply waits for its state to reach the disk: under load (a
    clean-clone CI run) the self-probe's requests went unanswered meanwhile, control was
    taken for dead and rebound, and the waiting ack's reply was dropped (the client sent it
    again). A control in the middle of a request is busy; one answering nothing is dead."""
    agent, _ = _agent_publishing_to_a_recorder(tmp_path)
    rebinds: list[float] = []

    async def restart() -> None:
        rebinds.append(time.monotonic())

    agent._restart_control = restart  # type: ignore[method-assign]
    agent.publisher.handling_since = time.monotonic()  # type: ignore[attr-defined]
    probe = Unanswered()
    task = asyncio.create_task(agent._probe_control_with(probe, 0.01))  # type: ignore[arg-type]
    try:
        await eventually_async(lambda: probe.asked >= 3 * runner.PROBE_FAILURES, what="probes")
        assert rebinds == [] and agent.control_answers
        agent.publisher.handling_since = None  # type: ignore[attr-defined]
        await eventually_async(lambda: rebinds, what="the rebind of a control answering nothing")
        assert not agent.control_answers
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    agent.state_writer.close()


async def test_an_ack_sent_again_counts_once(tmp_path: Path) -> None:
    """A client whose ack went unanswered (its reply waited for a slow disk past the client's
    1 s, or control was rebound) sends the very same ack again: it was counted as a second
    flush in the metrics, the telemetry and the exit margin's window."""
    agent, _ = _agent_publishing_to_a_recorder(tmp_path)
    seen: list[AckRequest] = []

    class Acks(Observer):
        def on_ack(self, ack: AckRequest, notice: Notice | None) -> None:
            seen.append(ack)

    agent.observers.observers.append(Acks())
    agent._emit(Report(id="aws/spot/1", action="drain", reason="manual", provider="aws"))
    ack = {"op": "ack", "notice_id": "aws/spot/1", "client": "rank0", "step": 10}
    for request in (ack | {"flush_seconds": 2.0}, ack | {"flush_seconds": 2.0}):
        assert (await agent._handle(request))["ok"]
    # The next save of the same client is a flush of its own, so is another client's.
    for request in (ack | {"step": 20, "flush_seconds": 2.0}, ack | {"client": "rank1"}):
        assert (await agent._handle(request))["ok"]
    assert [(a.client, a.step) for a in seen] == [("rank0", 10), ("rank0", 20), ("rank1", 10)]
    assert list(agent.board.flushes) == [2.0, 2.0]
    await agent.state_writer.settled()
    agent.state_writer.close()


class ReportsThenCrashes:
    """A watcher without `answered` (as the local one): reports a drain, answers, crashes."""

    name: ClassVar[str] = "local"

    def __init__(self, health: PollHealth) -> None:
        self.health = health

    async def detect(self) -> bool:
        return True

    async def watch(self, emit: Emit) -> None:
        emit(Report(id="local/flag", action="drain", reason="manual", provider="local"))
        self.health.success()
        raise RuntimeError("crashed after its report")


class NeverAnswers:
    """The watcher built next: it has not answered yet (a slow first look)."""

    name: ClassVar[str] = "local"

    async def detect(self) -> bool:
        return True

    async def watch(self, emit: Emit) -> None:
        await asyncio.Event().wait()


async def test_a_rebuilt_watcher_is_not_taken_as_answered_for_its_predecessors_answer(
    tmp_path: Path,
) -> None:
    """The notices held at a crash are withdrawn once the watcher built next has answered.
    A watcher without `answered` was judged by its provider's health, which outlives the
    crash: the predecessor's success made the new watcher answered before it looked, and
    its provider's notices were cleared at the next beat though nothing had withdrawn them."""
    settings = load_settings(
        providers=["local"], runtime_dir=tmp_path / "run", state_dir=tmp_path / "state"
    )
    agent = Agent(settings)
    agent.board = NoticeBoard(Sequencer(), 30.0)
    agent.providers = ["local"]
    sent = Recorder()
    agent._send = lambda notice, escalated: sent.publish(notice)  # type: ignore[method-assign,assignment,misc]
    agent._save_now = lambda: None  # type: ignore[method-assign]
    health = PollHealth("local")
    agent.health = {"local": health}
    agent._emit = lambda report: agent.board.report(report)  # type: ignore[method-assign,assignment,return-value]
    agent.watchers = {"local": ReportsThenCrashes(health)}  # type: ignore[dict-item]
    built: list[NeverAnswers] = []

    def build(name: str, health: PollHealth) -> NeverAnswers:
        built.append(NeverAnswers())
        return built[-1]

    agent._build = build  # type: ignore[method-assign,assignment]
    task = asyncio.create_task(agent._supervise("local", health))
    try:
        await eventually_async(
            lambda: built and agent.watchers.get("local") is built[0], what="the rebuild"
        )
        agent._settle_restored()
        assert [notice.action for notice in sent.sent] == [], (
            "cleared before the new watcher looked"
        )
        assert [notice.id for notice in agent.board.active()] == ["local/flag"]
        health.error("http", "a failed first look")  # a poll, but no answer
        agent._settle_restored()
        assert sent.sent == []
        health.success()  # the new watcher's own answer
        agent._settle_restored()
        assert [(notice.id, notice.action) for notice in sent.sent] == [("local/flag", "clear")]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_re_raise_every_client_acked_already_tells_its_provider(tmp_path: Path) -> None:
    """The last client's ack came between the notice's expiry and its provider's re-raise:
    lost, the provider (Azure's approval) was never told every client had flushed."""
    agent, published = _agent_publishing_to_a_recorder(tmp_path)
    told: list[str] = []

    class Approving:
        name = "aws"

        def flushed(self, notice_id: str) -> None:
            told.append(notice_id)

    agent.watchers["aws"] = Approving()  # type: ignore[assignment]
    now = [datetime(2026, 11, 30, 3, 0, tzinfo=timezone.utc)]
    agent.board.now = lambda: now[0]
    agent.board.grace = timedelta(seconds=60)
    for client in ("rank0", "rank1"):
        agent.board.client_joined(client)
    deadline = now[0] + timedelta(minutes=2)
    spot = Report(id="aws/spot/1", action="terminate", reason="manual", provider="aws")
    spot = spot.model_copy(update={"deadline": deadline})
    agent._emit(spot)
    ack = {"op": "ack", "notice_id": "aws/spot/1", "flush_seconds": 2.0}
    assert (await agent._handle(ack | {"client": "rank0"}))["ok"]
    now[0] += timedelta(minutes=4)
    agent._send_due()  # past its end: the watcher asked, which does not report it in time
    now[0] += timedelta(minutes=1)
    agent._send_due()
    assert published.sent[-1].action == "clear"
    assert (await agent._handle(ack | {"client": "rank1"}))["ok"]
    assert told == []
    agent._emit(spot)
    assert published.sent[-1].action == "terminate"
    assert told == ["aws/spot/1"]
    await agent.state_writer.settled()
    agent.state_writer.close()


async def test_a_watcher_is_told_of_a_retirement_before_its_clear_goes_out(
    tmp_path: Path,
) -> None:
    """A watcher that keeps what the agent retired (Azure's boot record of Started events) must
    have it on disk before a client can see the clear: told after it, an agent SIGKILLed in
    between (a client saw the clear, the record was not written) raised the event anew at its
    restart, a terminate with a new deadline to the job resumed since."""
    agent, published = _agent_publishing_to_a_recorder(tmp_path)
    sent_when_told: list[list[str]] = []

    class Keeping:
        name = "azure"

        def forget(self, notice_id: str) -> None:
            sent_when_told.append([n.action for n in published.sent if n.id == notice_id])

    agent.watchers["azure"] = Keeping()  # type: ignore[assignment]
    now = [datetime(2026, 11, 30, 3, 0, tzinfo=timezone.utc)]
    agent.board.now = lambda: now[0]
    agent.board.grace = timedelta(seconds=60)
    started = Report(id="azure/E-1", action="terminate", reason="eviction", provider="azure")
    agent._emit(started.model_copy(update={"deadline": now[0]}))
    now[0] += timedelta(minutes=2)
    agent._send_due()  # past its end: asked whether Azure still shows it, nothing sent
    assert sent_when_told == [["terminate"]] and published.sent[-1].action == "terminate"
    now[0] += timedelta(minutes=1)  # not reported again within the grace: retired
    agent._send_due()
    assert published.sent[-1].action == "clear"
    assert sent_when_told == [["terminate"], ["terminate"]]  # told before the clear was sent
    await agent.state_writer.settled()
    agent.state_writer.close()


async def test_without_a_boot_id_the_boot_time_saved_is_read_at_each_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a container that cannot read the kernel's boot id, the boot time (now less the
    clock since boot) tells a state file of this boot from one of the boot before. It was
    read once, at the agent's start, and saved with every state: NTP's first sync on a VM
    whose clock was off stepped it by minutes after that, and at the next restart (an
    upgrade) the file read as another boot's, so the provider notices in force (a spot
    terminate, acked already) were not restored and their watchers raised them anew. Read at
    each save, the boot time saved is the one the clock gives now."""
    booted = datetime(2026, 12, 5, 3, 0, tzinfo=timezone.utc)
    readings = iter([booted - timedelta(minutes=5), booted])  # the start's, then a save's
    monkeypatch.setattr(runner, "boot_id", lambda: None)
    monkeypatch.setattr(runner, "machine_started", lambda: next(readings))
    settings = load_settings(
        providers=["local"], runtime_dir=tmp_path / "run", state_dir=tmp_path / "state"
    )
    agent = Agent(settings)
    agent.sequencer = Sequencer()
    agent.board = NoticeBoard(agent.sequencer, 30.0)
    (tmp_path / "state").mkdir()
    agent.state_path.write_bytes(agent._state_bytes())
    saved = load_state(agent.state_path)
    assert saved.boot_id is None and saved.booted == booted
    assert not state_module.another_boot(saved, None, booted)


async def test_without_a_boot_id_a_clock_step_since_the_last_save_is_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state's boot time is read at each save, but nothing is saved while nothing
    changes: NTP's first sync stepped the clock after the last save (a terminate raised,
    acked, then quiet), and a restart then took the file for another boot's, the terminate
    not restored. Where no boot id can be read, a boot time moved since the last save is
    saved at the next heartbeat."""
    booted = [datetime(2026, 12, 5, 3, 0, tzinfo=timezone.utc) - timedelta(minutes=5)]
    monkeypatch.setattr(runner, "boot_id", lambda: None)
    monkeypatch.setattr(runner, "machine_started", lambda: booted[0])
    settings = load_settings(
        providers=["local"], runtime_dir=tmp_path / "run", state_dir=tmp_path / "state"
    )
    agent = Agent(settings)
    agent.sequencer = Sequencer()
    agent.board = NoticeBoard(agent.sequencer, 30.0)
    (tmp_path / "state").mkdir()
    try:
        agent._save()
        await agent.state_writer.settled()
        agent._save_after_a_clock_step()
        await agent.state_writer.settled()
        assert load_state(agent.state_path).booted == booted[0]
        booted[0] += timedelta(minutes=5)  # the clock stepped forward since the save
        agent._save_after_a_clock_step()
        await agent.state_writer.settled()
        assert load_state(agent.state_path).booted == booted[0]
    finally:
        agent.state_writer.close()


_SOON = "2026-11-30T03:12:00.000Z"
_LATER = "2026-11-30T05:12:00.000Z"


@pytest.mark.parametrize(
    ("before", "after", "less"),
    [
        (None, ("terminate", _SOON), False),  # a new notice goes out first
        (("terminate", _SOON), ("drain", _SOON), True),
        (("drain", _SOON), ("terminate", _SOON), False),  # an escalation
        (("drain", _SOON), ("drain", _LATER), True),
        (("drain", _LATER), ("drain", _SOON), False),
        (("terminate", _SOON), ("terminate", None), True),
        (("terminate", None), ("terminate", _SOON), False),
        (("drain", _SOON), ("drain", _SOON), False),  # a detail's change
        (("terminate", _SOON), ("clear", None), True),
    ],
)
def test_what_asks_less_of_jobs_is_saved_before_it_goes_out(
    before: tuple[str, str | None] | None, after: tuple[str, str | None], less: bool
) -> None:
    """`_asks_less` picks the notices written before their publish: a crash between the two
    must not leave on disk a state that asks more than what the jobs were last told."""

    def notice(action: str, deadline: str | None) -> Notice:
        return Notice.model_validate(wire_notice(action=action, deadline=deadline))

    was = notice(*before) if before is not None else None
    assert runner._asks_less(was, notice(*after)) is less


def test_the_board_is_told_the_skew_each_watcher_holds(tmp_path: Path) -> None:
    """The skews the board tells a report made before a step of the wall clock by: each
    watcher's that has read one (`PollHealth.ahead`), none for one that has not."""
    settings = load_settings(
        providers=["local"], runtime_dir=tmp_path / "run", state_dir=tmp_path / "state"
    )
    agent = Agent(settings)
    read, unread = PollHealth("kubernetes"), PollHealth("digitalocean")
    read.ahead = 7200.0
    agent.health = {"kubernetes": read, "digitalocean": unread}
    assert agent._clock_skews() == {"kubernetes": 7200.0}
