"""`Notices.replayed`: whether the agent's replay to this socket has all been read, as the
guard asks before it saves for a drain read from it (see test_guard_standing_replay)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from forewarn.clients import Notices
from forewarn.clients.event import Event
from hypothesis import given, settings
from hypothesis import strategies as st
from support import eventually, examples
from test_notices import FakeAgent

IDS = [f"aws/n{i}" for i in range(5)]


@settings(max_examples=examples(60), deadline=None)
@given(
    listed=st.lists(st.sampled_from(IDS), unique=True, max_size=4),
    sent=st.permutations(IDS).flatmap(lambda ids: st.integers(0, len(ids)).map(lambda n: ids[:n])),
    answers=st.sampled_from(["token", "older", "other"]),
)
def test_replayed_once_every_notice_the_answering_heartbeat_listed_was_read(
    listed: list[str], sent: list[str], answers: str
) -> None:
    """The heartbeat naming the token lists what follows: `replayed` is false until each of
    those was read (notices it did not list change nothing), true at once with an agent too
    old to name the token, never true from a heartbeat naming another socket's token; any
    later heartbeat of an agent that answered ends the wait."""
    with tempfile.TemporaryDirectory(prefix="fw-replayed-") as directory:
        agent = FakeAgent(Path(directory))
        notices = Notices(agent.endpoint, agent.control, heartbeat_timeout=5.0)
        seen: list[tuple[str, bool]] = []

        def heard(event: Event) -> None:
            seen.append((event.id, notices.replayed))

        notices.add_listener(heard)
        try:
            agent.subscribed()
            assert not notices.replayed
            fields: dict[str, object] = {"active": listed}
            if answers == "token":
                fields["replay_for"] = [agent.token]
            elif answers == "other":
                fields["replay_for"] = ["someone-else"]
            agent.beat(**fields)
            for notice_id in sent:
                agent.notice(notice_id, "drain")
            eventually(lambda: len(seen) == len(sent), 10, "every notice read")
            read: set[str] = set()
            for notice_id, replayed in seen:
                read.add(notice_id)
                if answers == "token":
                    assert replayed == (set(listed) <= read), (seen, listed)
                else:
                    assert replayed == (answers == "older"), (seen, answers)
            # The next heartbeat: the wait for this agent's answer is over, or still on.
            # (A current agent's heartbeats all carry `replay_for`, most of them empty.)
            agent.beat(**{**fields, "replay_for": []} if answers != "older" else fields)
            agent.notice("aws/after", "drain")
            eventually(lambda: seen and seen[-1][0] == "aws/after", 10, "the later notice")
            assert seen[-1][1] == (answers != "other"), (seen, answers)
        finally:
            notices.close()
            agent.close()
