from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from forewarn.agent.board import CONFIRM_FLOOR, NoticeBoard, Sequencer
from forewarn.agent.protocol import Notice, Report
from hypothesis import given
from hypothesis import strategies as st

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=timezone.utc)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def report(**kwargs: object) -> Report:
    fields: dict[str, object] = {
        "id": "aws/spot-itn/1",
        "action": "drain",
        "reason": "rebalance-recommendation",
        "provider": "aws",
    }
    fields.update(kwargs)
    return Report.model_validate(fields)


def board(margin: float = 30.0) -> tuple[NoticeBoard, Clock]:
    """A board whose boot clock runs with `Clock` (no step of the wall clock here)."""
    clock = Clock()

    def steady() -> float:
        return (clock.now - T0).total_seconds()

    return NoticeBoard(Sequencer(0), margin, now=clock, clock=steady), clock


def past_the_ask(b: NoticeBoard, clock: Clock) -> tuple[list[Notice], list[Notice]]:
    """`due` past the notices' end, and again once their watchers, asked whether their
    provider still shows them (`take_confirming`), let the time to answer pass unreported."""
    escalated, expired = b.due()
    if b.take_confirming():
        clock.now += max(b.grace, CONFIRM_FLOOR)
        more, expired = b.due()
        escalated += more
    return escalated, expired


def test_repeats_send_nothing_and_a_moved_deadline_resends_with_the_same_id() -> None:
    b, _ = board()
    deadline = T0 + timedelta(hours=2)
    sent = [b.report(report(deadline=deadline)) for _ in range(100)]
    assert sum(n is not None for n in sent) == 1
    moved = b.report(report(deadline=deadline + timedelta(minutes=5)))
    assert moved is not None and moved.id == "aws/spot-itn/1"
    assert moved.seq > sent[0].seq  # type: ignore[union-attr]
    # Jitter under a second (providers recompute times per answer) is not a change.
    assert b.report(report(deadline=deadline + timedelta(minutes=5, milliseconds=400))) is None


def test_drain_escalates_to_terminate_at_deadline_minus_margin() -> None:
    b, clock = board(margin=60)
    b.report(report(deadline=T0 + timedelta(minutes=10)))
    assert b.next_due() == T0 + timedelta(minutes=9)
    clock.now = T0 + timedelta(minutes=8, seconds=59)
    assert b.due() == ([], [])
    clock.now = T0 + timedelta(minutes=9)
    (escalated,), _ = b.due()
    assert escalated.action == "terminate" and escalated.id == "aws/spot-itn/1"
    # The watcher keeps reporting its drain: the terminate stands and nothing is re-sent.
    assert b.report(report(deadline=T0 + timedelta(minutes=10))) is None
    assert b.due() == ([], [])
    # Next is the expiry: the deadline plus the grace.
    assert b.next_due() == T0 + timedelta(minutes=15)


def test_slow_flushes_widen_the_exit_margin() -> None:
    b, _ = board(margin=10)
    b.record_ack(None, "c1", 40.0)
    assert b.exit_margin == 80.0


def test_a_drain_already_inside_the_margin_goes_out_as_terminate() -> None:
    b, _ = board(margin=60)
    notice = b.report(report(deadline=T0 + timedelta(seconds=30)))
    assert notice is not None and notice.action == "terminate"


def test_clear_withdraws_once() -> None:
    b, _ = board()
    b.report(report())
    cleared = b.report(report(action="clear"))
    assert cleared is not None and cleared.action == "clear" and cleared.id == "aws/spot-itn/1"
    assert b.report(report(action="clear")) is None
    assert b.active() == []


def test_flushed_once_every_client_that_received_it_acked() -> None:
    b, _ = board()
    b.client_joined("a")
    b.client_joined("b")
    b.report(report())
    assert not b.record_ack("aws/spot-itn/1", "a", 1.0)
    assert b.record_ack("aws/spot-itn/1", "b", 1.0)
    assert not b.record_ack("aws/spot-itn/1", "b", 1.0)  # once


def test_a_client_leaving_completes_the_set() -> None:
    b, _ = board()
    b.client_joined("a")
    b.client_joined("b")
    b.report(report())
    b.record_ack("aws/spot-itn/1", "a", 1.0)
    assert b.client_left("b") == ["aws/spot-itn/1"]


def test_no_notice_counts_as_flushed_while_flushes_are_held() -> None:
    """After a restart the clients come back one by one: an ack or a leave before the hold
    ends completes nothing; the release says what is flushed then."""
    b, clock = board()
    b.report(report())
    b.report(report(id="aws/spot-itn/2"))
    b.hold_flushes(3.0)
    b.client_joined("a")
    assert not b.record_ack("aws/spot-itn/1", "a", 1.0)
    b.client_joined("b")
    assert b.client_left("b") == []
    assert b.release_flushes() == []  # not yet
    clock.now = T0 + timedelta(seconds=3)
    assert b.release_flushes() == ["aws/spot-itn/1"]
    assert b.release_flushes() == []  # once
    assert b.record_ack("aws/spot-itn/2", "a", 1.0)  # no hold any more


def test_sequence_keeps_rising_across_restarts() -> None:
    first = Sequencer(0)
    last = [first.next() for _ in range(5)][-1]
    assert Sequencer(last).next() > last


def test_a_terminate_from_escalation_is_a_drain_again_when_the_deadline_moves_out() -> None:
    b, clock = board(margin=60)
    b.report(report(deadline=T0 + timedelta(seconds=90)))
    clock.now = T0 + timedelta(seconds=40)
    (escalated,), _ = b.due()
    assert escalated.action == "terminate"
    moved = b.report(report(deadline=T0 + timedelta(days=1)))
    assert moved is not None and moved.action == "drain" and moved.id == escalated.id
    # And back in when it comes close again.
    back = b.report(report(deadline=T0 + timedelta(seconds=60)))
    assert back is not None and back.action == "terminate"


def test_a_changed_provider_detail_is_resent_but_recomputed_times_are_not() -> None:
    b, _ = board()
    when = "2026-11-30T03:02:00Z"
    b.report(report(action="terminate", detail={"action": "terminate", "time": when}))
    stop = b.report(report(action="terminate", detail={"action": "stop", "time": when}))
    assert stop is not None and stop.detail["action"] == "stop"
    jitter = "2026-11-30T03:02:00.400Z"
    assert b.report(report(action="terminate", detail={"action": "stop", "time": jitter})) is None


def test_a_notice_past_deadline_and_grace_that_its_provider_still_shows_is_overdue() -> None:
    """AWS late: the interruption's time passed and IMDS still shows it. Retired at once, it
    was raised again at the next poll: a clear and the same terminate at every grace."""
    b, clock = board(margin=30)
    b.grace = timedelta(seconds=120)
    spot = report(action="terminate", deadline=T0 + timedelta(minutes=2))
    first = b.report(spot)
    assert first is not None
    clock.now = T0 + timedelta(minutes=4)
    assert b.due() == ([], [])  # asked first, nothing sent
    assert [n.id for n in b.take_confirming()] == [first.id] and b.take_confirming() == []
    assert b.next_due() == clock.now + timedelta(minutes=2)  # the time to answer
    clock.now += timedelta(seconds=1)
    assert b.report(spot) is None  # still shown: no change to send
    assert [n.id for n in b.take_overdue()] == [first.id]
    assert b.overdue_since() == {first.id: clock.now}
    assert [n.id for n in b.active()] == [first.id]
    # Its next grace runs from there; asked again then, and said overdue only once.
    assert b.next_due() == clock.now + timedelta(minutes=2)
    clock.now += timedelta(minutes=2)
    assert b.due() == ([], []) and len(b.take_confirming()) == 1
    assert b.report(spot) is None and b.take_overdue() == []
    # A new time is a change: sent, and overdue no more until its new end.
    moved = b.report(report(action="terminate", deadline=clock.now + timedelta(minutes=1)))
    assert moved is not None and b.overdue_since() == {}


def test_a_notice_past_deadline_and_grace_is_retired_and_raised_again_if_reported() -> None:
    """Not reported while its watcher was asked: retired, as before; reported later, raised
    again (the same occurrence), with a fresh grace."""
    b, clock = board(margin=30)
    b.grace = timedelta(seconds=120)
    first = b.report(report(action="terminate", deadline=T0 + timedelta(minutes=2)))
    assert first is not None
    clock.now = T0 + timedelta(minutes=4)
    escalated, (expired,) = past_the_ask(b, clock)
    assert escalated == [] and expired.action == "clear" and expired.id == first.id
    assert "grace" in expired.detail["expired"] and b.active() == []
    again = b.report(report(action="terminate", deadline=T0 + timedelta(minutes=2)))
    assert again is not None and again.action == "terminate" and again.id == first.id
    # The grace of a re-raise runs from the re-raise.
    assert b.next_due() == clock.now + timedelta(minutes=2)


def test_a_manual_notice_past_deadline_and_grace_is_retired_without_asking() -> None:
    b, clock = board()
    b.grace = timedelta(seconds=60)
    local = report(id="local/manual/1", provider="local", reason="manual", deadline=T0)
    b.report(local, manual=True)
    clock.now = T0 + timedelta(seconds=61)
    _, (expired,) = b.due()
    assert expired.id == "local/manual/1" and b.take_confirming() == []


def test_a_notice_with_a_window_is_retired_past_its_end_not_past_its_deadline() -> None:
    """AWS scheduled maintenance may come at any moment until NotAfter: retired at NotBefore
    plus the grace, it was raised again at the next poll, once per grace for the window."""
    b, clock = board(margin=30)
    b.grace = timedelta(seconds=300)
    nb, na = T0 + timedelta(minutes=10), T0 + timedelta(hours=2)
    b.report(report(reason="scheduled-maintenance", deadline=nb, until=na))
    clock.now = nb + timedelta(minutes=30)
    (escalated,), expired = b.due()
    assert escalated.action == "terminate" and expired == []
    assert b.next_due() == na + timedelta(minutes=5)
    clock.now = na + timedelta(minutes=5)
    _, (cleared,) = past_the_ask(b, clock)
    assert "end of its window" in cleared.detail["expired"]


def test_a_local_notice_without_deadline_ends_after_its_lifetime() -> None:
    b, clock = board()
    b.manual_lifetime = timedelta(hours=1)
    b.report(report(id="local/manual/1", provider="local", reason="manual"), manual=True)
    b.report(report())  # a cloud notice without deadline stays while the provider says so
    clock.now = T0 + timedelta(hours=1)
    _, (expired,) = b.due()
    assert expired.id == "local/manual/1" and "no deadline" in expired.detail["expired"]
    assert [n.id for n in b.active()] == ["aws/spot-itn/1"]


def test_deadlines_at_the_ends_of_time_do_not_overflow() -> None:
    b, _ = board(margin=60)
    tiny = datetime(1, 1, 1, 0, 0, 45, tzinfo=timezone.utc)
    huge = datetime(9999, 12, 31, 23, 59, tzinfo=timezone.utc)
    assert b.report(report(id="a", deadline=tiny)) is not None
    assert b.report(report(id="b", deadline=huge)) is not None
    b.due()
    assert b.next_due() is not None


def test_an_escalated_drain_reported_again_stays_terminate_when_the_margin_shrinks() -> None:
    """Escalation follows the deadline, not the margin: a drain escalated under a wide margin
    (a slow flush) was sent as a drain again when its provider repeated the same report after
    faster flushes had narrowed the margin, although due() never drops back."""
    b, clock = board(margin=30)
    deadline = T0 + timedelta(minutes=5)
    assert b.report(report(deadline=deadline)).action == "drain"  # type: ignore[union-attr]
    b.record_ack(None, "c", 200.0)  # margin 400 s: the deadline is inside it
    (escalated,), _ = b.due()
    assert escalated.action == "terminate"
    for _ in range(20):
        b.record_ack(None, "c", 0.1)  # the slow flush leaves the window: margin 30 s again
    assert b.exit_margin == 30
    clock.now = T0 + timedelta(seconds=10)
    assert b.due() == ([], [])
    assert b.report(report(deadline=deadline)) is None
    assert b.get("aws/spot-itn/1").action == "terminate"  # type: ignore[union-attr]
    # A deadline that moves out is still a drain again.
    moved = b.report(report(deadline=T0 + timedelta(days=1)))
    assert moved is not None and moved.action == "drain"


def test_an_escalated_drain_changed_in_its_detail_alone_stays_terminate() -> None:
    """The same, for a report whose detail changed but not its deadline (an Azure Reboot
    whose Resources or Description changed): it was re-sent as a drain, so clients that were
    exiting for it saved and trained on into the reboot at the unchanged deadline."""
    b, clock = board(margin=30)
    deadline = T0 + timedelta(minutes=5)
    b.report(report(deadline=deadline, detail={"Resources": ["gpu-0"]}))
    b.record_ack(None, "c", 200.0)  # margin 400 s: escalated
    (escalated,), _ = b.due()
    assert escalated.action == "terminate"
    for _ in range(20):
        b.record_ack(None, "c", 0.1)  # margin 30 s again
    clock.now = T0 + timedelta(seconds=10)
    resent = b.report(report(deadline=deadline, detail={"Resources": ["gpu-0", "gpu-1"]}))
    assert resent is not None and resent.action == "terminate"
    assert resent.detail == {"Resources": ["gpu-0", "gpu-1"]}
    assert b.escalated("aws/spot-itn/1")


def test_a_notice_raised_again_after_expiry_is_the_same_occurrence() -> None:
    """A re-raise after expiry came with the time of the poll that re-raised it and without the
    save a client had made for it: a job that rightly kept training under that acted-on
    terminate was made to exit at every re-raise."""
    b, clock = board()
    b.grace = timedelta(seconds=60)
    deadline = T0 + timedelta(minutes=2)
    first = b.report(report(action="terminate", deadline=deadline, noticed_at=T0))
    assert first is not None
    b.record_ack(first.id, "job-1", 1.0)
    # A watcher that repeats what it shows: the time clients were told stands.
    assert (
        b.report(
            report(action="terminate", deadline=deadline, noticed_at=T0 + timedelta(minutes=1))
        )
        is None
    )
    clock.now = T0 + timedelta(minutes=4)
    _, (expired,) = past_the_ask(b, clock)
    assert expired.action == "clear" and b.saved() == []
    again = b.report(report(action="terminate", deadline=deadline, noticed_at=clock.now))
    assert again is not None and again.noticed_at == T0
    assert b.saved() == [first.id]
    # Withdrawn by its provider after that, it is a new occurrence when it comes back.
    b.report(report(action="clear"))
    clock.now += timedelta(seconds=1)
    fresh = b.report(report(action="terminate", deadline=deadline, noticed_at=clock.now))
    assert fresh is not None and fresh.noticed_at == clock.now and b.saved() == []


def test_a_manual_notice_asked_for_again_after_expiry_is_a_new_one() -> None:
    b, clock = board()
    b.manual_lifetime = timedelta(minutes=1)
    local = {"id": "local/manual/1", "provider": "local", "reason": "manual"}
    b.report(report(**local, noticed_at=T0), manual=True)
    clock.now = T0 + timedelta(minutes=2)
    b.due()
    again = b.report(report(**local, noticed_at=clock.now), manual=True)
    assert again is not None and again.noticed_at == clock.now


def test_a_provider_notice_saved_for_before_a_restart_is_still_saved_for_when_reported() -> None:
    b, _ = board()
    b.restore([], saved=["aws/spot-itn/1"])
    assert b.saved() == [] and b.saves_to_keep() == ["aws/spot-itn/1"]
    again = b.report(report(action="terminate", noticed_at=T0))
    assert again is not None and again.noticed_at == T0
    assert b.saved() == ["aws/spot-itn/1"] == b.saves_to_keep()


def test_a_restored_escalated_drain_stays_terminate_after_the_margin_narrowed() -> None:
    """Saved as reported (a drain) with its id among the escalated, it comes back as terminate
    even where the restarted board's margin alone would send a drain, until the provider
    reports its deadline moved out."""
    b, _ = board(margin=30)
    deadline = T0 + timedelta(minutes=5)
    b.report(report(deadline=deadline))
    b.record_ack(None, "c", 200.0)
    b.due()
    assert b.escalated_ids() == ["aws/spot-itn/1"]
    restarted, _ = board(margin=30)
    restarted.restore([], provider=b.provider_notices(), escalated=b.escalated_ids())
    assert restarted.get("aws/spot-itn/1").action == "terminate"  # type: ignore[union-attr]
    assert restarted.due() == ([], [])
    assert restarted.report(report(deadline=deadline)) is None
    moved = restarted.report(report(deadline=T0 + timedelta(days=1)))
    assert moved is not None and moved.action == "drain"
    plain, _ = board(margin=30)
    plain.restore([], provider=b.provider_notices())
    assert plain.get("aws/spot-itn/1").action == "drain"  # type: ignore[union-attr]


def test_a_restored_notice_without_deadline_its_provider_never_confirms_expires() -> None:
    """Kept until its watcher answers; a watcher that never does must not keep it active
    forever. Reported again later, it is the same occurrence, still saved for."""
    b, clock = board()
    b.report(report())
    b.record_ack("aws/spot-itn/1", "c", 1.0)
    restarted, clock = board()
    restarted.restore([], saved=b.saved(), provider=b.provider_notices())
    clock.now = T0 + timedelta(seconds=299)
    assert restarted.due() == ([], [])
    clock.now = T0 + timedelta(seconds=300)
    _, (expired,) = restarted.due()
    assert expired.action == "clear" and "agent restart" in expired.detail["expired"]
    again = restarted.report(report())
    assert again is not None and again.action == "drain"
    assert restarted.saved() == ["aws/spot-itn/1"]


def restarted_after_acks(acks: list[str]) -> tuple[NoticeBoard, NoticeBoard]:
    """A board whose notice went to clients a and b and was acked by `acks`, and a board
    restored from what the first one saves."""
    b, _ = board()
    b.client_joined("a")
    b.client_joined("b")
    b.report(report(deadline=T0 + timedelta(hours=2)))
    for client in acks:
        b.record_ack("aws/spot-itn/1", client, 1.0)
    restarted, _ = board()
    restarted.restore(
        [],
        saved=b.saved(),
        provider=b.provider_notices(),
        acked_by=b.acked_by(),
        expected_by=b.expected_by(),
    )
    return b, restarted


def test_a_notice_every_client_flushed_is_still_flushed_after_a_restore() -> None:
    """Flushed by a and b before the restart: a client leaving or a new one acking after it
    does not make it flushed a second time (the `acked` step and the provider's `flushed`
    hook, Azure's approval, once per notice)."""
    before, restarted = restarted_after_acks(["a", "b"])
    assert before.expected_by() == {"aws/spot-itn/1": {"a", "b"}}
    for client in ("a", "b", "c"):
        restarted.client_joined(client)
    assert restarted.client_left("b") == []
    assert restarted.record_ack("aws/spot-itn/1", "c", 1.0) is False
    # Clients that join after the flush are not among those it was flushed by.
    assert restarted.expected_by() == {"aws/spot-itn/1": {"a"}}


def test_a_notice_not_every_client_flushed_still_waits_after_a_restore() -> None:
    _, restarted = restarted_after_acks(["a"])
    restarted.client_joined("a")
    restarted.client_joined("b")
    assert restarted.record_ack("aws/spot-itn/1", "b", 1.0) is True


def test_without_its_receiving_clients_a_restored_notice_waits_for_acks_as_before() -> None:
    """A notice sent to more clients than the state keeps (or a state file from before they
    were kept): not known to be flushed, it waits for the acks of the clients that come back."""
    before, _ = restarted_after_acks(["a", "b"])
    restarted, _ = board()
    restarted.restore([], provider=before.provider_notices(), acked_by={"aws/spot-itn/1": ["a"]})
    restarted.client_joined("a")
    restarted.client_joined("b")
    assert restarted.record_ack("aws/spot-itn/1", "b", 1.0) is True


def test_retired_provider_notices_are_handed_to_a_rebuilt_watcher_until_cleared() -> None:
    """What a watcher built again after a crash is handed: its predecessor kept the notices
    retired while still reported, and raised one still listed again as it was; without them
    the new watcher took an Azure Started event for new, with a new deadline."""
    b, clock = board()
    b.grace = timedelta(seconds=60)
    kept = report(id="azure/E1", provider="azure", action="terminate", deadline=T0)
    b.report(kept)
    b.report(report(id="azure/E2", provider="azure", action="terminate", deadline=T0))
    b.report(report(deadline=T0))  # another provider's
    clock.now = T0 + timedelta(seconds=61)
    _, expired = past_the_ask(b, clock)
    assert len(expired) == 3 and b.active() == []
    assert sorted(r.id for r in b.provider_reports("azure")) == ["azure/E1", "azure/E2"]
    assert b.provider_reports("azure")[0].deadline == T0
    b.report(kept)  # raised again
    b.clear("azure/E2")  # withdrawn by its provider
    assert [r.id for r in b.provider_reports("azure")] == ["azure/E1"]  # active, not retired
    b.clear("azure/E1")
    assert b.provider_reports("azure") == []


def test_a_notice_acked_while_flushes_are_held_is_not_flushed_by_a_second_restart() -> None:
    """Restarted again before the first restart's hold ended, a board counted as flushed by
    every client a notice acked only by the clients that had reconnected by then: the clients
    still reconnecting were not among those it was `expected_by`. A FlushAware watcher is told
    of it when built (Azure approves the event: the VM may go before they flushed)."""
    b, clock = board()
    b.client_joined("a")
    b.client_joined("b")
    b.report(report(deadline=T0 + timedelta(hours=2)))
    first, clock = board()
    first.restore([], provider=b.provider_notices())
    first.hold_flushes(3.0)
    first.client_joined("a")  # b is still reconnecting
    assert not first.record_ack("aws/spot-itn/1", "a", 1.0)
    second, clock = board()
    second.restore(
        [],
        saved=first.saved(),
        provider=first.provider_notices(),
        acked_by=first.acked_by(),
        expected_by=first.expected_by(),
    )
    assert second.flushed_ids("aws") == []
    second.hold_flushes(3.0)
    second.client_joined("a")
    second.client_joined("b")
    clock.now = T0 + timedelta(seconds=3)
    assert second.release_flushes() == []
    assert second.record_ack("aws/spot-itn/1", "b", 1.0)


def test_a_notice_raised_again_after_expiry_keeps_its_fresh_grace_across_a_restart() -> None:
    """A notice retired past its end and raised again (its provider still shows it) has a
    fresh grace from the re-raise. A restarted board took its first `noticed_at` for when it
    was raised: past its end at once, it was cleared at start and raised again at the
    watcher's next answer, a clear and a terminate its clients had not been sent before."""
    b, clock = board()
    b.grace = timedelta(seconds=120)
    spot = report(action="terminate", deadline=T0, noticed_at=T0)
    b.report(spot)
    clock.now = T0 + timedelta(seconds=200)
    past_the_ask(b, clock)  # not reported while asked: retired at T0 + 320 s
    assert b.report(spot) is not None  # raised again: retired at T0 + 440 s at the earliest
    restarted, clock = board()
    restarted.grace = timedelta(seconds=120)
    clock.now = T0 + timedelta(seconds=330)
    restarted.restore([], provider=b.provider_notices(), raised=b.raised())
    assert restarted.due() == ([], [])
    assert restarted.next_due() == T0 + timedelta(seconds=440)


def test_a_manual_notice_asked_for_again_keeps_its_lifetime_across_a_restart() -> None:
    """A manual notice changed by a second notify (a drain made a terminate) lives from when it
    was first raised; a restarted board counted its lifetime from the change."""
    b, clock = board()
    b.manual_lifetime = timedelta(minutes=10)
    local = {"id": "local/manual/1", "provider": "local", "reason": "manual"}
    b.report(report(**local, noticed_at=T0), manual=True)
    clock.now = T0 + timedelta(minutes=8)
    b.report(report(**local, action="terminate", noticed_at=clock.now), manual=True)
    assert b.next_due() == T0 + timedelta(minutes=10)
    restarted, clock = board()
    restarted.manual_lifetime = timedelta(minutes=10)
    clock.now = T0 + timedelta(minutes=9)
    restarted.restore(b.manual(), raised=b.raised())
    assert restarted.next_due() == T0 + timedelta(minutes=10)


def test_a_notice_raised_again_after_expiry_is_flushed_once() -> None:
    """A provider notice raised again after it expired forgot who had acked it: acked again
    (a `forewarn wait` loop acks every notice it is handed), it was flushed by every client
    a second time, and its provider's after-ack action (an Azure approval, the flag file's
    removal) fired twice for one notice."""
    b, clock = board()
    b.grace = timedelta(seconds=60)
    b.client_joined("job-1")
    deadline = T0 + timedelta(minutes=2)
    first = b.report(report(action="terminate", deadline=deadline))
    assert first is not None
    assert b.record_ack(first.id, "job-1", 1.0)
    clock.now = T0 + timedelta(minutes=4)
    _, (expired,) = past_the_ask(b, clock)
    assert expired.action == "clear"
    again = b.report(report(action="terminate", deadline=deadline))
    assert again is not None
    assert b.acked_by(first.id) == {first.id: {"job-1"}}
    assert b.flushed_ids("aws") == [first.id]
    assert not b.record_ack(first.id, "job-1", 1.0)
    # A client that joined since counts as having received it after its flush: no new round.
    b.client_joined("job-2")
    assert not b.record_ack(first.id, "job-2", 1.0)
    assert b.client_left("job-1") == []


def test_a_deadline_that_creeps_is_sent_again_once_it_moved_from_what_clients_were_told() -> None:
    """The board compared a deadline with the last report, not with what it had published: a
    deadline that moved by under the tolerance per report was never sent again, and after
    many reports clients held a deadline minutes away from the provider's."""
    b, _ = board()
    deadline = T0 + timedelta(hours=2)
    first = b.report(report(deadline=deadline))
    assert first is not None
    sent = []
    for step in range(1, 11):
        notice = b.report(report(deadline=deadline + timedelta(milliseconds=500 * step)))
        if notice is not None:
            sent.append(notice)
    assert sent, "a deadline 5 s later than the one published was never sent"
    assert all(n.deadline is not None for n in sent)
    last = b.get(first.id)
    assert last is not None and last.deadline is not None
    assert deadline + timedelta(seconds=5) - last.deadline < timedelta(seconds=1)
    # The same for times in the provider's detail (Azure's NotBefore).
    b2, _ = board()
    b2.report(report(detail={"NotBefore": "2026-11-30T05:00:00Z"}))
    moved = [
        b2.report(report(detail={"NotBefore": f"2026-11-30T05:00:0{step}.5Z"})) for step in range(5)
    ]
    assert any(n is not None for n in moved)


def test_a_retired_notice_flushed_by_every_client_stays_flushed_across_a_restart() -> None:
    """The state file kept only that a retired notice was saved for: raised again after a
    restart, the notice every client had flushed was flushed, and its provider told, again."""
    b, clock = board()
    b.grace = timedelta(seconds=60)
    b.client_joined("job-1")
    first = b.report(report(action="terminate", deadline=T0 + timedelta(minutes=2)))
    assert first is not None and b.record_ack(first.id, "job-1", 1.0)
    clock.now = T0 + timedelta(minutes=4)
    b.due()
    restarted = NoticeBoard(Sequencer(b.sequencer.value), 30.0, now=clock)
    restarted.restore(
        [],
        b.saves_to_keep(),
        acked_by=b.acked_by(),
        expected_by=b.expected_by(),
    )
    restarted.client_joined("job-1")
    again = restarted.report(report(action="terminate", deadline=T0 + timedelta(minutes=2)))
    assert again is not None and restarted.saved() == [first.id]
    assert restarted.flushed_ids("aws") == [first.id]
    assert not restarted.record_ack(first.id, "job-1", 1.0)


def test_acks_from_ids_no_subscriber_holds_are_bounded_and_never_crowd_out_a_job_s() -> None:
    """Every ack's `client` was kept for as long as its notice stayed active: a client making
    up an id per retry, or a script acking in a loop, grew the agent by some 600 bytes an
    ack (4,000 acks: 2.5 MB) without end. Past MAX_STRANGERS_KEPT acks kept per notice an id
    that no subscriber holds is not kept, and the ack of a client that received the notice
    is kept whatever the count."""
    from forewarn.agent.board import MAX_STRANGERS_KEPT

    b, _ = board()
    b.client_joined("job")
    b.client_joined("other")
    b.report(report())
    for n in range(MAX_STRANGERS_KEPT + 100):
        assert not b.record_ack("aws/spot-itn/1", f"script-{n}", 1.0)
    kept = b.acked_by()["aws/spot-itn/1"]
    assert len(kept) == MAX_STRANGERS_KEPT
    assert not b.record_ack("aws/spot-itn/1", "job", 1.0)
    assert b.record_ack("aws/spot-itn/1", "other", 1.0)
    kept = b.acked_by()["aws/spot-itn/1"]
    assert len(kept) == MAX_STRANGERS_KEPT + 2 and {"job", "other"} <= kept
    assert b.acked_to_save()["aws/spot-itn/1"][:2] == ["job", "other"]


def test_an_ack_between_a_notices_expiry_and_its_re_raise_counts_for_the_re_raise() -> None:
    """The expiry cleared the notice, the ack of the last client to save for it came before
    the provider's next answer raised it again: the ack found no notice and was lost, and the
    re-raise waited for that client's ack forever (Azure approved at NotBefore, not early)."""
    b, clock = board()
    b.grace = timedelta(seconds=60)
    b.client_joined("a")
    b.client_joined("b")
    deadline = T0 + timedelta(minutes=2)
    first = b.report(report(action="terminate", deadline=deadline))
    assert first is not None
    assert not b.record_ack(first.id, "a", 1.0)
    clock.now = T0 + timedelta(minutes=4)
    _, (expired,) = past_the_ask(b, clock)
    assert expired.action == "clear"
    assert not b.record_ack(first.id, "b", 1.0)  # no notice in force: nothing completes now
    again = b.report(report(action="terminate", deadline=deadline))
    assert again is not None and b.acked_by(first.id) == {first.id: {"a", "b"}}
    assert b.take_flushed() == [first.id]  # flushed by every client: its provider is told
    assert b.take_flushed() == []
    assert not b.record_ack(first.id, "b", 1.0)  # once


def test_an_anonymous_ack_after_the_expiry_completes_only_a_notice_nobody_holds() -> None:
    b, clock = board()
    b.grace = timedelta(seconds=60)
    b.client_joined("a")
    first = b.report(report(action="terminate", deadline=T0 + timedelta(minutes=2)))
    assert first is not None
    clock.now = T0 + timedelta(minutes=4)
    past_the_ask(b, clock)
    assert not b.record_ack(first.id, None, 1.0)
    assert b.report(report(action="terminate", deadline=T0 + timedelta(minutes=2)))
    assert b.take_flushed() == [] and b.saved() == [first.id]


def test_a_held_notice_is_flushed_only_once_its_holder_acked_too_and_across_a_restart() -> None:
    """Two shell jobs (`forewarn wait --client`, no subscriber while they save): the first
    one's ack flushed the notice while the second was saving. A hold counts the second, and a
    restarted agent (whose state file keeps the holds) still waits for it."""
    b, clock = board()
    notice = b.report(report(id="local/flag/1", provider="local", reason="manual"))
    other = b.report(report(id="local/flag/2", provider="local", reason="manual"))
    assert notice is not None and other is not None
    assert b.hold(notice.id, "slow") and b.hold(notice.id, "quick")
    assert not b.hold(notice.id, "slow")  # held already
    assert not b.hold("local/flag/none", "slow")  # not active
    assert b.hold(other.id, "quick") and b.hold(other.id, "slow")
    assert not b.record_ack(other.id, "quick", 0.1)
    assert not b.hold(other.id, "quick")  # acked already: nothing to hold
    assert b.record_ack(other.id, "slow", 0.1)
    assert not b.hold(other.id, "late")  # flushed: nothing to hold
    assert b.held_by() == {notice.id: ["quick", "slow"]}
    restarted = NoticeBoard(Sequencer(b.sequencer.value), 30.0, now=clock)
    restarted.restore(
        b.active(),
        b.saves_to_keep(),
        acked_by=b.acked_by(),
        expected_by=b.expected_by(),
        held_by=b.held_by(),
    )
    assert not restarted.record_ack(notice.id, "quick", 0.2), "flushed with slow still saving"
    assert restarted.record_ack(notice.id, "slow", 0.2)


def test_a_notices_age_counts_on_the_steady_clock_whatever_the_wall_clock_does() -> None:
    """How long ago a notice was raised (`ages`, for `forewarn ack --client ID
    --flush-seconds`) is counted on the board's steady clock: the wall clock stepped back two
    minutes (NTP correcting a clock that ran ahead) leaves it as it is, a change of the notice
    does not restart it, and a notice restored without its reading of that clock (from an
    earlier boot) has none."""
    wall = Clock()
    steady = [1000.0]
    b = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda: steady[0])
    first = b.report(report(deadline=T0 + timedelta(hours=2)))
    assert first is not None
    steady[0] += 5
    wall.now = T0 - timedelta(minutes=2) + timedelta(seconds=5)
    assert b.ages() == {first.id: 5.0}
    assert b.report(report(deadline=T0 + timedelta(hours=3))) is not None  # changed
    steady[0] += 1
    assert b.ages() == {first.id: 6.0}
    restarted = NoticeBoard(Sequencer(b.sequencer.value), 30.0, now=wall, clock=lambda: 0.0)
    restarted.restore([], provider=b.provider_notices())
    assert restarted.active() and restarted.ages() == {}


def test_a_notices_age_goes_on_from_its_saved_reading_in_the_same_boot() -> None:
    """Restored with the boot clock's reading at its raise (`raised_clocks()`, saved with the
    boot id), a notice's age goes on from it; a reading later than the clock now (another
    boot's, a hand edit) is none."""
    wall = Clock()
    b = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda: 100.0)
    first = b.report(report(deadline=T0 + timedelta(hours=2)))
    second = b.report(report(id="aws/spot-itn/2", deadline=T0 + timedelta(hours=2)))
    assert first is not None and second is not None
    readings = {**b.raised_clocks(), second.id: 500.0}
    restarted = NoticeBoard(Sequencer(b.sequencer.value), 30.0, now=wall, clock=lambda: 130.0)
    restarted.restore([], provider=b.provider_notices(), raised_clock=readings)
    assert restarted.ages() == {first.id: 30.0}
    assert restarted.raised_clocks() == {first.id: 100.0}


def test_the_restart_s_hold_on_flushes_lasts_its_seconds_whatever_the_wall_clock_does() -> None:
    """The hold after a restart is timed on the board's boot clock: NTP stepping the wall
    clock forward ended it at once (an ack completed a notice clients still reconnecting
    had not flushed: its provider acted), and stepping it back held every flush for hours."""
    wall = Clock()
    steady = [0.0]
    b = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda: steady[0])
    b.report(report())
    b.hold_flushes(3.0)
    b.client_joined("a")
    wall.now = T0 + timedelta(hours=1)  # stepped forward; a second has passed
    steady[0] = 1.0
    assert not b.record_ack("aws/spot-itn/1", "a", 1.0)
    assert b.release_flushes() == []
    wall.now = T0 - timedelta(hours=1)  # stepped back; the hold's seconds have passed
    steady[0] = 3.0
    assert b.release_flushes() == ["aws/spot-itn/1"]


def test_a_local_notice_s_lifetime_is_counted_on_the_boot_clock() -> None:
    """`forewarn notify` without a deadline lives `manual_lifetime` after it was raised: on the
    wall clock, NTP stepping it forward (first sync on a VM whose clock was behind) retired
    the drain at once, with a clear, before the job had saved; a step back kept it for as
    long as the step."""
    wall = Clock()
    steady = [0.0]
    b = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda: steady[0])
    b.manual_lifetime = timedelta(hours=1)
    b.report(report(id="local/manual/1", provider="local", reason="manual"), manual=True)
    wall.now = T0 + timedelta(hours=3)  # stepped forward; a second has passed
    steady[0] = 1.0
    assert b.due() == ([], [])
    assert b.next_due() == wall.now + timedelta(seconds=3599)
    wall.now = T0 - timedelta(hours=3)  # stepped back; the lifetime has passed
    steady[0] = 3600.0
    _, (expired,) = b.due()
    assert expired.id == "local/manual/1" and "no deadline" in expired.detail["expired"]


def test_a_restored_notice_awaits_its_provider_for_the_grace_on_the_boot_clock() -> None:
    """A notice restored after a restart, without a deadline, awaits its watcher's report for
    the grace: on the wall clock, NTP stepping it forward just after the restart withdrew it
    (a clear) before its watcher had answered; a step back kept one the provider no longer
    shows for as long as the step."""
    b, _ = board()
    b.report(report())
    wall = Clock()
    steady = [0.0]
    restarted = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda: steady[0])
    restarted.restore([], provider=b.provider_notices())
    wall.now = T0 + timedelta(hours=3)  # stepped forward; a second has passed
    steady[0] = 1.0
    assert restarted.due() == ([], [])
    wall.now = T0 - timedelta(hours=3)  # stepped back; the grace has passed
    steady[0] = restarted.grace.total_seconds()
    _, (expired,) = restarted.due()
    assert expired.id == "aws/spot-itn/1"


def test_a_deadline_given_as_a_duration_follows_a_step_of_the_wall_clock() -> None:
    """`forewarn notify drain --deadline 15m` is 15 minutes from the command. Held as a wall
    time, NTP stepping the clock forward 25 min (first sync on a VM whose clock was behind)
    retired the drain at once with a clear and no terminate ever went out, and a step back
    of 10 min sent the terminate 10 min after the 15 had passed: both times the job's exit
    save came after the machine was gone. Now, given as a duration, its deadline is kept on
    the boot clock, moved with each step and sent again (same id), and the terminate comes
    at 15 min less the margin of real time."""
    for step in (timedelta(minutes=25), timedelta(minutes=-10)):
        wall = Clock()
        steady = [0.0]
        b = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda steady=steady: steady[0])
        raised = report(
            id="local/manual/1",
            provider="local",
            reason="manual",
            deadline=T0 + timedelta(minutes=15),
        )
        b.report(raised, manual=True, deadline_clock=900.0)
        wall.now = T0 + step + timedelta(seconds=1)
        steady[0] = 1.0
        assert b.due() == ([], []), step
        (moved,) = b.take_moved()
        assert moved.id == "local/manual/1" and moved.action == "drain"
        assert moved.deadline == wall.now + timedelta(seconds=899)
        assert b.next_due() == wall.now + timedelta(seconds=899 - 30)
        wall.now += timedelta(seconds=868)
        steady[0] += 868
        assert b.due() == ([], []) and b.take_moved() == []
        wall.now += timedelta(seconds=1)
        steady[0] += 1
        (terminate,), expired = b.due()
        assert terminate.action == "terminate" and expired == []
        assert terminate.deadline == wall.now + timedelta(seconds=30)


def test_a_deadline_given_as_a_time_stays_that_time_across_a_step() -> None:
    """`--deadline 2026-11-30T03:15:00Z` (a reclaim mail's time) names a moment: after the
    clock is stepped right, that moment is still the machine's end."""
    wall = Clock()
    steady = [0.0]
    b = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda: steady[0])
    deadline = T0 + timedelta(minutes=15)
    b.report(report(id="local/manual/1", provider="local", deadline=deadline), manual=True)
    wall.now = T0 + timedelta(minutes=14, seconds=50)  # stepped forward; 1 s has passed
    steady[0] = 1.0
    (terminate,), _ = b.due()
    assert terminate.deadline == deadline and b.take_moved() == []


def test_a_deadline_given_as_a_duration_follows_a_step_after_a_restart_in_the_same_boot() -> None:
    """The agent restarted (an upgrade) between `forewarn notify --deadline 15m` and NTP's
    step: the restored drain held its deadline at the wall time it had come to."""
    wall = Clock()
    steady = [0.0]
    b = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda: steady[0])
    raised = report(
        id="local/manual/1", provider="local", reason="manual", deadline=T0 + timedelta(minutes=15)
    )
    b.report(raised, manual=True, deadline_clock=900.0)
    saved = b.deadline_clocks()
    assert saved == {"local/manual/1": 900.0}
    restarted = NoticeBoard(Sequencer(b.sequencer.value), 30.0, now=wall, clock=lambda: steady[0])
    restarted.restore(b.manual(), [], [], deadline_clock=saved)
    wall.now = T0 + timedelta(minutes=25, seconds=60)  # stepped forward; a minute has passed
    steady[0] = 60.0
    assert restarted.due() == ([], [])
    (moved,) = restarted.take_moved()
    assert moved.deadline == wall.now + timedelta(seconds=840)


def test_a_flag_files_duration_follows_a_step_of_the_wall_clock() -> None:
    """`echo 5m > <runtime>/checkpoint-now` is 5 minutes from when the file was written, as
    `forewarn notify --deadline 5m` is from the command. Counted from the file's mtime on the
    wall clock, NTP stepping the clock forward 25 min retired the drain at once with a clear
    (no terminate ever went out), and a step back of 10 min sent the terminate 10 min late.
    Now the board keeps it on the boot clock from when it takes the report, as a notify's."""
    from forewarn.providers.local.watch import flag_report

    for step in (timedelta(minutes=25), timedelta(minutes=-10)):
        wall = Clock()
        steady = [0.0]
        b = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda steady=steady: steady[0])
        mtime_ns = int(T0.timestamp()) * 10**9
        flag = Path("/run/user/1000/forewarn/checkpoint-now")
        raised = b.report(flag_report(flag, "5m\n", mtime_ns))
        assert raised is not None and raised.deadline == T0 + timedelta(minutes=5)
        wall.now = T0 + step + timedelta(seconds=1)
        steady[0] = 1.0
        assert b.due() == ([], []), step
        (moved,) = b.take_moved()
        assert moved.id == raised.id and moved.action == "drain"
        assert moved.deadline == wall.now + timedelta(seconds=299)
        # Reported again by the watcher as it first read it (after an agent restart): the
        # deadline stays where the boot clock puts it.
        assert b.report(flag_report(flag, "5m\n", mtime_ns)) is None
        wall.now += timedelta(seconds=269)
        steady[0] += 269
        (terminate,), expired = b.due()
        assert terminate.action == "terminate" and expired == []
        assert terminate.deadline == wall.now + timedelta(seconds=30)


def test_a_flag_files_duration_follows_a_step_after_a_restart_in_the_same_boot() -> None:
    """The agent restarted (an upgrade) between the flag's writing and NTP's step: the board
    restored the drain with its deadline on the boot clock, and the watcher reporting the file
    again as it reads it does not take it back to the wall time."""
    from forewarn.providers.local.watch import flag_report

    wall = Clock()
    steady = [0.0]
    b = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda: steady[0])
    mtime_ns = int(T0.timestamp()) * 10**9
    flag = Path("/run/user/1000/forewarn/checkpoint-now")
    b.report(flag_report(flag, "5m\n", mtime_ns))
    saved = b.deadline_clocks()
    assert list(saved.values()) == [300.0]
    restarted = NoticeBoard(Sequencer(b.sequencer.value), 30.0, now=wall, clock=lambda: steady[0])
    restarted.restore([], provider=b.provider_notices(), deadline_clock=saved)
    (handed,) = restarted.provider_reports("local")
    assert handed.deadline_is_duration  # what the watcher takes up when the file is gone
    wall.now = T0 + timedelta(minutes=25, seconds=60)  # stepped forward; a minute has passed
    steady[0] = 60.0
    assert restarted.due() == ([], [])
    (moved,) = restarted.take_moved()
    assert moved.deadline == wall.now + timedelta(seconds=240)
    assert restarted.report(flag_report(flag, "5m\n", mtime_ns)) is None
    assert restarted.active()[0].deadline == moved.deadline


def _restarted_with_a_preemption(step: timedelta, down: float) -> tuple[NoticeBoard, Clock]:
    """A GCP preemption (30 s) raised by an agent whose wall clock was behind; the agent
    restarted `down` seconds of real time later in the same boot, the wall clock stepped by
    `step` meanwhile (NTP's first sync)."""
    wall = Clock()
    steady = [5000.0]
    first = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda: steady[0])
    preempted = report(
        id="gcp/preempted/1",
        action="terminate",
        reason="preemption",
        provider="gcp",
        deadline=T0 + timedelta(seconds=30),
        noticed_at=T0,
    )
    first.report(preempted)
    wall.now = T0 + step + timedelta(seconds=down)
    steady[0] += down
    restarted = NoticeBoard(
        Sequencer(first.sequencer.value), 30.0, now=wall, clock=lambda: steady[0]
    )
    restarted.restore(
        [],
        provider=first.provider_notices(),
        raised_clock=first.raised_clocks(),
        reported_clock=first.reported_clocks(),
    )
    return restarted, wall


def test_a_restored_notice_is_not_retired_at_start_by_a_deadline_a_step_made_stale() -> None:
    """A preemption read while the wall clock was 30 min behind, the agent restarted once
    NTP set the clock right: the board retired the restored terminate at start, 'past its
    deadline plus a grace of 300s' by the wall time the wrong clock gave, and its watcher,
    which keeps the stop on the boot clock, raised it again 100 ms later with the same id.
    The job saw terminate, clear, terminate: the clear withdrew the exit it was saving for,
    and the second terminate started its save again with 30 s to the end. By the boot clock
    read when it was raised (the same boot), the deadline is 30 s ahead: it waits for its
    watcher, which reports it again with the deadline moved."""
    restarted, wall = _restarted_with_a_preemption(timedelta(minutes=30), 1.0)
    assert restarted.due() == ([], [])
    (restored,) = restarted.restored_reports("gcp")
    moved = restored.model_copy(update={"deadline": wall.now + timedelta(seconds=29)})
    again = restarted.report(moved)
    assert again is not None and again.action == "terminate" and again.deadline == moved.deadline
    assert restarted.active() == [again]


def test_a_restored_notice_past_its_end_in_real_time_is_still_retired_at_start() -> None:
    """The agent down for 30 minutes (no step): the preemption's end is past by the boot
    clock too, and the notice is retired at start as before (its watcher is not asked first:
    sent active at start, a job started then exited for it before the answer)."""
    restarted, _ = _restarted_with_a_preemption(timedelta(0), 1800.0)
    (_, (expired,)) = restarted.due()
    assert expired.action == "clear" and restarted.active() == []
    assert restarted.take_confirming() == []


def test_a_restored_notice_held_past_a_step_waits_for_its_watcher_no_longer_than_a_grace() -> None:
    """Held past a stale deadline for its watcher's answer, the notice of a watcher that
    cannot answer is still retired once the grace after the restart has passed on the boot
    clock (as a restored notice without a deadline), not the step later (a clock 26 years
    behind, an RTC reset, would have kept it for good)."""
    restarted, wall = _restarted_with_a_preemption(timedelta(days=365 * 26), 1.0)
    assert restarted.due() == ([], [])
    wall.now += timedelta(seconds=299)
    restarted.clock = lambda: 5300.0
    assert restarted.due() == ([], [])
    wall.now += timedelta(seconds=2)
    restarted.clock = lambda: 5302.0
    (_, (expired,)) = restarted.due()
    assert expired.action == "clear" and restarted.active() == []


def _restarted_with_a_maintenance_drain(
    step: timedelta, reported_clock: bool = True
) -> tuple[NoticeBoard, NoticeBoard, Clock, list[float]]:
    """A GCP maintenance drain (an hour) raised by an agent whose wall clock was behind by
    `step`; the agent restarted a second later in the same boot, the wall clock stepped
    forward by `step` meanwhile (NTP's first sync)."""
    wall = Clock()
    steady = [5000.0]
    first = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda: steady[0])
    drain = report(
        id="gcp/maintenance-event/1",
        reason="host-maintenance",
        provider="gcp",
        deadline=T0 + timedelta(hours=1),
        noticed_at=T0,
    )
    first.report(drain)
    wall.now = T0 + step + timedelta(seconds=1)
    steady[0] += 1
    restarted = NoticeBoard(
        Sequencer(first.sequencer.value), 30.0, now=wall, clock=lambda: steady[0]
    )
    restarted.restore(
        [],
        provider=first.provider_notices(),
        escalated=first.escalated_ids(),
        raised_clock=first.raised_clocks(),
        reported_clock=first.reported_clocks() if reported_clock else None,
    )
    return first, restarted, wall, steady


def test_a_restored_drain_is_no_terminate_on_a_deadline_a_forward_step_made_stale() -> None:
    """GCP's TERMINATE_ON_HOST_MAINTENANCE read while the wall clock was 90 minutes behind;
    the agent restarted after NTP's step forward: the restored drain's deadline was half an
    hour past by the stepped clock, and it went out as terminate from the start (a job
    reconnecting exited an hour before the stop) until its watcher, which keeps the stop on
    the boot clock, reported it again and made it a drain. By the deadline's reading of the
    boot clock saved with it (the same boot), the stop is still an hour away: a drain, until
    its watcher says otherwise (or, not reporting it within the grace, withdraws it)."""
    first, restarted, wall, _ = _restarted_with_a_maintenance_drain(timedelta(minutes=90))
    assert first.reported_clocks() == {"gcp/maintenance-event/1": 5000.0 + 3600}
    [restored] = restarted.active()
    assert restored.action == "drain" and restarted.escalated_ids() == []
    assert restarted.due() == ([], [])
    (again,) = restarted.restored_reports("gcp")
    moved = again.model_copy(update={"deadline": wall.now + timedelta(seconds=3599)})
    sent = restarted.report(moved)
    assert sent is not None and (sent.action, sent.deadline) == ("drain", moved.deadline)
    assert restarted.reported_clocks() == {"gcp/maintenance-event/1": 5000.0 + 3600}
    assert restarted.next_due() == moved.deadline - timedelta(seconds=30)


def test_a_restored_drain_past_its_deadline_in_real_time_is_still_a_terminate() -> None:
    """No reading saved (a file of an older agent, another boot): the wall time judges the
    restored drain as before. A step back leaves it a drain, as the wall time has it."""
    _, restarted, _, _ = _restarted_with_a_maintenance_drain(timedelta(minutes=90), False)
    assert restarted.active()[0].action == "terminate"
    _, restarted, _, _ = _restarted_with_a_maintenance_drain(timedelta(minutes=-90))
    assert restarted.active()[0].action == "drain"


def test_a_terminate_given_a_duration_is_sent_again_when_a_step_moves_its_deadline() -> None:
    """`forewarn notify terminate --deadline 15m`, then NTP stepped the wall clock back 10
    minutes (or forward): the deadline moved with the boot clock, and escalation and expiry
    followed it, but the terminate was not sent again as a drain is: its subscribers kept a
    deadline 10 minutes off, and a job weighing a background save against the time left
    took the wrong time. An escalated drain (sent as terminate) is the same."""
    for step in (timedelta(minutes=-10), timedelta(minutes=5)):
        wall = Clock()
        steady = [0.0]
        b = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda steady=steady: steady[0])
        for notice_id, action, seconds in (("1", "terminate", 900.0), ("2", "drain", 20.0)):
            raised = report(
                id=f"local/manual/{notice_id}",
                provider="local",
                reason="manual",
                action=action,
                deadline=T0 + timedelta(seconds=seconds),
            )
            sent = b.report(raised, manual=True, deadline_clock=seconds)
            assert sent is not None and sent.action == "terminate"
        wall.now = T0 + step + timedelta(seconds=1)
        steady[0] = 1.0
        assert b.due() == ([], []), step
        moved = {notice.id: notice for notice in b.take_moved()}
        assert sorted(moved) == ["local/manual/1", "local/manual/2"], step
        for notice_id, seconds in (("local/manual/1", 899), ("local/manual/2", 19)):
            assert moved[notice_id].action == "terminate"
            assert moved[notice_id].deadline == wall.now + timedelta(seconds=seconds)
        assert b.active() == sorted(moved.values(), key=lambda notice: notice.seq)
        assert b.due() == ([], []) and b.take_moved() == []


def test_a_duration_restored_after_a_forward_step_is_no_terminate_at_the_start() -> None:
    """`forewarn notify drain --deadline 15m`, the agent restarted (an upgrade) after NTP
    stepped the wall clock forward 25 minutes, in the same boot: the restored drain was
    judged on the wall time its deadline had come to, ten minutes past, and went out as
    terminate at the start (jobs saved and exited with 14 minutes to go), before its
    deadline was moved to where the boot clock puts it. It is restored there, a drain."""
    wall = Clock()
    steady = [0.0]
    b = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda: steady[0])
    raised = report(
        id="local/manual/1", provider="local", reason="manual", deadline=T0 + timedelta(minutes=15)
    )
    b.report(raised, manual=True, deadline_clock=900.0)
    wall.now = T0 + timedelta(minutes=25, seconds=1)  # stepped forward; a second has passed
    steady[0] = 1.0
    restarted = NoticeBoard(Sequencer(b.sequencer.value), 30.0, now=wall, clock=lambda: steady[0])
    restarted.restore(b.manual(), [], [], deadline_clock=b.deadline_clocks())
    [restored] = restarted.active()
    assert restored.action == "drain" and restarted.escalated_ids() == []
    assert restored.deadline == wall.now + timedelta(seconds=899)
    assert restarted.due() == ([], []) and restarted.take_moved() == []


def test_a_restored_drain_is_not_sent_as_terminate_at_start_by_a_deadline_a_step_made_stale() -> (
    None
):
    """An AWS scheduled reboot 20 min ahead, read while the wall clock was 3 h behind, the
    agent restarted (same boot) once NTP set the clock right: the restored drain was sent as
    terminate at start, its deadline 2 h 40 min past by the wall time the wrong clock gave
    it, and as a drain again 0.2 s later at its watcher's first answer (same id, the deadline
    moved). A `forewarn wait --for terminate && kill` stopped its job for nothing, and a guard
    whose step outran that answer saved and exited. By the boot clock read when it was raised
    the deadline is still 20 min ahead: it stays a drain and waits for its watcher."""
    wall = Clock()
    steady = [5000.0]
    first = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda: steady[0])
    scheduled = report(
        id="aws/scheduled/instance-event-1",
        reason="scheduled-maintenance",
        deadline=T0 + timedelta(minutes=20),
        noticed_at=T0,
    )
    assert first.report(scheduled) is not None
    wall.now = T0 + timedelta(hours=3, seconds=7)
    steady[0] += 7.0
    restarted = NoticeBoard(
        Sequencer(first.sequencer.value), 30.0, now=wall, clock=lambda: steady[0]
    )
    restarted.restore(
        [],
        provider=first.provider_notices(),
        raised_clock=first.raised_clocks(),
        reported_clock=first.reported_clocks(),
    )
    assert [n.action for n in restarted.active()] == ["drain"]
    assert restarted.due() == ([], [])
    due_next = restarted.next_due()
    assert due_next is not None and due_next > wall.now  # no loop of due() meanwhile
    moved = scheduled.model_copy(update={"deadline": wall.now + timedelta(minutes=20)})
    again = restarted.report(moved)
    assert again is not None and again.action == "drain" and again.deadline == moved.deadline


def test_a_duration_restored_after_a_step_before_the_restart_keeps_its_boot_clock_deadline() -> (
    None
):
    """`forewarn notify drain --deadline 3m` on an agent whose wall clock was 3 h behind, the
    agent restarted (same boot) after NTP set the clock right: the restored drain, 2 min 50 s
    from its end by the boot clock, was sent as terminate at start with its deadline 3 h in
    the past (the wall time the wrong clock gave it) and stayed so: jobs exited 2 min early.
    Its deadline is where the boot clock puts it, a drain until the exit margin of that."""
    from forewarn.providers.local.watch import flag_report

    wall = Clock()
    steady = [0.0]
    b = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda: steady[0])
    raised = report(
        id="local/manual/1", provider="local", reason="manual", deadline=T0 + timedelta(minutes=3)
    )
    b.report(raised, manual=True, deadline_clock=180.0)
    mtime_ns = int(T0.timestamp()) * 10**9
    flag = flag_report(Path("checkpoint-now"), "3m\n", mtime_ns)
    b.report(flag.model_copy(update={"noticed_at": T0}))  # read as written
    wall.now = T0 + timedelta(hours=3, seconds=10)
    steady[0] = 10.0
    restarted = NoticeBoard(Sequencer(b.sequencer.value), 30.0, now=wall, clock=lambda: steady[0])
    restarted.restore(
        b.manual(),
        provider=b.provider_notices(),
        deadline_clock=b.deadline_clocks(),
        raised_clock=b.raised_clocks(),
        reported_clock=b.reported_clocks(),
    )
    expected = wall.now + timedelta(seconds=170)
    assert [(n.action, n.deadline) for n in restarted.active()] == [("drain", expected)] * 2
    assert restarted.due() == ([], []) and restarted.take_moved() == []
    wall.now += timedelta(seconds=141)
    steady[0] += 141.0
    escalated, expired = restarted.due()
    assert [(n.action, n.deadline) for n in escalated] == [("terminate", expected)] * 2
    assert expired == []


def _gcp_stop(deadline: datetime, **kwargs: object) -> Report:
    """A GCP maintenance drain as its watcher emits it: kept on the boot clock."""
    fields: dict[str, object] = {
        "id": "gcp/maintenance-event/1",
        "reason": "host-maintenance",
        "provider": "gcp",
        "deadline": deadline,
        "noticed_at": T0,
        "detail": {"maintenance-event": "TERMINATE_ON_HOST_MAINTENANCE"},
        "deadline_on_boot_clock": True,
    }
    fields.update(kwargs)
    return report(**fields)


def test_a_gcp_stop_follows_a_step_of_the_wall_clock_while_the_agent_runs() -> None:
    """TERMINATE_ON_HOST_MAINTENANCE (an hour, counted by the watcher on the boot clock), then
    NTP stepped the wall clock forward while the agent ran. Taken as a moment, 90 min forward
    it was past its deadline plus the grace: cleared at once, raised again by the watcher 15 s
    later with the deadline moved; 59 to 65 min forward it went out as terminate, jobs exiting
    an hour before the stop. Held on the boot clock from the report, it is re-sent as a drain
    with the deadline moved, and the watcher's own move (within the tolerance) sends nothing."""
    for step in (90, 59, 62, 65, -30):
        wall = Clock()
        steady = [5000.0]
        b = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda steady=steady: steady[0])
        raised = b.report(_gcp_stop(T0 + timedelta(hours=1)))
        assert raised is not None and raised.action == "drain"
        wall.now = T0 + timedelta(minutes=step, seconds=10)
        steady[0] += 10
        assert b.due() == ([], []), step
        (moved,) = b.take_moved()
        assert (moved.id, moved.action) == (raised.id, "drain"), step
        assert moved.deadline == wall.now + timedelta(seconds=3590), step
        # The watcher's answer 15 s later, with the deadline its boot clock gives (to the
        # millisecond, not the microsecond): the same deadline, nothing to send.
        wall.now += timedelta(seconds=15)
        steady[0] += 15
        followed = moved.deadline + timedelta(milliseconds=3)  # type: ignore[operator]
        assert b.report(_gcp_stop(followed)) is None, step
        assert b.due() == ([], []) and b.take_moved() == [], step
        # Escalated on the boot clock's reckoning: at the stop minus the exit margin.
        wall.now = moved.deadline - timedelta(seconds=31)  # type: ignore[operator]
        steady[0] = 5000.0 + 3600 - 31
        assert b.due() == ([], []), step
        wall.now += timedelta(seconds=2)
        steady[0] += 2
        (terminate,), expired = b.due()
        assert terminate.action == "terminate" and expired == [], step


def test_a_gcp_stop_takes_the_watchers_deadline_at_each_report() -> None:
    """Unlike a flag file's duration, whose first reading the board keeps, a stop kept on the
    boot clock by its watcher is taken as each report gives it (a preemption after the
    maintenance notice, a restored stop's reading): the board's anchor moves with it."""
    wall = Clock()
    steady = [0.0]
    b = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda: steady[0])
    b.report(_gcp_stop(T0 + timedelta(hours=1)))
    sooner = b.report(_gcp_stop(T0 + timedelta(minutes=20)))
    assert sooner is not None and sooner.deadline == T0 + timedelta(minutes=20)
    assert b.deadline_clocks() == {"gcp/maintenance-event/1": 1200.0}
    wall.now = T0 + timedelta(minutes=40)  # stepped 40 min forward at once
    assert b.due() == ([], [])
    (moved,) = b.take_moved()
    assert moved.deadline == wall.now + timedelta(minutes=20)


def test_a_gcp_stop_restored_in_the_same_boot_stays_on_the_boot_clock() -> None:
    """Saved with its reading of the boot clock, a stop comes back held there, marked as its
    watcher's (not a flag file's duration, which the board would hold against the watcher)."""
    wall = Clock()
    steady = [0.0]
    b = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda: steady[0])
    b.report(_gcp_stop(T0 + timedelta(hours=1)))
    restarted = NoticeBoard(Sequencer(b.sequencer.value), 30.0, now=wall, clock=lambda: steady[0])
    wall.now = T0 + timedelta(minutes=90, seconds=30)  # stepped while the agent was down
    steady[0] = 30.0
    restarted.restore([], provider=b.provider_notices(), deadline_clock=b.deadline_clocks())
    (handed,) = restarted.provider_reports("gcp")
    assert handed.deadline_on_boot_clock and not handed.deadline_is_duration
    [restored] = restarted.active()
    assert restored.action == "drain"
    assert restored.deadline == wall.now + timedelta(seconds=3570)
    assert restarted.due() == ([], [])


def test_a_terminate_past_its_deadline_names_its_unacked_clients_once_per_deadline() -> None:
    b, clock = board(margin=30)
    b.client_joined("trainer")
    b.client_joined("saver")
    b.report(report(action="terminate", deadline=T0 + timedelta(minutes=2)))
    b.record_ack("aws/spot-itn/1", "saver", 1.0)
    clock.now = T0 + timedelta(minutes=1, seconds=59)
    assert b.overdue() == [] and b.unacked_past_deadline() == {}
    clock.now = T0 + timedelta(minutes=2)
    (late,) = b.overdue()
    assert late.notice.id == "aws/spot-itn/1" and late.clients == ["trainer"]
    assert late.deadline == T0 + timedelta(minutes=2)
    assert b.overdue() == []  # told once
    assert b.unacked_past_deadline() == {"aws/spot-itn/1": ["trainer"]}
    # Its provider moves the deadline later: told again once that one passes.
    b.report(report(action="terminate", deadline=T0 + timedelta(minutes=5)))
    assert b.overdue() == [] and b.unacked_past_deadline() == {}
    clock.now = T0 + timedelta(minutes=5)
    assert [late.clients for late in b.overdue()] == [["trainer"]]
    # Acked at last: nothing more to say.
    b.record_ack("aws/spot-itn/1", "trainer", 1.0)
    assert b.unacked_past_deadline() == {}


def test_a_client_gone_before_its_terminate_ack_is_named_at_the_deadline() -> None:
    """One that left after its ack, or came back, is not; one that left while the notice
    was a drain never received the terminate and is not either."""
    b, clock = board(margin=30)
    for client in ("killed", "saver", "returns", "early"):
        b.client_joined(client)
    b.report(report(action="drain", deadline=T0 + timedelta(minutes=10)))
    b.client_left("early")  # left under the drain
    b.report(report(action="terminate", deadline=T0 + timedelta(minutes=2)))
    b.record_ack("aws/spot-itn/1", "saver", 1.0)
    b.client_left("saver")
    b.client_left("killed")
    b.client_left("returns")
    b.client_joined("returns")
    clock.now = T0 + timedelta(minutes=2)
    (late,) = b.overdue()
    # `returns` came back after the notice counted as flushed by the clients left: as any
    # client that joins then, it is not waited for.
    assert late.clients == ["killed"] and late.gone == ["killed"]
    assert b.unacked_past_deadline() == {"aws/spot-itn/1": ["killed"]}


def test_a_terminate_every_client_acked_is_not_overdue() -> None:
    b, clock = board(margin=30)
    b.client_joined("trainer")
    b.report(report(action="terminate", deadline=T0 + timedelta(minutes=2)))
    b.record_ack("aws/spot-itn/1", "trainer", 1.0)
    clock.now = T0 + timedelta(minutes=3)
    assert b.overdue() == [] and b.unacked_past_deadline() == {}


def test_a_boot_clock_reading_past_any_time_in_a_state_file_does_not_stop_the_board() -> None:
    """A state file (damaged, or edited by hand) whose `deadline_clock` read 1e300: restored,
    the drain's deadline on the wall clock was made with `timedelta(seconds=1e300)` outside
    the guard against an overflow, and `due()` raised OverflowError; the agent's escalation
    task died at once and the agent exited (\"unexpected OverflowError: Python int too large
    to convert to C int\"). The deadline is the latest time there is, as for any reading past
    a datetime."""
    wall = Clock()
    steady = [0.0]
    b = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda: steady[0])
    raised = report(
        id="local/manual/1", provider="local", reason="manual", deadline=T0 + timedelta(minutes=15)
    )
    b.report(raised, manual=True, deadline_clock=900.0)
    restarted = NoticeBoard(Sequencer(b.sequencer.value), 30.0, now=wall, clock=lambda: steady[0])
    restarted.restore(b.manual(), [], [], deadline_clock={"local/manual/1": 1e300})
    steady[0] = 60.0
    wall.now = T0 + timedelta(minutes=30)  # a step forward: the board follows the clock
    assert restarted.due() == ([], [])
    (held,) = restarted.manual()
    assert held.deadline is not None and held.deadline.year == 9999


@given(
    readings=st.tuples(*[st.floats(0.0, 1.7e308) | st.none() for _ in range(3)]),
    step=st.sampled_from([timedelta(0), timedelta(minutes=30), timedelta(minutes=-30)]),
)
def test_any_boot_clock_readings_in_a_state_file_leave_the_board_running(
    readings: tuple[float | None, float | None, float | None], step: timedelta
) -> None:
    """The state loader keeps any finite reading that is not negative (`_clock_readings`):
    whatever they are, the restored board judges its notices and stops nothing."""
    wall = Clock()
    steady = [0.0]
    b = NoticeBoard(Sequencer(0), 30.0, now=wall, clock=lambda: steady[0])
    raised = report(
        id="local/manual/1", provider="local", reason="manual", deadline=T0 + timedelta(minutes=15)
    )
    b.report(raised, manual=True, deadline_clock=900.0)
    restarted = NoticeBoard(Sequencer(b.sequencer.value), 30.0, now=wall, clock=lambda: steady[0])
    raised_at, deadline_at, reported_at = readings
    restarted.restore(
        b.manual(),
        [],
        [],
        raised_clock={} if raised_at is None else {"local/manual/1": raised_at},
        deadline_clock={} if deadline_at is None else {"local/manual/1": deadline_at},
        reported_clock={} if reported_at is None else {"local/manual/1": reported_at},
    )
    steady[0] = 60.0
    wall.now = T0 + timedelta(minutes=1) + step
    restarted.due()
    restarted.take_moved()
    assert [notice.id for notice in restarted.manual()] == ["local/manual/1"]


def test_a_manual_notice_of_the_boot_before_ends_at_once_if_its_deadline_preceded_it() -> None:
    """Restored from an earlier boot's state, a manual terminate whose deadline passed before
    this machine started is retired at the first `due()`, saying so; one whose deadline came
    after this boot began (the agent started late) keeps the grace, as in the same boot."""
    before, _ = board()
    local = {"provider": "local", "reason": "manual", "action": "terminate"}
    for name, minutes in (("gone", -3), ("this-boot", -1)):
        deadline = T0 + timedelta(minutes=minutes)
        notice = report(**local, id=f"local/manual/{name}", noticed_at=T0 - timedelta(hours=1))
        before.report(notice.model_copy(update={"deadline": deadline}), manual=True)
    restarted, _ = board()
    restarted.restore(before.manual(), booted=T0 - timedelta(minutes=2))
    _, expired = restarted.due()
    assert [n.id for n in expired] == ["local/manual/gone"]
    assert "passed before this machine started" in expired[0].detail["expired"]
    assert [n.id for n in restarted.active()] == ["local/manual/this-boot"]
    same_boot, _ = board()
    same_boot.restore(before.manual())
    assert same_boot.due() == ([], [])
    assert len(same_boot.active()) == 2


def test_a_manual_terminate_without_a_deadline_of_the_boot_before_ends_at_once() -> None:
    """`forewarn notify terminate; sudo reboot`: the terminate asked that boot's jobs to exit
    and stood the rest of its lifetime for the jobs started after the boot. Retired at the
    start; a drain without a deadline (one more save) keeps its lifetime, as before."""
    before, clock = board()
    local = {"provider": "local", "reason": "manual", "noticed_at": T0}
    before.report(report(**local, id="local/manual/stop", action="terminate"), manual=True)
    before.report(report(**local, id="local/manual/save", action="drain"), manual=True)
    clock.now = T0 + timedelta(minutes=5)
    restarted, _ = board()
    restarted.now = clock
    restarted.restore(before.manual(), booted=T0 + timedelta(minutes=2))
    _, expired = restarted.due()
    assert [n.id for n in expired] == ["local/manual/stop"]
    assert "raised without a deadline before this machine" in expired[0].detail["expired"]
    assert [n.id for n in restarted.active()] == ["local/manual/save"]
