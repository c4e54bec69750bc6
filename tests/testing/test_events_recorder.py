"""forewarn.testing's EventRecorder on any run of live notices and replays, fed as received."""

from __future__ import annotations

from typing import Any

from forewarn.testing.events import EventRecorder
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

IDS = ("a", "b", "c")

# One step of an agent's publishing: a live notice of an id (a change, as the agent sends
# none unchanged), a heartbeat (periodic, or one starting a replay to a joining subscriber,
# with or without a token), each replayed notice carrying a skew that may have changed since.
_live = st.tuples(st.just("live"), st.sampled_from(IDS), st.sampled_from(("drain", "clear")))
_beat = st.tuples(st.just("beat"), st.booleans(), st.booleans())
_steps = st.lists(st.one_of(_live, _beat), max_size=30)


def _publish(steps: list[tuple[Any, ...]], skews: list[float]) -> tuple[list[tuple], list[dict]]:
    """(messages as the recorder receives them, the live notices among them)."""
    seq = 0
    versions: dict[str, int] = {}
    active: dict[str, dict[str, Any]] = {}
    messages: list[tuple[str, dict[str, Any]]] = []
    live: list[dict[str, Any]] = []
    skew = iter(skews * 40)
    for step in steps:
        seq += 1
        if step[0] == "live":
            _, notice_id, action = step
            versions[notice_id] = versions.get(notice_id, 0) + 1
            notice = {
                "id": notice_id,
                "action": action,
                "seq": seq,
                "sent_at": f"t{seq}",
                "detail": {"version": versions[notice_id], "clock_ahead_seconds": next(skew)},
            }
            if action == "clear":
                active.pop(notice_id, None)
            else:
                active[notice_id] = notice
            messages.append(("notice", notice))
            live.append(notice)
            continue
        _, replays, token = step
        beat = {"seq": seq, "active": list(active), "replay_for": ["tok"] if token else []}
        messages.append(("heartbeat", beat))
        if not replays:
            continue
        for notice_id, notice in list(active.items()):
            seq += 1
            detail = {**notice["detail"], "clock_ahead_seconds": next(skew)}
            again = {**notice, "seq": seq, "sent_at": f"t{seq}", "detail": detail}
            active[notice_id] = again
            messages.append(("notice", again))
    return messages, live


@settings(max_examples=examples(300), deadline=None)
@given(_steps, st.lists(st.sampled_from((-7200.0, 0.0, 3600.0)), min_size=1, max_size=3))
def test_the_recorder_lists_every_live_notice_and_no_replay(
    steps: list[tuple[Any, ...]], skews: list[float]
) -> None:
    """Whatever the order of changes, heartbeats and replays (with a skew each replay may
    carry anew), the recorder lists exactly the notices sent as news, in order."""
    messages, live = _publish(steps, skews)
    recorder = EventRecorder("ipc:///nonexistent")  # fed by hand: never started
    try:
        for topic, message in messages:
            recorder.record(topic, message)
        assert [n["seq"] for n in recorder.notices] == [n["seq"] for n in live]
    finally:
        recorder.close()


def test_a_replay_to_a_recorder_that_joined_after_a_notice_lists_it() -> None:
    """A notice active before the recorder joined comes only in its replay: it is news."""
    recorder = EventRecorder("ipc:///nonexistent")
    try:
        notice = {"id": "a", "action": "drain", "seq": 8, "detail": {}}
        recorder.record("heartbeat", {"seq": 7, "active": ["a"], "replay_for": []})
        recorder.record("notice", notice)
        assert recorder.notices == [notice]
    finally:
        recorder.close()
