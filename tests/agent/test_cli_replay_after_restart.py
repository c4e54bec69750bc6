"""`forewarn watch` and `wait` ask a restarted agent again for what its replay lost."""

from __future__ import annotations

from typing import Any

from forewarn.agent.cli import _Unreceived

NOTICE = {"id": "aws/spot/a", "reason": "spot-interruption", "deadline": None, "detail": {}}


class Socket:
    """What `_Unreceived` does with the events socket: subscribe to `notice` again."""

    def __init__(self) -> None:
        self.subscribed: list[bytes] = []

    def setsockopt(self, option: int, value: bytes) -> None:
        self.subscribed.append(value)


def beat(agent: str, seq: int, active: list[str]) -> dict[str, Any]:
    return {"agent": agent, "seq": seq, "active": active}


def test_an_escalation_lost_with_a_restarted_agents_replay_of_it_is_asked_for() -> None:
    """The drain arrived; its escalation to terminate was dropped (the script stopped by
    SIGSTOP), the agent restarted, and its replay of the terminate was dropped too. Its first
    heartbeat wiped the gap and its heartbeats list the id received: `wait --for terminate`
    waited on under a terminate."""
    sock, unreceived = Socket(), _Unreceived("wait", "ipc:///nowhere/events", "token-0")
    assert not unreceived.heartbeat(beat("node/1/a", 1, []), sock)
    unreceived.notice({**NOTICE, "seq": 2, "action": "drain"})
    # seq 3, the terminate: dropped. The new agent's replay of it, 100001: dropped too.
    unreceived.heartbeat(beat("node/2/b", 100_002, ["aws/spot/a"]), sock)
    unreceived.heartbeat(beat("node/2/b", 100_003, ["aws/spot/a"]), sock)
    assert sock.subscribed == [b"notice"]


def test_a_restarted_agents_replay_after_its_first_heartbeat_asks_nothing() -> None:
    sock, unreceived = Socket(), _Unreceived("wait", "ipc:///nowhere/events", "token-0")
    unreceived.heartbeat(beat("node/1/a", 1, []), sock)
    unreceived.notice({**NOTICE, "seq": 2, "action": "drain"})
    unreceived.heartbeat(beat("node/2/b", 100_001, ["aws/spot/a"]), sock)
    unreceived.notice({**NOTICE, "seq": 100_002, "action": "terminate"})
    unreceived.heartbeat(beat("node/2/b", 100_003, ["aws/spot/a"]), sock)
    unreceived.notice({**NOTICE, "seq": 100_004, "action": "terminate"})
    unreceived.heartbeat(beat("node/2/b", 100_005, ["aws/spot/a"]), sock)
    assert sock.subscribed == []


def test_a_second_gap_before_a_restarted_agents_first_heartbeat_is_asked_for() -> None:
    """The jump to its mark is no gap; one after its replay (its escalation) is."""
    sock, unreceived = Socket(), _Unreceived("wait", "ipc:///nowhere/events", "token-0")
    unreceived.heartbeat(beat("node/1/a", 1, []), sock)
    unreceived.notice({**NOTICE, "seq": 2, "action": "drain"})
    unreceived.notice({**NOTICE, "seq": 100_001, "action": "drain"})
    # 100002, its escalation: dropped.
    unreceived.heartbeat(beat("node/2/b", 100_003, ["aws/spot/a"]), sock)
    assert sock.subscribed == [b"notice"]


def test_a_message_lost_before_the_first_heartbeat_read_is_asked_for() -> None:
    """The first messages read may be notices: one lost between them and the first heartbeat
    read left no gap, since that heartbeat's `seq` was not compared with them."""
    sock, unreceived = Socket(), _Unreceived("wait", "ipc:///nowhere/events", "token-0")
    unreceived.notice({**NOTICE, "seq": 5, "action": "drain"})
    # seq 6, its escalation to terminate: dropped.
    unreceived.heartbeat(beat("node/1/a", 7, ["aws/spot/a"]), sock)
    assert sock.subscribed == [b"notice"]


def test_the_notices_a_join_replay_s_heartbeat_lists_are_not_missed_at_that_heartbeat(
    monkeypatch: Any,
) -> None:
    """The heartbeats of an agent slow to read subscriptions listed a drain for seconds; the
    heartbeat naming the token came a second after the last of them, and `wait` took the
    drain for missed at that heartbeat, before the replay that follows it: "never received
    here" (seen with an agent whose replay was held 1.5 s, test_shell_job_loops)."""
    import forewarn.agent.cli as cli

    clock = [100.0]
    monkeypatch.setattr(cli.time, "monotonic", lambda: clock[0])
    sock, unreceived = Socket(), _Unreceived("wait", "ipc:///nowhere/events", "token-0")
    for seq in (1, 2):
        unreceived.heartbeat({**beat("node/1/a", seq, ["aws/spot/a"]), "replay_for": []}, sock)
        clock[0] += 1.0
    assert not unreceived.heartbeat(
        {**beat("node/1/a", 3, ["aws/spot/a"]), "replay_for": ["token-0"]}, sock
    )
    unreceived.notice({**NOTICE, "seq": 4, "action": "drain"})  # the replay
    clock[0] += 1.0
    assert not unreceived.heartbeat({**beat("node/1/a", 5, ["aws/spot/a"]), "replay_for": []}, sock)
    assert sock.subscribed == []
