"""The acks each notice keeps, at their bound: the clients nobody waits for (no subscriber
holds their id, no hold names it) are kept up to MAX_STRANGERS_KEPT per notice, and each
heartbeat names the first ACKED_BY_LISTED of them without sorting every id it keeps.

Measured before: at the old bound (8,192 ids of 200 bytes kept per notice, 64 notices) the
ids alone took 156 MiB, past the Kubernetes manifests' 128Mi, and each heartbeat's
`acked_by` took 1.1 s of CPU at load 10."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import zmq
from forewarn.agent import board as board_module
from forewarn.agent.board import ANONYMOUS, NoticeBoard, Sequencer
from forewarn.agent.limits import ACKED_BY_LISTED
from forewarn.agent.protocol import Report
from forewarn.agent.runner import Agent
from hypothesis import given, settings
from hypothesis import strategies as st
from support import AgentProcess, Subscriber, eventually, examples, run_forewarn, with_token

# The bound under test (the old one kept 8,192 of them).
STRANGERS = getattr(board_module, "MAX_STRANGERS_KEPT", 256)


def _report(n: int) -> Report:
    return Report.model_validate(
        {"id": f"local/n{n}", "action": "drain", "reason": "manual", "provider": "local"}
    )


def _acked_by(b: NoticeBoard) -> dict[str, list[str]]:
    """The heartbeat's `acked_by`, as the runner makes it (it reads only its board)."""
    return Agent._acked_by(SimpleNamespace(board=b))  # type: ignore[arg-type]


def _client(n: int, notice: int = 0) -> str:
    return f"script-{notice:02d}-{n:06d}-".ljust(200, "x")  # 200 bytes, as the bound allows


def test_acks_of_ids_nobody_waits_for_are_kept_up_to_the_bound_and_a_job_s_always() -> None:
    b = NoticeBoard(Sequencer(0), 30.0)
    b.client_joined("job")
    notice = b.report(_report(0))
    assert notice is not None
    assert b.hold(notice.id, "loop")
    for n in range(STRANGERS + 500):
        assert not b.record_ack(notice.id, _client(n), 1.0)
    kept = b.acked_by()[notice.id]
    assert len(kept) == STRANGERS, len(kept)
    assert not b.record_ack(notice.id, "loop", 1.0)  # a hold's ack: waited for, kept
    assert b.record_ack(notice.id, "job", 1.0)  # a subscriber's: kept, completes the notice
    assert {"job", "loop"} <= b.acked_by()[notice.id]
    assert b.acked_to_save()[notice.id][:2] == ["job", "loop"]


def test_one_heartbeat_s_acked_by_at_the_bound_takes_little_cpu() -> None:
    """64 notices, each acked by as many 200-byte ids as the board keeps of 8,192 sent."""
    b = NoticeBoard(Sequencer(0), 30.0)
    for notice in range(64):
        b.report(_report(notice))
        for n in range(8192):
            b.record_ack(f"local/n{notice}", _client(n, notice), 1.0)
    started = time.process_time()
    listed = _acked_by(b)
    took = time.process_time() - started
    assert len(listed) == 64
    assert all(len(clients) == ACKED_BY_LISTED for clients in listed.values())
    assert listed["local/n0"] == [_client(n) for n in range(ACKED_BY_LISTED)]
    assert took < 0.02, f"one heartbeat's acked_by took {took:.3f} s of CPU"


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["ack", "anonymous", "join", "hold", "restamp"]),
            st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "h", "\u00e9t\u00e9", "a0"]),
        ),
        max_size=60,
    ),
    st.integers(min_value=1, max_value=4),
)
def test_the_kept_set_and_its_listed_first_clients_follow_every_change(
    steps: list[tuple[str, str]], bound: int
) -> None:
    """Whatever the order of joins, holds, acks and a change of action: every ack of a
    client waited for (a subscriber, a hold) is kept, at most `bound` others are, and the
    listed clients are always the first ACKED_BY_LISTED of the kept ones, sorted."""
    original = STRANGERS
    board_module.MAX_STRANGERS_KEPT = bound  # type: ignore[attr-defined]
    try:
        b = NoticeBoard(Sequencer(0), 30.0)
        notice = b.report(_report(0))
        assert notice is not None
        waited: set[str] = set()
        for op, client in steps:
            if op == "join":
                b.client_joined(client)
            elif op == "hold":
                b.hold(notice.id, client)
            elif op == "ack":
                waited_for = client in b.clients or client in b.entries[notice.id].expected
                b.record_ack(notice.id, client, 1.0)
                if waited_for:
                    waited.add(client)
            elif op == "anonymous":
                b.record_ack(notice.id, None, 1.0)
            else:
                b.entries[notice.id].notice = b.entries[notice.id].notice.model_copy(
                    update={"action": "terminate"}
                )
                b._restamp(b.entries[notice.id], "drain")
                waited = set()
            kept = b.acked_by().get(notice.id, set())
            assert waited <= kept
            entry = b.entries[notice.id]
            strangers = kept - waited - {ANONYMOUS} - b.clients - entry.expected
            assert len(strangers) <= bound
            named = sorted(kept - {ANONYMOUS})
            assert _acked_by(b).get(notice.id, []) == named[:ACKED_BY_LISTED]
    finally:
        board_module.MAX_STRANGERS_KEPT = original  # type: ignore[attr-defined]


def _pipelined(agent: AgentProcess, acks: list[dict[str, Any]]) -> None:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVTIMEO, 30_000)
    sock.connect(agent.control_endpoint)
    try:
        for ack in acks:
            body = with_token(agent.control_endpoint, ack, agent.runtime)
            sock.send_multipart([b"", json.dumps(body).encode()])
        for _ in acks:
            assert json.loads(sock.recv_multipart()[-1])["ok"]
    finally:
        sock.close()


def test_an_agent_keeps_the_bound_answers_every_ack_and_a_late_loop_s_wait_passes_by(
    tmp_path: Path,
) -> None:
    """A real agent fed acks of ids nobody waits for over its control socket: every one is
    answered; past the bound they are not kept (the flush counts the kept ones), a
    subscriber's ack still completes the notice, and `wait --client` of a loop whose ack
    came past the bound does not take the drain it saved for as a new one."""
    with (
        AgentProcess(tmp_path) as agent,
        Subscriber(agent.events, ("notice", "client/job")).ready() as job,
    ):
        notice_id = agent.control({"op": "notify", "action": "drain", "id": "local/flooded"})[
            "notice"
        ]["id"]
        assert job.notice()["id"] == notice_id
        acks = [
            {"op": "ack", "notice_id": notice_id, "client": _client(n), "flush_seconds": 0.1}
            for n in range(STRANGERS + 300)
        ]
        acks.append({"op": "ack", "notice_id": notice_id, "client": "late-loop"})
        _pipelined(agent, acks)
        status = agent.control({"op": "status"})
        assert len(status["acked_by"][notice_id]) == ACKED_BY_LISTED
        assert agent.control({"op": "ack", "notice_id": notice_id, "client": "job"})["ok"]
        flushed = f"notice {notice_id} flushed by every client ("
        line = eventually(
            lambda: next((ln for ln in agent.output().splitlines() if flushed in ln), None),
            what="the flush's log line",
        )
        assert line.endswith(f"({STRANGERS + 1})"), line
        waited = run_forewarn(
            "wait", "--for", "drain", "--client", "late-loop", "--timeout", "3s", env=agent.env
        )
        assert waited.returncode == 1, (waited.returncode, waited.stdout, waited.stderr)
        assert "no drain within" in waited.stderr, waited.stderr


def test_holds_of_a_notice_are_kept_up_to_their_bound() -> None:
    """A hold makes its client one the notice waits for (its ack always kept): unbounded up
    to 8,192 per notice, holds of 200-byte ids took the place of the acks bounded above."""
    bound = getattr(board_module, "MAX_HELD", 256)
    b = NoticeBoard(Sequencer(0), 30.0)
    notice = b.report(_report(0))
    assert notice is not None
    held = sum(b.hold(notice.id, _client(n)) for n in range(bound + 100))
    assert held == bound
    assert len(b.held_by()[notice.id]) == bound


def test_failed_saves_of_ids_nobody_waits_for_are_kept_up_to_the_bound() -> None:
    """A failed save keeps its client and a note of up to 500 characters: kept up to 8,192 per
    notice whoever sent them, a flood of them outweighed the acks bounded above."""
    b = NoticeBoard(Sequencer(0), 30.0)
    b.client_joined("job")
    notice = b.report(_report(0))
    assert notice is not None
    for n in range(STRANGERS + 100):
        b.record_failure(notice.id, _client(n), "disk full " * 50)
    assert b.record_failure(notice.id, "job", "disk full")  # waited for: always kept
    assert len(b.entries[notice.id].failed) == STRANGERS + 1


def test_subscribers_acks_of_every_notice_share_one_copy_of_each_id() -> None:
    """Every subscriber's ack is kept (the notice waits for it), each arriving as a new string
    decoded from its message. Measured before: 4,096 subscribers of 200-byte ids acking 64
    notices kept 64 copies of each id, +65 MiB (past the manifests' 128Mi with the rest);
    here a quarter of them (+16 MiB before)."""
    import tracemalloc

    b = NoticeBoard(Sequencer(0), 30.0)
    subscribers = [_client(n) for n in range(1024)]
    for client in subscribers:
        b.client_joined(client)
    notices = [b.report(_report(n)) for n in range(64)]
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for notice in notices:
            assert notice is not None
            for client in subscribers:
                b.record_ack(notice.id, json.loads(json.dumps(client)), 1.0)  # off the wire
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert all(b.acks_kept(f"local/n{n}") == 1024 for n in range(64))
    grew = (after - before) / 2**20
    assert grew < 6, f"64 notices' acks of 1,024 subscribers took {grew:.1f} MiB"
