"""A notice dropped on the way to `forewarn wait` or `forewarn watch` (a script stopped for hours
by SIGSTOP or a scheduler's suspend fills the high-water marks with heartbeats) is listed by
the heartbeats that follow: listed for half a second, the command subscribes to `notice`
again, which makes the agent replay, as the client library and the C subscriber do. A change
of a notice it has (a drain escalated to terminate) dropped so shows as a gap in the agent's
`seq`, which numbers every message, and is asked for again too."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support import eventually, forewarn_cmd


def _notice(notice_id: str, action: str, seq: int = 1) -> bytes:
    body = {"v": 1, "id": notice_id, "seq": seq, "action": action, "reason": "manual"}
    body |= {"provider": "local", "deadline": None, "detail": {}}
    body |= {"noticed_at": "2026-11-30T03:10:00Z", "sent_at": "2026-11-30T03:10:00Z"}
    return json.dumps(body).encode()


class _Agent:
    """An XPUB as the agent binds it (verbose: every subscription reaches it)."""

    def __init__(self, endpoint: str) -> None:
        import zmq

        self.context = zmq.Context()
        self.xpub = self.context.socket(zmq.XPUB)
        self.xpub.setsockopt(zmq.LINGER, 0)
        self.xpub.setsockopt(zmq.XPUB_VERBOSE, 1)
        self.xpub.bind(endpoint)
        self.subscriptions: list[bytes] = []

    def subscribed(self, topic: bytes) -> int:
        while self.xpub.poll(0):
            self.subscriptions.append(self.xpub.recv())
        return self.subscriptions.count(b"\x01" + topic)

    def tokens(self) -> list[str]:
        """The tokens of the `replay/<token>` subscriptions read so far."""
        self.subscribed(b"")
        prefix = b"\x01replay/"
        return [s[len(prefix) :].decode() for s in self.subscriptions if s.startswith(prefix)]

    def beat(
        self,
        *active: str,
        seq: int = 2,
        agent: str = "host/1/a",
        replay_for: list[str] | None = None,
    ) -> None:
        """A heartbeat; with `replay_for`, an agent's that names the replays it starts (an
        older agent's has none)."""
        body = {"v": 1, "seq": seq, "agent": agent, "active": list(active), "acked": []}
        body["sent_at"] = "2026-11-30T03:10:00Z"
        if replay_for is not None:
            body["replay_for"] = replay_for
        self.xpub.send_multipart([b"heartbeat", json.dumps(body).encode()])

    def send(self, notice_id: str, action: str, seq: int = 1) -> None:
        self.xpub.send_multipart([b"notice", _notice(notice_id, action, seq)])

    def close(self) -> None:
        self.xpub.close()
        self.context.term()


@contextmanager
def _command(tmp_path: Path, *args: str) -> Iterator[tuple[_Agent, subprocess.Popen[str]]]:
    endpoint = f"ipc://{tmp_path}/events"
    agent = _Agent(endpoint)
    cmd = subprocess.Popen(
        forewarn_cmd(*args, "--events", endpoint, "--agent-timeout", "0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", "FOREWARN_RUNTIME_DIR": str(tmp_path)},
    )
    try:
        eventually(lambda: agent.subscribed(b"notice") == 1, what="subscribed", timeout=30)
        yield agent, cmd
    finally:
        if cmd.poll() is None:
            cmd.kill()
            cmd.wait(10)
        agent.close()


@pytest.mark.parametrize(
    "args", [("wait", "--for", "terminate", "--json"), ("watch", "--json", "--count", "3")]
)
def test_a_notice_the_heartbeats_list_but_that_never_arrived_is_asked_for_again(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    # `forewarn wait --for terminate && kill "$JOB"` in a job resumed after a long suspend
    # read heartbeats listing the terminate and waited on: the job was never stopped.
    with _command(tmp_path, *args) as (agent, cmd):
        agent.send("local/got", "drain")
        agent.beat("local/got")
        agent.beat("local/got", "local/lost")
        assert agent.subscribed(b"notice") == 1, "asked again after one heartbeat"

        def asked_again() -> bool:
            agent.beat("local/got", "local/lost")
            return agent.subscribed(b"notice") == 2

        eventually(asked_again, what="a second subscription to notice", interval=0.2)
        agent.send("local/got", "drain")  # the replay: every active notice
        agent.send("local/lost", "terminate")
        out, err = cmd.communicate(timeout=15)
    assert cmd.returncode == 0, err
    printed: list[dict[str, Any]] = [json.loads(line) for line in out.splitlines()]
    assert printed[-1]["id"] == "local/lost" and printed[-1]["action"] == "terminate"
    if args[0] == "watch":
        # Missed here while it listened: news, not a replay.
        assert [(n["id"], n["replay"]) for n in printed] == [
            ("local/got", False),
            ("local/got", True),
            ("local/lost", False),
        ]
    asked = [line for line in err.splitlines() if "never received here" in line]
    assert len(asked) == 1 and "local/lost" in asked[0], err


def test_a_regular_heartbeat_just_before_a_replay_is_no_loss(tmp_path: Path) -> None:
    # A heartbeat can go out between a new subscription's arrival and its replay, whose own
    # heartbeat then lists the active notice a second time before the notice comes: taken
    # for a loss, it asked for a second replay, said so, and `--count` counted that replay.
    with _command(tmp_path, "watch", "--json", "--count", "2") as (agent, cmd):
        agent.beat("local/active")
        agent.beat("local/active")  # the replay's heartbeat, then the replay
        agent.send("local/active", "drain")
        ticks = [0]

        def beaten_for_a_while() -> bool:
            agent.beat("local/active")
            ticks[0] += 1
            return ticks[0] >= 8

        eventually(beaten_for_a_while, what="heartbeats for over a second", interval=0.2)
        agent.send("local/new", "terminate")
        out, err = cmd.communicate(timeout=15)
        assert agent.subscribed(b"notice") == 1, "asked for a replay it had"
    assert cmd.returncode == 0, err
    printed = [json.loads(line) for line in out.splitlines()]
    assert [(n["id"], n["replay"]) for n in printed] == [
        ("local/active", True),
        ("local/new", False),
    ]
    assert "never received here" not in err, err


def test_a_join_replay_slow_to_come_is_still_a_replay(tmp_path: Path) -> None:
    # An agent slow to read subscriptions (a loaded machine) sent its regular heartbeats,
    # listing a notice in force since before `watch` started, for over half a second before
    # the replay: the watcher asked again, as for a loss, and printed the replay as news,
    # without `[replay]`, so a person read a drain standing for an hour as one just raised.
    with _command(tmp_path, "watch", "--json", "--count", "2") as (agent, cmd):

        def asked_again() -> bool:
            agent.beat("local/active")
            return agent.subscribed(b"notice") == 2

        eventually(asked_again, what="a second subscription to notice", interval=0.2)
        agent.send("local/active", "drain")  # the replay, at last
        agent.send("local/new", "terminate")
        out, err = cmd.communicate(timeout=15)
    assert cmd.returncode == 0, err
    printed = [json.loads(line) for line in out.splitlines()]
    assert [(n["id"], n["replay"]) for n in printed] == [
        ("local/active", True),
        ("local/new", False),
    ]


@pytest.mark.parametrize(
    "args", [("wait", "--for", "terminate", "--json"), ("watch", "--json", "--count", "1")]
)
def test_a_join_replay_the_agent_has_not_sent_yet_is_not_taken_for_a_loss(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    # An agent slow to read subscriptions (a loaded machine) beat for seconds listing a
    # notice in force since before the command started: `watch` said on stderr that it was
    # "never received here" and asked for a replay, which was only late. An agent whose
    # heartbeats carry `replay_for` names the command's token in the heartbeat of its replay.
    with _command(tmp_path, *args) as (agent, cmd):
        eventually(lambda: len(agent.tokens()) == 1, what="a replay/<token> subscription")
        ticks = [0]

        def beaten_for_a_while() -> bool:
            agent.beat("local/standing", seq=10 + ticks[0], replay_for=[])
            ticks[0] += 1
            return ticks[0] >= 8

        eventually(beaten_for_a_while, what="heartbeats for over a second", interval=0.2)
        assert agent.subscribed(b"notice") == 1, "asked for a replay that was only late"
        seq = 10 + ticks[0]
        agent.beat("local/standing", seq=seq, replay_for=["someone-else", agent.tokens()[0]])
        agent.send("local/standing", "terminate", seq=seq + 1)
        out, err = cmd.communicate(timeout=15)
        assert agent.subscribed(b"notice") == 1, "asked for a replay that was only late"
    assert cmd.returncode == 0, err
    printed = [json.loads(line) for line in out.splitlines()]
    assert [n["id"] for n in printed] == ["local/standing"]
    if args[0] == "watch":
        assert printed[0]["replay"] is True  # in force before it joined
    assert "never received here" not in err, err


@pytest.mark.parametrize(
    "args", [("wait", "--for", "terminate", "--json"), ("watch", "--json", "--count", "2")]
)
def test_a_change_dropped_on_the_way_shows_as_a_gap_in_seq_and_is_asked_for_again(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    # `forewarn wait --for terminate && kill "$JOB"` suspended past the high-water marks: the
    # drain it had was escalated to terminate meanwhile, and that was dropped. The heartbeats
    # list the same id, received (as a drain): nothing was missing, and it waited on while the
    # agent sent terminate.
    with _command(tmp_path, *args) as (agent, cmd):
        agent.beat("local/slow", seq=10)
        agent.send("local/slow", "drain", seq=11)
        agent.beat("local/slow", seq=12)
        agent.beat("local/slow", seq=13)
        assert agent.subscribed(b"notice") == 1, "a replay asked for with no gap"
        agent.beat("local/slow", seq=20)  # 14 to 19 never arrived
        eventually(lambda: agent.subscribed(b"notice") == 2, what="a second subscription")
        agent.send("local/slow", "terminate", seq=21)  # the replay
        out, err = cmd.communicate(timeout=15)
    assert cmd.returncode == 0, err
    printed = [json.loads(line) for line in out.splitlines()]
    assert printed[-1]["action"] == "terminate"
    gap = [line for line in err.splitlines() if "never arrived" in line]
    assert len(gap) == 1 and "seq 14 to 19" in gap[0], err


def test_a_restarted_agent_s_first_seq_is_no_gap(tmp_path: Path) -> None:
    """A restarted agent's numbers go on from its reserved mark, past the last one sent. It
    replays what it lists to the client that reconnects, before or after its first heartbeat."""
    with _command(tmp_path, "watch", "--json", "--count", "3") as (agent, cmd):
        agent.beat(seq=10)
        agent.send("local/a", "drain", seq=11)
        agent.send("local/a", "drain", seq=499)
        agent.beat("local/a", seq=500, agent="host/2/b")
        agent.beat("local/a", seq=501, agent="host/2/b")
        agent.send("local/b", "drain", seq=502)
        out, err = cmd.communicate(timeout=15)
        assert agent.subscribed(b"notice") == 1, "asked for a replay after a restart"
    assert cmd.returncode == 0, err
    printed = [(n["id"], n["replay"]) for n in map(json.loads, out.splitlines())]
    assert printed == [("local/a", False), ("local/a", True), ("local/b", False)]
    assert "never arrived" not in err, err


def test_a_restarted_agent_s_replay_slow_to_come_is_not_taken_for_lost(tmp_path: Path) -> None:
    # A restarted agent slow to read the reconnected socket's subscriptions beat twice
    # before its replay: at the second heartbeat `watch` said "the restarted agent ... lists
    # local/a, whose replay never arrived here" and asked for another replay. An agent with
    # `replay_for` names the socket's token (subscribed again at the reconnection) in the
    # heartbeat of that replay; the check waits for it.
    with _command(tmp_path, "watch", "--json", "--count", "3") as (agent, cmd):
        eventually(lambda: len(agent.tokens()) == 1, what="a replay/<token> subscription")
        token = agent.tokens()[0]
        agent.beat(seq=10, replay_for=[token])
        agent.send("local/a", "drain", seq=11)
        agent.beat("local/a", seq=12, replay_for=[])
        for seq in range(500, 506):  # restarted; not answered yet
            agent.beat("local/a", seq=seq, agent="host/2/b", replay_for=[])
        agent.beat("local/a", seq=506, agent="host/2/b", replay_for=[token])
        agent.send("local/a", "drain", seq=507)
        agent.beat("local/a", seq=508, agent="host/2/b", replay_for=[])
        agent.send("local/b", "drain", seq=509)
        out, err = cmd.communicate(timeout=15)
        assert agent.subscribed(b"notice") == 1, "asked for a replay that was only late"
    assert cmd.returncode == 0, err
    printed = [(n["id"], n["replay"]) for n in map(json.loads, out.splitlines())]
    assert printed == [("local/a", False), ("local/a", True), ("local/b", False)]
    assert "never arrived" not in err, err
