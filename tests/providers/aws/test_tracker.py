"""One id per notice, no repeats for time jitter, clears as documented."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from forewarn.protocol.timefmt import format_time
from forewarn.providers.aws.imds import parse_instance_action, parse_rebalance, parse_scheduled
from forewarn.providers.aws.tracker import ABSENT_ANSWERS, CONFIRM_WITHIN, PathTracker
from forewarn.providers.report import Report
from hypothesis import given
from hypothesis import strategies as st

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=timezone.utc)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def spot(at: datetime, action: str = "terminate") -> list:  # type: ignore[type-arg]
    return parse_instance_action(json.dumps({"action": action, "time": format_time(at)}), now=T0)


def spot_tracker(clock: Clock) -> PathTracker:
    return PathTracker(single=True, volatile=("time",), clear_on_absence=False, clock=clock)


def test_a_time_recomputed_on_every_poll_keeps_one_id_and_is_sent_once() -> None:
    clock = Clock()
    tracker = spot_tracker(clock)
    first = tracker.update(spot(T0 + timedelta(seconds=120)))
    sent = list(first)
    for step in range(1, 200):  # 100 s of polls, the time sliding with the clock (AEMM)
        clock.now += 0.5
        sent += tracker.update(spot(T0 + timedelta(seconds=120 + step * 0.5)))
    assert len(sent) == 1 and sent[0].id == first[0].id


def test_small_jitter_is_not_a_change() -> None:
    clock = Clock()
    tracker = spot_tracker(clock)
    tracker.update(spot(T0))
    clock.now += 0.5
    assert tracker.update(spot(T0 + timedelta(seconds=3))) == []
    clock.now += 0.5
    assert tracker.update(spot(T0 - timedelta(seconds=2))) == []


def test_a_real_move_is_resent_under_the_same_id() -> None:
    clock = Clock()
    tracker = spot_tracker(clock)
    (first,) = tracker.update(spot(T0 + timedelta(seconds=120)))
    clock.now += 0.5
    assert tracker.update(spot(T0 + timedelta(seconds=30))) == []  # one answer may be stray
    clock.now += 0.5
    (moved,) = tracker.update(spot(T0 + timedelta(seconds=30)))
    assert moved.id == first.id and moved.deadline == T0 + timedelta(seconds=30)


def test_a_time_creeping_below_the_jitter_at_every_poll_is_resent_once_it_has_moved() -> None:
    clock = Clock()
    tracker = spot_tracker(clock)
    (first,) = tracker.update(spot(T0 + timedelta(seconds=120)))
    sent = [first]
    for step in range(1, 41):  # 3 s earlier at every poll: 120 s earlier after 20 s
        clock.now += 0.5
        sent += tracker.update(spot(T0 + timedelta(seconds=120 - 3 * step)))
    assert {report.id for report in sent} == {first.id}
    assert sent[-1].deadline is not None
    # The deadline sent last is within the jitter of what IMDS says now, never later.
    assert abs((sent[-1].deadline - T0).total_seconds()) <= 5


def test_a_new_action_is_resent_under_the_same_id() -> None:
    clock = Clock()
    tracker = spot_tracker(clock)
    (first,) = tracker.update(spot(T0, "stop"))
    clock.now += 0.5
    assert tracker.update(spot(T0, "terminate")) == []  # one answer may be stray
    clock.now += 0.5
    (changed,) = tracker.update(spot(T0, "terminate"))
    assert changed.id == first.id and changed.detail["action"] == "terminate"


@given(st.lists(st.sampled_from([0, 600, -600, None]), max_size=24))
def test_a_change_is_sent_only_when_two_answers_in_a_row_show_it(shown: list[int | None]) -> None:
    """Whatever the answers (the interruption's own time, another host's later or earlier
    one, none), the deadline sent is always one that two answers in a row showed, and each
    such change is sent once, at the second. (Its own shown by two answers: one shown by a
    single answer and missing from the next two is another host's, withdrawn.)"""
    clock = Clock()
    tracker = spot_tracker(clock)
    (first,) = tracker.update(spot(T0))
    clock.now += 0.5
    assert tracker.update(spot(T0)) == []
    sent_at, previous = T0, 0
    for shift in shown:
        clock.now += 0.5
        sent = tracker.update([] if shift is None else spot(T0 + timedelta(seconds=shift)))
        at = None if shift is None else T0 + timedelta(seconds=shift)
        expected = at is not None and at != sent_at and shift == previous
        assert [(r.id, r.deadline) for r in sent] == ([(first.id, at)] if expected else [])
        if expected:
            sent_at = at  # type: ignore[assignment]
        previous = shift  # type: ignore[assignment]


def test_a_spot_interruption_that_disappears_is_kept() -> None:
    clock = Clock()
    tracker = spot_tracker(clock)
    tracker.update(spot(T0))
    assert tracker.update([]) == []
    clock.now += 0.5
    assert tracker.update(spot(T0)) == []  # back again: still the same notice, not re-sent


def test_an_interruption_shown_by_one_answer_only_is_withdrawn() -> None:
    clock = Clock()
    tracker = spot_tracker(clock)
    (stray,) = tracker.update(spot(T0))
    for _ in range(ABSENT_ANSWERS - 1):
        assert tracker.update([]) == []
    (clear,) = tracker.update([])
    assert (clear.action, clear.id) == ("clear", stray.id)
    assert tracker.update([]) == []
    # Shown twice: a real one, kept however long IMDS then misses it.
    assert [r.action for r in tracker.update(spot(T0))] == ["terminate"]
    assert tracker.update(spot(T0)) == []
    for _ in range(ABSENT_ANSWERS + 3):
        assert tracker.update([]) == []


def test_a_notice_one_answer_showed_is_unconfirmed_for_a_few_seconds() -> None:
    clock = Clock()
    tracker = spot_tracker(clock)
    assert not tracker.unconfirmed
    tracker.update(spot(T0))
    assert tracker.unconfirmed  # its path is asked again soon
    clock.now += 0.1
    tracker.update(spot(T0))
    assert not tracker.unconfirmed  # two answers showed it
    other = spot_tracker(clock)
    other.update(spot(T0))
    clock.now += CONFIRM_WITHIN
    assert not other.unconfirmed  # no second answer came (a failing path): not for long


def test_a_rebalance_that_disappears_is_cleared() -> None:
    clock = Clock()
    tracker = PathTracker(single=True, volatile=("noticeTime",), clock=clock)
    body = json.dumps({"noticeTime": format_time(T0)})
    (drain,) = tracker.update(parse_rebalance(body))
    assert tracker.update([]) == []  # one answer without it may be a stray one
    (clear,) = tracker.update([])
    assert clear.action == "clear" and clear.id == drain.id
    assert clear.reason == "rebalance-recommendation"
    assert tracker.update([]) == []


def test_one_answer_without_a_notice_is_not_its_withdrawal() -> None:
    """A path answering once without a notice (IMDS of another host mid-rollout: 404, `[]`)
    cleared it, and the next answer raised it again. Kept over one such answer, each of the
    several a path holds (and a retired one too); withdrawn at the second in a row."""
    tracker = PathTracker(single=False)
    both = parse_scheduled(json.dumps([event(), {**event(), "EventId": "instance-event-2"}]))
    assert len(tracker.update(both)) == 2
    assert tracker.update([]) == []
    assert tracker.update(both) == []
    assert tracker.update(both[:1]) == []  # one of them missing once
    assert tracker.update(both) == []
    assert tracker.update(both[:1]) == []
    (clear,) = tracker.update(both[:1])  # missing twice in a row
    assert (clear.action, clear.id) == ("clear", both[1].id)
    # One the agent retired past the end of its window is kept quiet over a stray answer
    # too: forgotten there, the next answer raised it again as a new notice.
    wall = datetime(2026, 1, 1, 5, tzinfo=timezone.utc)
    windowed = PathTracker(single=False, done_after_window=True, wall=lambda: wall)
    over = {
        **event(),
        "NotBefore": "1 Jan 2026 01:00:00 GMT",
        "NotAfter": "1 Jan 2026 03:00:00 GMT",
    }
    (drain,) = windowed.update(parse_scheduled(json.dumps([over])))
    assert windowed.forget(drain.id) and windowed.stale(drain.id)
    assert windowed.update([]) == []
    assert windowed.update(parse_scheduled(json.dumps([over]))) == []


@given(st.lists(st.booleans(), max_size=24))
def test_a_notice_is_cleared_only_at_the_second_answer_in_a_row_without_it(
    shown: list[bool],
) -> None:
    tracker = PathTracker(single=True, volatile=("noticeTime",), clock=Clock())
    rebalance = parse_rebalance(json.dumps({"noticeTime": format_time(T0)}))
    active, missing = False, 0
    for present in shown:
        sent = [report.action for report in tracker.update(rebalance if present else [])]
        if present:
            expected = [] if active else ["drain"]
            active, missing = True, 0
        else:
            missing += 1
            expected = ["clear"] if active and missing == ABSENT_ANSWERS else []
            active = active and missing < ABSENT_ANSWERS
        assert sent == expected


def event(state: str = "active", not_before: str = "21 Jan 2019 09:00:43 GMT") -> dict:  # type: ignore[type-arg]
    return {
        "NotBefore": not_before,
        "Code": "instance-stop",
        "EventId": "instance-event-1",
        "State": state,
    }


def test_scheduled_events_drain_move_and_clear() -> None:
    tracker = PathTracker(single=False)
    (drain,) = tracker.update(parse_scheduled(json.dumps([event()])))
    assert tracker.update(parse_scheduled(json.dumps([event()]))) == []
    (moved,) = tracker.update(
        parse_scheduled(json.dumps([event(not_before="22 Jan 2019 09:00:43 GMT")]))
    )
    assert moved.id == drain.id and moved.deadline == datetime(
        2019, 1, 22, 9, 0, 43, tzinfo=timezone.utc
    )
    (clear,) = tracker.update(parse_scheduled(json.dumps([event("canceled")])))
    assert clear.action == "clear" and clear.id == drain.id
    assert tracker.update(parse_scheduled(json.dumps([event("canceled")]))) == []


def test_a_scheduled_event_that_leaves_the_list_is_cleared() -> None:
    tracker = PathTracker(single=False)
    (drain,) = tracker.update(parse_scheduled(json.dumps([event()])))
    assert tracker.update(parse_scheduled("")) == []  # one answer without it may be stray
    (clear,) = tracker.update(parse_scheduled(""))
    assert clear.action == "clear" and clear.id == drain.id


def test_a_canceled_event_never_seen_active_sends_nothing() -> None:
    tracker = PathTracker(single=False)
    assert tracker.update(parse_scheduled(json.dumps([event("completed")]))) == []


def past_aware(clock: Clock, wall: datetime) -> PathTracker:
    return PathTracker(
        single=True,
        volatile=("time",),
        clear_on_absence=False,
        clock=clock,
        once_if_past=True,
        wall=lambda: wall,
    )


def test_one_already_past_when_first_seen_is_not_reported_again_after_its_retirement() -> None:
    clock = Clock()
    tracker = past_aware(clock, wall=T0)
    (first,) = tracker.update(spot(T0 - timedelta(minutes=10)))
    assert tracker.forget(first.id) and tracker.stale(first.id)
    for _ in range(50):
        clock.now += 0.5
        assert tracker.update(spot(T0 - timedelta(minutes=10))) == []
    assert not tracker.forget(first.id)  # already retired: nothing to drop


def test_one_already_past_that_changes_after_its_retirement_is_a_new_notice() -> None:
    clock = Clock()
    tracker = past_aware(clock, wall=T0)
    (first,) = tracker.update(spot(T0 - timedelta(minutes=10)))
    tracker.forget(first.id)
    clock.now += 0.5
    assert tracker.update(spot(T0 + timedelta(minutes=2))) == []  # one answer may be stray
    clock.now += 0.5
    (new,) = tracker.update(spot(T0 + timedelta(minutes=2)))
    assert new.id != first.id and new.action == "terminate"
    assert new.deadline == T0 + timedelta(minutes=2)
    assert not tracker.stale(new.id)


def test_one_seen_before_its_time_is_reported_again_after_each_retirement() -> None:
    clock = Clock()
    wall = [T0]
    tracker = PathTracker(
        single=True,
        volatile=("time",),
        clear_on_absence=False,
        clock=clock,
        once_if_past=True,
        wall=lambda: wall[0],
    )
    at = T0 + timedelta(minutes=2)
    (first,) = tracker.update(spot(at))
    for _ in range(3):  # past its deadline by now, still raised again: the agent's grace
        wall[0] += timedelta(minutes=10)
        assert tracker.forget(first.id) and not tracker.stale(first.id)
        clock.now += 0.5
        (again,) = tracker.update(spot(at))
        assert again.id == first.id


def test_one_retired_before_a_restart_is_kept_retired_at_its_first_sighting() -> None:
    clock = Clock()
    stale_at = T0 - timedelta(minutes=10)
    (retired,) = past_aware(clock, wall=T0).update(spot(stale_at))
    tracker = past_aware(clock, wall=T0)
    tracker.retired_before = {retired.id}
    for _ in range(5):
        clock.now += 0.5
        assert tracker.update(spot(stale_at)) == []
    assert tracker.recognised == [retired.id] and tracker.stale(retired.id)
    # A change is a new interruption, raised once a second answer shows it.
    assert tracker.update(spot(T0 + timedelta(minutes=2))) == []
    (new,) = tracker.update(spot(T0 + timedelta(minutes=2)))
    assert new.id != retired.id


def test_an_id_retired_before_whose_time_is_not_past_is_raised() -> None:
    # The node's clock was ahead before the restart and is right now: its time is ahead.
    at = T0 + timedelta(minutes=2)
    (report,) = past_aware(Clock(), wall=T0).update(spot(at))
    tracker = past_aware(Clock(), wall=T0)
    tracker.retired_before = {report.id}
    assert [r.id for r in tracker.update(spot(at))] == [report.id]
    assert tracker.recognised == []


def test_one_seen_in_time_before_a_restart_is_not_stale_at_its_first_sighting() -> None:
    tracker = past_aware(Clock(), wall=T0)
    at = T0 - timedelta(minutes=1)  # past now; the agent saw it before it passed
    (report,) = spot(at)
    tracker.seen_in_time(report.id)
    assert [r.id for r in tracker.update(spot(at))] == [report.id]
    assert tracker.forget(report.id) and not tracker.stale(report.id)


def test_the_ids_first_seen_in_time_are_told_to_the_watcher() -> None:
    clock = Clock()
    tracker = past_aware(clock, wall=T0)
    (in_time,) = tracker.update(spot(T0 + timedelta(minutes=2)))
    assert tracker.in_time == [in_time.id]
    stale = past_aware(clock, wall=T0)
    stale.update(spot(T0 - timedelta(minutes=2)))
    assert stale.in_time == []


def test_a_scheduled_event_retired_past_its_window_is_kept_quiet_until_it_changes() -> None:
    wall = datetime(2026, 1, 1, 5, tzinfo=timezone.utc)
    tracker = PathTracker(single=False, done_after_window=True, wall=lambda: wall)
    event = Report(
        id="aws/scheduled/e-1",
        action="drain",
        reason="scheduled-maintenance",
        provider="aws",
        deadline=datetime(2026, 1, 1, 1, tzinfo=timezone.utc),
        until=datetime(2026, 1, 1, 3, tzinfo=timezone.utc),
        detail={"EventId": "e-1"},
    )
    assert tracker.update([event]) == [event]
    assert tracker.forget(event.id) and tracker.stale(event.id)
    assert tracker.update([event]) == []  # still listed, unchanged: not raised again
    assert tracker.update([]) == []  # gone: the agent cleared it already
    assert tracker.update([]) == []
    in_window = event.model_copy(update={"until": datetime(2026, 1, 1, 9, tzinfo=timezone.utc)})
    assert tracker.update([in_window]) == [in_window]
    assert tracker.forget(in_window.id) and not tracker.stale(in_window.id)
    # Without an end (no NotAfter), the action may still come: raised again while listed.
    open_ended = event.model_copy(update={"id": "aws/scheduled/e-2", "until": None})
    assert tracker.update([open_ended]) == [open_ended]
    assert tracker.forget(open_ended.id) and not tracker.stale(open_ended.id)
    assert tracker.update([open_ended]) == [open_ended]


def test_a_hibernation_gone_after_the_machine_slept_is_cleared_a_terminate_is_kept() -> None:
    """A hibernate notice stood after the instance resumed: IMDS no longer showed it, but a
    spot interruption is never withdrawn on absence (AWS has no cancellation for one), so
    the terminate stood until its deadline plus the grace (300 s): a job resumed with it
    still unread, or started then, saved and exited for nothing (seen with the agent and the
    IMDS simulator: frozen 3 s, the notice withdrawn, no clear within 20 s). Gone after the
    machine slept (the boot clock ran ahead of the monotonic one), it is cleared; gone
    without a sleep (IMDS missing it for a moment), or a terminate, is kept as before."""
    slept = Clock()
    tracker = PathTracker(
        single=True, volatile=("time",), clear_on_absence=False, clock=Clock(), slept=slept
    )
    (hibernate,) = tracker.update(spot(T0, "hibernate"))
    assert tracker.update([]) == []  # missing for a moment, no sleep: kept
    assert tracker.update(spot(T0, "hibernate")) == []
    slept.now += 600.0  # hibernated ten minutes, resumed
    (cleared,) = tracker.update([])
    assert (cleared.action, cleared.id) == ("clear", hibernate.id)
    assert tracker.update([]) == []
    terminate = PathTracker(
        single=True, volatile=("time",), clear_on_absence=False, clock=Clock(), slept=slept
    )
    terminate.update(spot(T0 + timedelta(seconds=120)))
    slept.now += 600.0
    assert terminate.update([]) == []


def test_a_restored_interruption_is_adopted_by_its_path() -> None:
    # Restored after a restart: IMDS showing it moved is a change of it (same id, at the
    # second answer); not showing it keeps it; one whose time is past is left to the sighting.
    clock = Clock()
    (before,) = past_aware(clock, wall=T0).update(spot(T0 + timedelta(minutes=2)))
    tracker = past_aware(clock, wall=T0)
    assert tracker.adopt(before) == before.id
    assert tracker.update([]) == [] and tracker.update([]) == []
    assert tracker.restate(before.id) == before
    moved = T0 + timedelta(minutes=3)
    assert tracker.update(spot(moved)) == []
    (again,) = tracker.update(spot(moved))
    assert again.id == before.id and again.deadline == moved
    (stale,) = spot(T0 - timedelta(minutes=1))
    assert past_aware(clock, wall=T0).adopt(stale) is None


def test_a_restored_rebalance_not_shown_at_the_first_answer_is_let_go() -> None:
    clock = Clock()
    notice = '{"noticeTime": "2026-11-30T03:00:00Z"}'
    (before,) = PathTracker(single=True, volatile=("noticeTime",), clock=clock).update(
        parse_rebalance(notice)
    )
    moved = PathTracker(single=True, volatile=("noticeTime",), clock=clock)
    moved.adopt(before)
    assert moved.update(parse_rebalance('{"noticeTime": "2026-11-30T03:10:00Z"}')) == []
    assert moved.restate(before.id) == before  # shown (moved): kept, the move due next
    gone = PathTracker(single=True, volatile=("noticeTime",), clock=clock)
    gone.adopt(before)
    assert gone.update([]) == []
    assert gone.restate(before.id) is None and not gone.seen


def test_a_restored_scheduled_event_listed_canceled_is_cleared_once() -> None:
    """A scheduled event restored after an agent restart and listed `canceled` at the first
    answer is cleared at once (a canceled event never seen is no news); listed active, it is
    reported as any first sighting, and a later canceled clears it as within one run."""
    tracker = PathTracker(single=False)
    canceled = {**event(), "State": "canceled"}
    assert tracker.update(parse_scheduled(json.dumps([canceled]))) == []  # never seen
    (restored,) = parse_scheduled(json.dumps([event()]))
    tracker.expect(restored)
    (cleared,) = tracker.update(parse_scheduled(json.dumps([canceled])))
    assert cleared.action == "clear" and cleared.id == restored.id
    assert cleared.detail["State"] == "canceled"
    assert tracker.update(parse_scheduled(json.dumps([canceled]))) == []  # once
    other = PathTracker(single=False)
    other.expect(restored)
    assert [r.id for r in other.update(parse_scheduled(json.dumps([event()])))] == [restored.id]
    assert [r.action for r in other.update(parse_scheduled(json.dumps([canceled])))] == ["clear"]
