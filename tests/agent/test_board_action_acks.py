"""Acks belong to an action: a drain's ack (a flush and go on) is no terminate's (the exit's
save), though the board re-sends a drain as terminate under the same id."""

from __future__ import annotations

from datetime import timedelta

from forewarn.agent.board import NoticeBoard, Remembered
from test_board import T0, Clock, board, report

ID = "aws/spot-itn/1"


def _escalated_after_acks(*clients: str) -> tuple[NoticeBoard, Clock]:
    """A drain due at T0 + 10 min (margin 60 s) acked by `clients`, then escalated."""
    b, clock = board(margin=60)
    for client in ("a", "b"):
        b.client_joined(client)
    b.report(report(deadline=T0 + timedelta(minutes=10)))
    for client in clients:
        b.record_ack(ID, client, 1.0)
    clock.now = T0 + timedelta(minutes=9)
    (escalated,), _ = b.due()
    assert escalated.action == "terminate"
    return b, clock


def test_an_escalated_drain_waits_for_the_terminates_acks_not_the_drains() -> None:
    b, _ = _escalated_after_acks("a", "b")
    assert b.acked_by(ID) == {}
    # Nor saved for (the heartbeat's `acked`): no job has acted on the terminate yet.
    assert b.saved() == []
    assert b.unacked_clients(ID) == {"a", "b"}
    assert b.record_ack(ID, "a", 1.0) is False
    assert b.record_ack(ID, "b", 1.0) is True  # flushed as a terminate: its provider is told
    assert b.acked_by(ID) == {ID: {"a", "b"}}
    assert b.saved() == [ID]  # saved for as a terminate: an earlier job acted on it


def test_a_client_that_acked_only_the_drain_is_named_past_the_deadline() -> None:
    b, clock = _escalated_after_acks("a", "b")
    b.record_ack(ID, "b", 1.0)
    clock.now = T0 + timedelta(minutes=10)
    (late,) = b.overdue()
    assert late.clients == ["a"]
    assert b.unacked_past_deadline() == {ID: ["a"]}


def test_a_client_gone_after_the_drain_is_neither_acked_nor_gone_for_the_terminate() -> None:
    """It never received the terminate: not listed as acking it, nor as gone before its ack."""
    b, clock = board(margin=60)
    for client in ("a", "b"):
        b.client_joined(client)
    b.report(report(deadline=T0 + timedelta(minutes=10)))
    b.record_ack(ID, "a", 1.0)
    b.record_ack(ID, "b", 1.0)
    b.client_left("b")
    clock.now = T0 + timedelta(minutes=9)
    b.due()
    assert b.acked_by(ID) == {}
    assert b.record_ack(ID, "a", 1.0) is True
    clock.now = T0 + timedelta(minutes=10)
    assert b.overdue() == [] and b.gone_past_deadline() == {}


def test_a_terminate_sent_as_a_drain_again_waits_for_the_drains_acks() -> None:
    b, _ = _escalated_after_acks()
    b.record_ack(ID, "a", 1.0)
    again = b.report(report(deadline=T0 + timedelta(hours=2)))
    assert again is not None and again.action == "drain"
    assert b.acked_by(ID) == {} and b.unacked_clients(ID) == {"a", "b"}


def test_a_provider_changing_the_action_under_the_same_id_waits_for_the_new_acks() -> None:
    b, _ = board()
    b.client_joined("a")
    b.report(report(id="local/manual/x", provider="local", reason="manual"))
    assert b.record_ack("local/manual/x", "a", 1.0) is True
    sent = b.report(
        report(id="local/manual/x", provider="local", reason="manual", action="terminate")
    )
    assert sent is not None and sent.action == "terminate"
    assert b.acked_by("local/manual/x") == {}
    assert b.record_ack("local/manual/x", "a", 1.0) is True  # flushed again, as a terminate


def test_a_hold_not_answered_for_the_drain_is_waited_for_by_the_terminate() -> None:
    b, clock = board(margin=60)
    b.report(report(deadline=T0 + timedelta(minutes=10)))
    assert b.hold(ID, "loop") and b.hold(ID, "done")
    b.record_ack(ID, "done", 1.0)
    clock.now = T0 + timedelta(minutes=9)
    b.due()
    assert b.held_by() == {ID: ["loop"]}
    assert b.record_ack(ID, "loop", 1.0) is True


def test_the_state_says_which_action_the_acks_were_for() -> None:
    b, _ = _escalated_after_acks("a")
    assert b.acked_for() == {}
    b.record_ack(ID, "b", 1.0)
    assert b.acked_for() == {ID: "terminate"}


def test_a_drain_acked_before_a_restart_and_restored_as_terminate_waits_for_new_acks() -> None:
    """The agent was down while the drain's deadline came within the margin: it comes back as
    terminate, and the acks saved were the drain's."""
    before, _ = board(margin=60)
    before.client_joined("a")
    before.report(report(deadline=T0 + timedelta(minutes=10)))
    before.record_ack(ID, "a", 1.0)
    assert before.acked_for() == {ID: "drain"}
    restarted, later = board(margin=60)
    later.now = T0 + timedelta(minutes=9, seconds=30)
    restarted.restore(
        [],
        saved=before.saved(),
        provider=before.provider_notices(),
        acked_by=before.acked_by(),
        expected_by=before.expected_by(),
        received_by=before.received_by(),
        acked_for=before.acked_for(),
    )
    assert restarted.get(ID) is not None and restarted.get(ID).action == "terminate"  # type: ignore[union-attr]
    assert restarted.acked_by(ID) == {} and restarted.saved() == []
    restarted.client_joined("a")
    assert restarted.record_ack(ID, "a", 1.0) is True


def test_an_escalated_drains_acks_restored_as_terminate_count() -> None:
    b, _ = _escalated_after_acks()
    b.record_ack(ID, "a", 1.0)
    b.record_ack(ID, "b", 1.0)
    restarted, later = board(margin=60)
    later.now = T0 + timedelta(minutes=9, seconds=10)
    restarted.restore(
        [],
        saved=b.saved(),
        provider=b.provider_notices(),
        escalated=b.escalated_ids(),
        acked_by=b.acked_by(),
        expected_by=b.expected_by(),
        received_by=b.received_by(),
        acked_for=b.acked_for(),
    )
    assert restarted.get(ID).action == "terminate"  # type: ignore[union-attr]
    assert restarted.acked_by(ID) == {ID: {"a", "b"}}
    assert restarted.flushed_ids("aws") == [ID]


def test_a_state_without_the_acks_action_keeps_its_acks_as_before() -> None:
    """A file of an agent before `acked_for`: its acks count for what the notice comes back
    as, as that agent counted them (nothing told flushed is told again)."""
    b, _ = _escalated_after_acks("a", "b")
    b.record_ack(ID, "a", 1.0)
    b.record_ack(ID, "b", 1.0)
    restarted, later = board(margin=60)
    later.now = T0 + timedelta(minutes=9, seconds=10)
    restarted.restore(
        [],
        saved=b.saved(),
        provider=b.provider_notices(),
        escalated=b.escalated_ids(),
        acked_by=b.acked_by(),
        expected_by=b.expected_by(),
        received_by=b.received_by(),
    )
    assert restarted.acked_by(ID) == {ID: {"a", "b"}}
    assert restarted.flushed_ids("aws") == [ID]


def test_a_retired_drain_raised_again_as_terminate_waits_for_new_acks() -> None:
    """Retired with the drain's acks, and raised again by its provider past its deadline (a
    terminate at once): the drain's acks are not the terminate's."""
    b, clock = board(margin=60)
    b.grace = timedelta(seconds=60)
    b.client_joined("a")
    b.report(report(deadline=T0 + timedelta(hours=1)))
    b.record_ack(ID, "a", 1.0)
    b.remembered[ID] = Remembered(T0, True, {"a"}, {"a"}, True, "drain")
    del b.entries[ID]
    clock.now = T0 + timedelta(hours=2)
    raised = b.report(report(deadline=T0 + timedelta(hours=1)))
    assert raised is not None and raised.action == "terminate"
    assert b.acked_by(ID) == {} and b.saved() == []
    assert b.record_ack(ID, "a", 1.0) is True


def test_a_terminate_sent_as_a_drain_again_stays_saved_for() -> None:
    """The exit's save answers the drain the terminate becomes again (its deadline moved
    out): still listed as saved for, so a job started after it does not save the same state
    again, as before."""
    b, _ = _escalated_after_acks()
    b.record_ack(ID, "a", 1.0)
    again = b.report(report(deadline=T0 + timedelta(hours=2)))
    assert again is not None and again.action == "drain"
    assert b.saved() == [ID]


def test_a_drains_receiver_not_back_after_a_restart_is_not_named_for_its_terminate() -> None:
    """`b` received the drain and did not come back after the agent's restart (it died while
    the agent was down); the drain then went out as terminate. `b` never received the
    terminate, as a job gone before the escalation did not, yet the restored agent named it
    past the terminate's deadline as a client that had not acked it."""
    before, _ = board(margin=60)
    for client in ("a", "b"):
        before.client_joined(client)
    before.report(report(deadline=T0 + timedelta(minutes=10)))
    before.record_ack(ID, "a", 1.0)
    restarted, clock = board(margin=60)
    restarted.restore(
        [],
        saved=before.saved(),
        provider=before.provider_notices(),
        acked_by=before.acked_by(),
        expected_by=before.expected_by(),
        received_by=before.received_by(),
        acked_for=before.acked_for(),
    )
    restarted.client_joined("a")
    clock.now = T0 + timedelta(minutes=9)
    (escalated,), _ = restarted.due()
    assert escalated.action == "terminate"
    assert restarted.record_ack(ID, "a", 1.0) is True
    clock.now = T0 + timedelta(minutes=10)
    assert restarted.overdue() == [] and restarted.unacked_past_deadline() == {}


def test_a_client_gone_before_its_drain_ack_is_not_named_for_the_restored_terminate() -> None:
    """`b` left before its ack of the drain (kept, for `status`), and the drain's deadline
    came within the margin while the agent was down: it comes back as terminate, which `b`
    never received, and `b` is not named past its deadline."""
    before, _ = board(margin=60)
    for client in ("a", "b"):
        before.client_joined(client)
    before.report(report(deadline=T0 + timedelta(minutes=10)))
    before.record_ack(ID, "a", 1.0)
    before.client_left("b")
    assert before.gone_before_ack() == {ID: ["b"]}
    restarted, later = board(margin=60)
    later.now = T0 + timedelta(minutes=9, seconds=30)
    restarted.restore(
        [],
        saved=before.saved(),
        provider=before.provider_notices(),
        acked_by=before.acked_by(),
        expected_by=before.expected_by(),
        received_by=before.received_by(),
        gone=before.gone_to_save(),
        acked_for=before.acked_for(),
    )
    assert restarted.get(ID).action == "terminate"  # type: ignore[union-attr]
    assert restarted.gone_before_ack() == {}
    restarted.client_joined("a")
    assert restarted.record_ack(ID, "a", 1.0) is True
    later.now = T0 + timedelta(minutes=10)
    assert restarted.overdue() == [] and restarted.unacked_past_deadline() == {}


def test_a_drains_failed_save_is_kept_across_a_restart_while_it_stays_a_drain() -> None:
    before, _ = board(margin=60)
    before.client_joined("a")
    before.report(report(deadline=T0 + timedelta(minutes=10)))
    assert before.record_failure(ID, "a", "OSError: disk full") is True
    assert before.failed_to_save() == {ID: {"a": "OSError: disk full"}}
    restarted, _ = board(margin=60)
    restarted.restore(
        [],
        provider=before.provider_notices(),
        received_by=before.received_by(),
        save_failed=before.failed_to_save(),
    )
    assert restarted.get(ID).action == "drain"  # type: ignore[union-attr]
    assert restarted.failed_to_save() == {ID: {"a": "OSError: disk full"}}


def test_a_drains_failed_save_is_not_the_terminate_it_comes_back_as() -> None:
    """The drain's deadline came within the margin while the agent was down: its failed
    save is no answer to the terminate, as at an escalation within one run."""
    before, _ = board(margin=60)
    before.client_joined("a")
    before.report(report(deadline=T0 + timedelta(minutes=10)))
    before.record_failure(ID, "a", "OSError: disk full")
    restarted, later = board(margin=60)
    later.now = T0 + timedelta(minutes=9, seconds=30)
    restarted.restore(
        [],
        provider=before.provider_notices(),
        received_by=before.received_by(),
        save_failed=before.failed_to_save(),
    )
    assert restarted.get(ID).action == "terminate"  # type: ignore[union-attr]
    assert restarted.failed_to_save() == {}


def test_an_escalated_drains_failed_save_of_the_terminate_is_kept_across_a_restart() -> None:
    b, _ = _escalated_after_acks()
    b.record_failure(ID, "a", "OSError: disk full")
    restarted, later = board(margin=60)
    later.now = T0 + timedelta(minutes=9)
    restarted.restore(
        [],
        provider=b.provider_notices(),
        escalated=b.escalated_ids(),
        received_by=b.received_by(),
        save_failed=b.failed_to_save(),
    )
    assert restarted.get(ID).action == "terminate"  # type: ignore[union-attr]
    assert restarted.failed_to_save() == {ID: {"a": "OSError: disk full"}}


def test_a_client_gone_before_its_terminate_ack_is_kept_across_a_restart() -> None:
    """`b` received the terminate the drain was escalated to and left before its ack: the
    restarted agent still lists it gone and names it past the deadline. The saved notice is
    the drain, un-escalated; compared with it, the terminate looked like a change and `b` was
    forgotten (found: `gone_before_ack()` was {} after the restore)."""
    b, _ = _escalated_after_acks()
    b.record_ack(ID, "a", 1.0)
    b.client_left("b")
    assert b.gone_before_ack() == {ID: ["b"]}
    restarted, later = board(margin=60)
    later.now = T0 + timedelta(minutes=9)
    restarted.restore(
        [],
        saved=b.saved(),
        provider=b.provider_notices(),
        escalated=b.escalated_ids(),
        acked_by=b.acked_by(),
        expected_by=b.expected_by(),
        received_by=b.received_by(),
        gone=b.gone_to_save(),
        acked_for=b.acked_for(),
    )
    assert restarted.get(ID).action == "terminate"  # type: ignore[union-attr]
    assert restarted.gone_before_ack() == {ID: ["b"]}
    later.now = T0 + timedelta(minutes=10)
    assert restarted.unacked_past_deadline() == {ID: ["b"]}


def test_a_client_that_received_the_terminate_is_named_after_a_restart() -> None:
    """`b` received the escalated terminate and has not acked it when the agent restarts:
    named at the deadline as one that received it (not forgotten as a drain's receiver)."""
    b, _ = _escalated_after_acks()
    b.record_ack(ID, "a", 1.0)
    restarted, later = board(margin=60)
    later.now = T0 + timedelta(minutes=9)
    restarted.restore(
        [],
        saved=b.saved(),
        provider=b.provider_notices(),
        escalated=b.escalated_ids(),
        acked_by=b.acked_by(),
        expected_by=b.expected_by(),
        received_by=b.received_by(),
        acked_for=b.acked_for(),
    )
    later.now = T0 + timedelta(minutes=10)
    assert restarted.unacked_past_deadline() == {ID: ["b"]}
