"""`WaitRule`, what `forewarn wait` returns on, from the notices and heartbeats it reads:
the cases the agent cannot easily be made to send, and any sequence of them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from forewarn.agent import waitrule
from forewarn.agent.waitrule import WaitRule
from forewarn.protocol.timefmt import format_time
from hypothesis import given
from hypothesis import strategies as st

STARTED = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc)


def _notice(notice_id: str, action: str, *, before: bool, deadline: str | None) -> dict[str, Any]:
    noticed = STARTED + timedelta(seconds=-60 if before else 60)
    return {"id": notice_id, "action": action, "noticed_at": format_time(noticed)} | (
        {"deadline": deadline}
    )


def _rule(accepted: tuple[str, ...] = ("terminate",)) -> tuple[WaitRule, list[str]]:
    said: list[str] = []
    return WaitRule(accepted, started=STARTED, exit_margin=30.0, say=said.append), said


def test_a_replayed_notice_no_heartbeat_settles_is_returned_after_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An agent too old to send `acked`: where the library lets the job train on, `wait`
    returns, as it always did, once its heartbeats have had time to say."""
    clock = [100.0]
    monkeypatch.setattr(waitrule.time, "monotonic", lambda: clock[0])
    rule, _ = _rule()
    notice = _notice("n", "terminate", before=True, deadline=None)
    assert rule.notice(notice) is None
    assert rule.heartbeat({"active": ["n"]}) is None  # no `acked`: cannot tell yet
    clock[0] += waitrule.DECIDE_WITHIN
    assert rule.due() == notice


def test_a_notice_raised_after_the_wait_began_is_returned_at_once() -> None:
    rule, said = _rule(("drain", "terminate"))
    rule.heartbeat({"active": ["n"], "acked": ["n"]})
    notice = _notice("n", "drain", before=False, deadline=None)
    assert rule.notice(notice) == notice and said == []


def test_an_acted_on_terminate_sent_again_unchanged_stays_put_off_and_a_new_deadline_acts() -> None:
    rule, said = _rule()
    far = format_time(datetime.now(timezone.utc) + timedelta(hours=1))
    rule.heartbeat({"active": ["n"], "acked": ["n"]})
    first = _notice("n", "terminate", before=True, deadline=far)
    assert rule.notice(first) is None and len(said) == 1
    assert rule.notice({**first, "noticed_at": format_time(STARTED)}) is None  # a new detail
    moved = {**first, "deadline": format_time(datetime.now(timezone.utc) + timedelta(hours=2))}
    assert rule.notice(moved) == moved


def test_an_acted_on_terminate_sent_as_a_drain_again_is_no_exit_any_more() -> None:
    rule, _ = _rule()
    soon = format_time(datetime.now(timezone.utc) + timedelta(minutes=5))
    rule.heartbeat({"active": ["n"], "acked": ["n"]})
    assert rule.notice(_notice("n", "terminate", before=True, deadline=soon)) is None
    assert rule.next_due() is not None
    assert rule.notice(_notice("n", "drain", before=True, deadline=soon)) is None
    assert rule.next_due() is None and rule.due() is None


ACTIONS = st.sampled_from(["drain", "terminate", "clear"])
IDS = st.sampled_from(["a", "b", "c"])
DEADLINES = st.sampled_from([None, -600, 10, 600])
NOTICES = st.builds(
    lambda notice_id, action, before, offset: _notice(
        notice_id,
        action,
        before=before,
        deadline=None
        if offset is None
        else format_time(datetime.now(timezone.utc) + timedelta(seconds=offset)),
    ),
    IDS,
    ACTIONS,
    st.booleans(),
    DEADLINES,
)
BEATS = st.builds(
    lambda active, acked, with_acked: (
        {"active": sorted(active)} | ({"acked": sorted(acked)} if with_acked else {})
    ),
    st.sets(IDS),
    st.sets(IDS),
    st.booleans(),
)


@given(
    st.sampled_from([("terminate",), ("drain", "terminate")]),
    st.lists(st.one_of(NOTICES, BEATS), max_size=12),
)
def test_any_sequence_returns_only_what_the_wait_is_for(
    accepted: tuple[str, ...], messages: list[dict[str, Any]]
) -> None:
    rule, _ = _rule(accepted)
    for message in messages:
        if "action" in message:
            got = rule.notice(message)
            if (
                got is None
                and message["action"] in accepted
                and message["noticed_at"] > format_time(STARTED)
                and message["action"] == "drain"
            ):
                # A drain raised after the wait began is returned, unless it is one already
                # passed by (a changed drain asks for no second save).
                assert message["id"] in rule._passed
        else:
            got = rule.heartbeat(message)
        if got is not None:
            assert got["action"] in accepted
        due = rule.due()
        assert due is None or due["action"] in accepted
        assert rule.next_due() is None or rule.next_due() >= 0  # type: ignore[operator]


def test_an_acted_on_terminate_returns_by_the_agents_margin_when_it_is_the_larger() -> None:
    """The heartbeat carries the agent's exit margin, which the client library takes when it is
    larger than its own: a terminate 100 s away under an agent's 120 s margin was put off to
    30 s before its deadline, and the job's save was cut by the kill."""
    rule, _ = _rule()
    near = format_time(datetime.now(timezone.utc) + timedelta(seconds=100))
    notice = _notice("n", "terminate", before=True, deadline=near)
    assert rule.notice(notice) is None
    assert rule.heartbeat({"active": ["n"], "acked": ["n"], "exit_margin": 120.0}) == notice
    later, _ = _rule()
    assert later.notice(notice) is None
    assert later.heartbeat({"active": ["n"], "acked": ["n"], "exit_margin": 10.0}) is None
    assert later.next_due() is not None and 60 < later.next_due() <= 70


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
ACKED_BY = st.one_of(
    JSON, st.dictionaries(IDS, st.lists(st.sampled_from(["loop", "x"]), max_size=5))
)


@given(
    st.lists(NOTICES, max_size=6),
    st.sets(IDS),
    ACKED_BY,
)
def test_any_acked_by_decides_a_client_wait_and_passes_by_only_its_own_acks(
    notices: list[dict[str, Any]], acked: set[str], acked_by: Any
) -> None:
    """`acked_by` as any heartbeat may carry it (an agent of another version, a hostile
    peer): never an error; a drain is passed by only when the client is named, or when the
    heartbeat cannot say (no dict)."""
    said: list[str] = []
    rule = WaitRule(
        ("drain", "terminate"), started=STARTED, exit_margin=30.0, say=said.append, client="loop"
    )
    for notice in notices:
        rule.notice(notice)
    beat = {"active": ["a", "b", "c"], "acked": sorted(acked), "acked_by": acked_by}
    rule.heartbeat(beat)
    rule.due()
    for notice_id, notice in rule._passed.items():
        if notice["action"] != "drain":
            continue
        named = isinstance(acked_by, dict) and "loop" in (acked_by.get(notice_id) or ())
        assert named or not isinstance(acked_by, dict), (notice_id, acked_by)


def test_a_client_wait_returns_a_drain_only_another_client_saved_for() -> None:
    said: list[str] = []
    rule = WaitRule(
        ("drain", "terminate"), started=STARTED, exit_margin=30.0, say=said.append, client="loop"
    )
    drain = _notice("a", "drain", before=True, deadline=None)
    assert rule.notice(drain) is None
    beat = {"active": ["a"], "acked": ["a"], "acked_by": {"a": ["trainer"]}}
    assert rule.heartbeat(beat) == drain
    rule = WaitRule(
        ("drain", "terminate"), started=STARTED, exit_margin=30.0, say=said.append, client="loop"
    )
    rule.notice(drain)
    assert rule.heartbeat({**beat, "acked_by": {"a": ["loop", "trainer"]}}) is None
    assert "client loop has saved for it" in said[-1]


def test_a_drain_raised_after_the_wait_began_under_a_clock_stepped_back_is_returned() -> None:
    """NTP stepped the clock back an hour after the wait began: the agent's `noticed_at` of a
    drain raised since is before the wait's start, and another client's ack had it passed by
    as one saved for before this wait (the loop never saved for it). The agent's `ages`, on
    a clock no step moves, tell it came after."""
    steady = [500.0]
    ages: dict[str, float] = {}
    said: list[str] = []
    rule = WaitRule(
        ("drain", "terminate"),
        started=STARTED,
        exit_margin=30.0,
        say=said.append,
        clock=lambda: steady[0],
        ages=lambda: ages,
    )
    steady[0] += 5.0  # the drain came 4 s after the wait began, an hour "before" it
    ages["n"] = 1.0
    rule.heartbeat({"active": ["n"], "acked": ["n"]})
    notice = {"id": "n", "action": "drain", "noticed_at": format_time(STARTED - timedelta(hours=1))}
    assert rule.notice(notice) == notice and said == []
    # One in force before the wait began (by its age) is still decided by the acks.
    ages["m"] = 60.0
    rule.heartbeat({"active": ["n", "m"], "acked": ["n", "m"]})
    before = {**notice, "id": "m"}
    assert rule.notice(before) is None and len(said) == 1


@pytest.mark.parametrize("action", ["drain", "terminate"])
def test_a_notice_raised_before_the_wait_under_a_clock_stepped_back_since_is_not_news(
    action: str,
) -> None:
    """NTP stepped the clock back an hour after the agent raised a provider's drain (one that
    stands after its ack) and the README's loop saved for it and acked: each `wait` after
    began an hour "before" the drain's `noticed_at`, took it for one raised since, and
    returned it at once, so the loop saved for the same drain again and again until the wall
    clock had caught up. The agent's `ages`, on a clock no step moves, say it was raised two
    hours before this wait began: it is decided as one in force before (passed by, acked by
    this loop; a terminate acted on is put off toward its deadline)."""
    steady = [10_000.0]
    said: list[str] = []
    rule = WaitRule(
        ("drain", "terminate"),
        started=STARTED,
        exit_margin=30.0,
        say=said.append,
        client="loop",
        clock=lambda: steady[0],
        ages=lambda: {"n": 7200.0},
    )
    steady[0] += 1.0
    deadline = format_time(STARTED + timedelta(hours=3))
    notice = {**_notice("n", action, before=False, deadline=deadline)}
    notice["noticed_at"] = format_time(STARTED + timedelta(hours=1))
    rule.heartbeat({"active": ["n"], "acked": ["n"], "acked_by": {"n": ["loop"]}})
    assert rule.notice(notice) is None
    assert len(said) == 1 and "was in force before this wait began" in said[0], said
