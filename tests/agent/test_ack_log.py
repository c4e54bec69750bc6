"""The agent's log of an ack, as an operator reads it after a lost step: the ack's own line
first, then the notice flushed, counting the clients that acked it, with figures as a person
writes them."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import zmq
from forewarn.agent.runner import _secs
from forewarn.protocol.timefmt import format_time
from hypothesis import given
from hypothesis import strategies as st
from support import AgentProcess, Subscriber, eventually, with_token


def test_a_held_clients_ack_is_logged_before_the_flush_it_completes(tmp_path: Path) -> None:
    """A shell job's hold (`forewarn wait --client loop`), no library client subscribed: the
    agent logged "flushed by every client (0)" (the subscribers, not the clients that acked)
    before the ack that flushed it, and the flush as `flush=1.1420532060001278s`."""
    with (
        AgentProcess(tmp_path) as agent,
        Subscriber(agent.events, ("notice",)).ready() as watcher,
    ):
        (agent.runtime / "checkpoint-now").write_text("")
        drain = watcher.notice(timeout=5)
        hold = {"op": "hold", "notice_id": drain["id"], "client": "loop", "pid": None}
        assert agent.control(hold)["held"] is True
        ack = {
            "op": "ack",
            "notice_id": drain["id"],
            "client": "loop",
            "flush_seconds": 1.1420532060001278,
        }
        assert agent.control(ack)["ok"]
        flushed = f"notice {drain['id']} flushed by every client"
        eventually(lambda: flushed in agent.output(), what="the flush's log line")
        lines = agent.output().splitlines()
        (acked,) = [n for n, line in enumerate(lines) if f"ack {drain['id']} from loop" in line]
        (done,) = [n for n, line in enumerate(lines) if flushed in line]
        assert acked < done, lines[min(acked, done) : max(acked, done) + 1]
        assert "flush=1.142s outcome=saved" in lines[acked], lines[acked]
        assert lines[done].endswith(f"{flushed} (1)"), lines[done]


def test_a_flush_completed_by_a_client_leaving_unacked_says_so(tmp_path: Path) -> None:
    """A terminate received by `trainer` and `saver`; `saver` acked, `trainer` never did and
    left after the deadline (killed by the platform). The agent logged "notice ... flushed by
    every client (1)" as the trainer left, which reads as if every job had saved: the line now
    says the flush is of the clients left, and names the one that left without its ack."""
    args = ("--exit-margin", "1s", "--set", "notice_grace=60")
    with (
        AgentProcess(tmp_path, args=args) as agent,
        Subscriber(agent.events, ("notice", "client/saver")).ready() as saver,
    ):
        trainer = Subscriber(agent.events, ("notice", "client/trainer")).ready()
        deadline = datetime.now(timezone.utc) + timedelta(seconds=2)
        request = {"op": "notify", "action": "terminate", "deadline": format_time(deadline)}
        notice_id = agent.control(request)["notice"]["id"]
        assert trainer.notice()["id"] == notice_id and saver.notice()["id"] == notice_id
        ack = {"op": "ack", "notice_id": notice_id, "client": "saver", "flush_seconds": 0.1}
        assert agent.control(ack)["ok"]
        eventually(
            lambda: f"notice {notice_id}: its deadline" in agent.output(),
            10,
            "the warning at the deadline",
        )
        trainer.close()  # killed at the deadline, never acked
        flushed = f"notice {notice_id} flushed by every client"
        line = eventually(
            lambda: next((ln for ln in agent.output().splitlines() if flushed in ln), None),
            10,
            "the flush as the trainer left",
        )
        assert line.endswith(f"{flushed} left (1 acked; trainer left without its ack)"), line


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_an_acks_figure_is_at_most_a_millisecond_off_and_short(seconds: float) -> None:
    shown = _secs(seconds)
    assert shown.endswith("s")
    assert abs(float(shown[:-1]) - seconds) <= 0.0005 + 1e-9 * seconds
    assert len(shown[:-1].split(".")[1]) <= 3, shown


def test_an_ack_flood_is_logged_in_bounded_lines_and_each_notices_first_ack_in_full(
    tmp_path: Path,
) -> None:
    """A client pipelining acks (a DEALER with the REQ envelope, each ack a new step) had
    every one logged at INFO: 3,000 acks, 3,000 lines, at up to 8,000 a second, enough for
    journald's rate limit to drop other lines. Now at most ACK_LOG_BURST at once and
    ACK_LOG_RATE a second, with a line counting the others; the first ack of each notice
    is logged whatever came before it."""
    from forewarn.agent.runner import ACK_LOG_BURST, ACK_LOG_RATE

    acks = 3_000
    with AgentProcess(tmp_path) as agent:
        first = agent.control({"op": "notify", "action": "drain", "id": "local/flooded"})
        flooded = first["notice"]["id"]
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVTIMEO, 30_000)
        sock.connect(agent.control_endpoint)
        started = time.monotonic()
        try:
            for step in range(acks):
                ack = {"op": "ack", "notice_id": flooded, "client": "flood", "step": step}
                body = with_token(agent.control_endpoint, ack, agent.runtime)
                sock.send_multipart([b"", json.dumps(body).encode()])
            for _ in range(acks):
                assert json.loads(sock.recv_multipart()[-1])["ok"]
        finally:
            sock.close()
        took = time.monotonic() - started
        # A notice raised after the flood: its first ack is logged, budget or not.
        second = agent.control({"op": "notify", "action": "drain", "id": "local/after"})
        after = second["notice"]["id"]
        ack = {"op": "ack", "notice_id": after, "client": "job", "step": 7}
        assert agent.control(ack)["ok"]
        eventually(lambda: f"ack {after} from job" in agent.output(), what="the ack's line")
        logged = [line for line in agent.output().splitlines() if f"ack {flooded} from" in line]
        assert len(logged) <= ACK_LOG_BURST + ACK_LOG_RATE * (took + 2), (len(logged), took)
        assert "step=0 " in logged[0], logged[0]

        def accounted() -> tuple[int, int]:
            lines = agent.output().splitlines()
            held = sum(
                int(line.split(" ack line(s) not logged")[0].split()[-1])
                for line in lines
                if "ack line(s) not logged" in line
            )
            return held, len([line for line in lines if f"ack {flooded} from flood" in line])

        # Every ack not logged is counted, in a line at the next heartbeat.
        eventually(lambda: sum(accounted()) == acks, what=f"{acks} acks accounted for")
