"""A step of the wall clock while a provider notice whose deadline names a moment stands: the
board judges it on the later of the wall clock and the boot clock's reading at its last
report until its watcher reports it again (STEP_SETTLE at most), for a forward step its
watcher is sure to see (more than STEP_SEEN); any smaller step leaves the wall clock as it
is. A board on two clocks: the wall clock the test steps, and a boot clock no step moves."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from forewarn.agent.board import STEP_SEEN, STEP_SETTLE, NoticeBoard, Sequencer
from forewarn.agent.protocol import Report
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from support import examples

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=timezone.utc)
ID = "kubernetes/node-1/taint/karpenter.sh/disrupted"


class Clocks:
    """The wall clock (`now`, stepped by `step`) and the boot clock (`boot`), both run by
    `run`."""

    def __init__(self) -> None:
        self.boot = 0.0
        self.lead = 0.0  # the wall clock's step from the boot clock, in seconds

    def now(self) -> datetime:
        return T0 + timedelta(seconds=self.boot + self.lead)

    def run(self, seconds: float) -> None:
        self.boot += seconds

    def step(self, seconds: float) -> None:
        self.lead += seconds


def _board(margin: float = 30.0, *, vouched: bool = True) -> tuple[NoticeBoard, Clocks]:
    clocks = Clocks()
    board = NoticeBoard(
        Sequencer(0),
        margin,
        now=clocks.now,
        clock=lambda: clocks.boot,
        clock_vouched=lambda provider: vouched,
    )
    return board, clocks


def _karpenter(deadline: datetime, **detail: object) -> Report:
    return Report(
        id=ID,
        action="drain",
        reason="node-drain",
        provider="kubernetes",
        deadline=deadline,
        detail=dict(detail),
    )


def test_a_step_into_the_exit_margin_sends_no_terminate_before_the_watcher_speaks() -> None:
    """Karpenter's termination 30 min away on a right clock; a step of 29 min 45 s forward
    (a bad time source). Taken as a moment, the deadline was 15 s away: the drain went out
    as terminate at once and the job exited half an hour early. The watcher, seeing the new
    skew, reports it moved; only that is sent: a drain, deadline 29 min 45 s later."""
    board, clocks = _board()
    written = T0 + timedelta(minutes=30)
    assert board.report(_karpenter(written)) is not None
    clocks.run(10)
    clocks.step(timedelta(minutes=29, seconds=45).total_seconds())
    clocks.run(1)
    assert board.due() == ([], [])
    assert board.take_moved() == []
    moved = written + timedelta(minutes=29, seconds=45)
    resent = board.report(_karpenter(moved, clock_ahead_seconds=1785.0))
    assert resent is not None and (resent.action, resent.deadline) == ("drain", moved)
    assert board.due() == ([], [])


def test_a_report_its_watcher_made_before_it_saw_the_step_sends_no_terminate() -> None:
    """Karpenter's termination 30 min away on a right clock; a step 2 h forward; within the
    watcher's CLOCK_CHECK (5 s) of it, a node event re-sends the drain with a new detail,
    its deadline still moved by the skew from before the step. Taken as the watcher's word
    on the step, that report ended the settle and went out as terminate, 90 min past its
    deadline by the stepped clock (seen under load in
    test_a_step_that_makes_a_right_clock_wrong_sends_karpenters_drains_once_and_no_clear):
    the job exited half an hour early. Before the board has looked at its clocks, or after."""
    for looked_first in (False, True):
        board, clocks = _board()
        written = T0 + timedelta(minutes=30)
        assert board.report(_karpenter(written)) is not None
        clocks.run(10)
        clocks.step(timedelta(hours=2).total_seconds())
        clocks.run(1)
        if looked_first:
            assert board.due() == ([], [])
        stale = board.report(_karpenter(written, nodeclaim="default-x7k2p"))
        assert stale is not None and stale.action == "drain", (looked_first, stale)
        assert board.due() == ([], []), looked_first
        moved = written + timedelta(hours=2)
        resent = board.report(
            _karpenter(moved, nodeclaim="default-x7k2p", clock_ahead_seconds=7200.0)
        )
        assert resent is not None and (resent.action, resent.deadline) == ("drain", moved)
        assert board.due() == ([], []), looked_first


def test_a_step_past_deadline_and_grace_retires_nothing_before_the_watcher_speaks() -> None:
    board, clocks = _board()
    board.report(_karpenter(T0 + timedelta(minutes=30)))
    clocks.step(timedelta(hours=2).total_seconds())
    for _ in range(int(STEP_SETTLE) - 1):
        clocks.run(1)
        assert board.due() == ([], [])


def test_a_watcher_that_never_speaks_leaves_the_wall_clock_to_judge_after_the_settle() -> None:
    """The settle is bounded: a watcher that does not report the notice again (a provider
    unreachable) has it judged on the wall clock again, as before."""
    board, clocks = _board()
    board.report(_karpenter(T0 + timedelta(minutes=30)))
    clocks.step(timedelta(hours=2).total_seconds())
    clocks.run(1)
    assert board.due() == ([], [])
    settle_ends = board.next_due()
    assert settle_ends is not None and settle_ends <= clocks.now() + timedelta(seconds=STEP_SETTLE)
    clocks.run(STEP_SETTLE)
    assert board.due()[1] == [] and len(board.take_confirming()) == 1  # its watcher asked
    clocks.run(board.grace.total_seconds())  # and it does not answer within the grace
    escalated, expired = board.due()
    assert [n.action for n in expired] == ["clear"], (escalated, expired)


def test_a_step_within_the_trusted_skew_is_taken_as_the_wall_clock_says() -> None:
    """A step of 4 minutes (NTP setting a clock that was behind right) may be the right
    clock's: neither the watcher nor the board can tell, and the wall clock judges, as
    before: a deadline 3 minutes away becomes a terminate at once."""
    board, clocks = _board()
    board.report(_karpenter(T0 + timedelta(minutes=3)))
    clocks.step(timedelta(minutes=4).total_seconds())
    clocks.run(1)
    escalated, _ = board.due()
    assert [n.action for n in escalated] == ["terminate"]


def test_a_change_of_the_skew_alone_is_no_change_but_shows_in_the_notice() -> None:
    board, _ = _board()
    deadline = T0 + timedelta(hours=1)
    board.report(_karpenter(deadline, clock_ahead_seconds=-7200.0))
    assert board.report(_karpenter(deadline)) is None
    [active] = board.active()
    assert "clock_ahead_seconds" not in active.detail
    assert board.report(_karpenter(deadline, node="n1")) is not None


@given(
    step=st.floats(min_value=-86400 * 30, max_value=86400 * 30, allow_nan=False),
    left=st.floats(min_value=-600, max_value=86400, allow_nan=False),
)
def test_after_any_step_the_board_never_acts_before_the_clocks_it_trusts_say(
    step: float, left: float
) -> None:
    """Whatever the step: a terminate or a retirement never comes before the wall clock says;
    after a forward step its watcher will see (more than STEP_SEEN), nor before the boot
    clock says."""
    margin, grace = 30.0, 300.0
    board, clocks = _board(margin)
    board.report(_karpenter(T0 + timedelta(seconds=left)))
    clocks.run(1)
    clocks.step(step)
    escalated, expired = board.due()
    trusted = [left - 1 - step]  # seconds left by the wall clock
    if step > STEP_SEEN.total_seconds():
        trusted.append(left - 1)  # by the boot clock
    if escalated:
        assert all(seconds <= margin for seconds in trusted), (step, left)
    if expired:
        assert all(seconds + grace <= 0 for seconds in trusted), (step, left)


def test_a_flag_files_time_has_no_provider_clock_and_follows_the_wall_clock() -> None:
    """A flag file's deadline written as a time is the wall clock's: no watcher will re-time
    it, so a step is taken at once, as before (the settle held its terminate for 70 s)."""
    board, clocks = _board()
    flag = Report(
        id="local/flag/1",
        action="drain",
        reason="manual",
        provider="local",
        deadline=T0 + timedelta(minutes=30),
    )
    board.report(flag)
    clocks.step(timedelta(minutes=29, seconds=45).total_seconds())
    clocks.run(1)
    escalated, _ = board.due()
    assert [n.action for n in escalated] == ["terminate"]


def _reclaim(deadline: datetime) -> Report:
    return Report(
        id="digitalocean/reclaim/1",
        action="drain",
        reason="reclaim",
        provider="digitalocean",
        deadline=deadline,
    )


def test_a_deadline_no_provider_date_vouched_for_follows_the_wall_clock_at_once() -> None:
    """A reclaim mail's deadline read on a clock 3 h behind, with no droplet metadata (no
    `Date`): no watcher will re-time it after NTP's step. Held for the settle, its terminate
    due 20 s after the step came 50 s after the reclaim's deadline."""
    board, clocks = _board(vouched=False)
    board.report(_reclaim(T0 + timedelta(hours=3, seconds=50)))
    clocks.step(timedelta(hours=3).total_seconds())
    clocks.run(19)
    assert board.due() == ([], [])
    assert board.next_due() == T0 + timedelta(hours=3, seconds=20)
    clocks.run(1)
    escalated, _ = board.due()
    assert [(n.action, n.id) for n in escalated] == [("terminate", "digitalocean/reclaim/1")]


@settings(max_examples=examples(60))
@given(
    step=st.floats(min_value=-86400 * 30, max_value=86400 * 30, allow_nan=False),
    left=st.floats(min_value=32, max_value=86400, allow_nan=False),  # a drain when reported
)
def test_after_any_step_an_unvouched_deadline_is_acted_on_when_the_wall_clock_says(
    step: float, left: float
) -> None:
    """Whatever the step, a deadline no provider clock vouched for is escalated exactly when
    the wall clock puts it within the margin (retired past the grace): never held for a
    re-timing that will not come."""
    margin, grace = 30.0, 300.0
    board, clocks = _board(margin, vouched=False)
    board.report(_reclaim(T0 + timedelta(seconds=left)))
    clocks.run(1)
    clocks.step(step)
    escalated, expired = board.due()
    # Past its end, its watcher is asked whether the provider still shows it (the end's
    # action, a retirement if no report comes): acted on all the same.
    ended = expired or board.take_confirming()
    wall_left = left - 1 - step
    assume(abs(wall_left - margin) > 0.01 and abs(wall_left + grace) > 0.01)  # microseconds
    assert bool(escalated or ended) == (wall_left <= margin), (step, left, escalated)
    assert bool(ended) == (wall_left + grace <= 0), (step, left, expired)


class SteppingClocks(Clocks):
    """`Clocks` whose wall clock steps by `seconds` as it is read the `at_read`-th time from
    `arm` (0: at the next read): a step that lands while the board is in the middle of one
    call, between two of its readings, as NTP's step lands between two instructions."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.armed: tuple[int, float] | None = None

    def arm(self, at_read: int, seconds: float) -> None:
        self.reads, self.armed = 0, (at_read, seconds)

    def now(self) -> datetime:
        if self.armed is not None and self.reads >= self.armed[0]:
            self.step(self.armed[1])
            self.armed = None
        self.reads += 1
        return super().now()


DELETING = "kubernetes/node-1/deleting"


def _karpenters_two(deadline: datetime, **detail: object) -> list[Report]:
    return [
        _karpenter(deadline, **detail),
        _karpenter(deadline, **detail).model_copy(update={"id": DELETING}),
    ]


@settings(max_examples=examples(60))
@given(
    at_read=st.integers(min_value=0, max_value=40),
    step=st.floats(min_value=STEP_SEEN.total_seconds() + 1, max_value=86400 * 30, allow_nan=False),
)
def test_a_step_landing_inside_a_due_call_sends_no_terminate_and_no_clear(
    at_read: int, step: float
) -> None:
    """Karpenter's two drains (its taint, the node's deletion), termination 30 min away on a
    right clock; a forward step of the wall clock lands while `due()` runs, between two of
    its readings of the wall clock. `due()` judged each notice on whichever reading it made
    for it: the taint on the one before the step, the deletion on the one after it, unsettled
    (the step not seen yet): the deletion went out as terminate 22 ms after the step, half an
    hour early, and the taint stayed a drain (seen under load in
    test_a_step_that_makes_a_right_clock_wrong_sends_karpenters_drains_once_and_no_clear).
    Wherever the step lands, nothing is escalated or retired before the watcher speaks, and
    its report of the moved deadline sends each a drain."""
    clocks = SteppingClocks()
    board = NoticeBoard(Sequencer(0), 30.0, now=clocks.now, clock=lambda: clocks.boot)
    written = T0 + timedelta(minutes=30)
    for report in _karpenters_two(written):
        assert board.report(report) is not None
    clocks.run(0.02)
    clocks.arm(at_read, step)
    for _ in range(3):
        assert board.due() == ([], []), (at_read, step, clocks.reads)
        assert board.take_moved() == []
        clocks.run(1)
    moved = written + timedelta(seconds=step)
    for report in _karpenters_two(moved, clock_ahead_seconds=step):
        resent = board.report(report)
        assert resent is not None and (resent.action, resent.deadline) == ("drain", moved)
    assert board.due() == ([], [])


def _skewed_board(skews: dict[str, float]) -> tuple[NoticeBoard, Clocks]:
    """A board whose watchers hold the skews in `skews` (the test changes them as a watcher
    re-measures), as the agent's runner gives them (`PollHealth.ahead`)."""
    clocks = Clocks()
    board = NoticeBoard(
        Sequencer(0),
        30.0,
        now=clocks.now,
        clock=lambda: clocks.boot,
        clock_skews=lambda: dict(skews),
    )
    return board, clocks


def test_a_new_notice_its_watcher_made_before_it_saw_the_step_sends_no_terminate() -> None:
    """This node's clock right, a step 2 h forward; before the watcher has re-measured its
    skew (CLOCK_CHECK, or a report queued as the step landed), Karpenter's termination 30 min
    away is reported for the first time, on the skew from before the step: 90 min past by
    the stepped clock. The settle covered only notices that already had a deadline: this one
    went out as terminate at once (the job out half an hour early), then as a clear. Judged
    on the clock it was made on until its watcher speaks: a drain, and the watcher's report
    on the new skew keeps it one."""
    for looked_first in (False, True):
        skews = {"kubernetes": 0.0}
        board, clocks = _skewed_board(skews)
        clocks.run(10)
        assert board.due() == ([], [])
        written = T0 + timedelta(minutes=30)
        clocks.step(timedelta(hours=2).total_seconds())
        clocks.run(1)
        if looked_first:
            assert board.due() == ([], [])
        stale = board.report(_karpenter(written))
        assert stale is not None and stale.action == "drain", (looked_first, stale)
        for _ in range(3):
            clocks.run(1)
            assert board.due() == ([], []), looked_first
        skews["kubernetes"] = 7200.0  # the watcher's next look at the clock
        moved = written + timedelta(hours=2)
        resent = board.report(_karpenter(moved, clock_ahead_seconds=7200.0))
        assert resent is not None and (resent.action, resent.deadline) == ("drain", moved)
        clocks.run(STEP_SETTLE)
        assert board.due() == ([], []), looked_first


def test_a_deadline_first_reported_across_a_step_sends_no_terminate() -> None:
    """Karpenter's drain first reported without a deadline (the NodeClaim not read yet), a
    step 2 h forward, then its deadline 30 min away on the skew from before the step: a
    drain, not a terminate."""
    board, clocks = _skewed_board({"kubernetes": 0.0})
    assert board.report(_karpenter(None)) is not None  # type: ignore[arg-type]
    clocks.run(10)
    clocks.step(timedelta(hours=2).total_seconds())
    clocks.run(1)
    stale = board.report(_karpenter(T0 + timedelta(minutes=30)))
    assert stale is not None and stale.action == "drain", stale
    assert board.due() == ([], [])


def test_a_new_notice_on_the_new_skew_is_judged_at_once() -> None:
    """The watcher re-measured its skew before it reported: its deadline is right, and one
    inside the exit margin goes out as terminate at once, never held for the settle."""
    skews = {"kubernetes": 0.0}
    board, clocks = _skewed_board(skews)
    assert board.due() == ([], [])
    clocks.step(timedelta(hours=2).total_seconds())
    clocks.run(1)
    skews["kubernetes"] = 7200.0
    near = clocks.now() + timedelta(seconds=20)
    sent = board.report(_karpenter(near, clock_ahead_seconds=7200.0))
    assert sent is not None and sent.action == "terminate", sent


@settings(max_examples=examples(60))
@given(
    step=st.floats(min_value=STEP_SEEN.total_seconds() + 1, max_value=86400 * 30),
    before=st.floats(min_value=-86400, max_value=86400),
    left=st.floats(min_value=-600, max_value=86400),
    retimed=st.booleans(),
)
def test_a_new_notice_across_a_step_is_judged_on_the_clock_it_was_made_on(
    step: float, before: float, left: float, retimed: bool
) -> None:
    """Whatever the skew before the step and the step: a new notice reported after it is
    escalated exactly when the clock it was made on (before the step, or after it where its
    watcher had re-measured) puts it within the margin: neither early nor late."""
    skews = {"kubernetes": before}
    board, clocks = _skewed_board(skews)
    assert board.due() == ([], [])
    clocks.step(step)
    clocks.run(1)
    ahead = before + step if retimed else before
    skews["kubernetes"] = ahead if retimed else before
    # `left` seconds away on the clock the report is made on: before the step, or after.
    made_on = clocks.now() - timedelta(seconds=0 if retimed else step)
    deadline = made_on + timedelta(seconds=left)
    report = _karpenter(deadline, clock_ahead_seconds=ahead) if ahead else _karpenter(deadline)
    sent = board.report(report)
    assume(abs(left - 30.0) > 0.01)
    assert sent is not None and sent.action == ("terminate" if left <= 30.0 else "drain"), (
        step,
        before,
        left,
        retimed,
        sent,
    )


@settings(max_examples=examples(60))
@given(
    skew=st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=10),
    )
)
def test_any_skew_in_a_report_across_a_step_is_taken_without_raising(skew: object) -> None:
    """A report's `clock_ahead_seconds` is any value in its detail: one that is no finite
    number counts as none (zero), and the report is judged, never refused."""
    board, clocks = _skewed_board({"kubernetes": 0.0})
    assert board.due() == ([], [])
    clocks.step(timedelta(hours=2).total_seconds())
    clocks.run(1)
    detail = {} if skew is None else {"clock_ahead_seconds": skew}
    assert board.report(_karpenter(T0 + timedelta(minutes=30), **detail)) is not None


def test_a_report_on_the_boot_clock_made_on_the_skew_before_a_step_sends_no_terminate() -> None:
    """This node's clock 2 h behind the cluster's: Karpenter's termination, 30 min away, goes
    out moved by the skew and held on the boot clock (`deadline_on_boot_clock`). NTP steps
    the clock 2 h forward, and before the watcher re-measures its skew (CLOCK_CHECK) it
    reports the termination on the skew from before: a first report, or the standing one
    again (a node event). Such a report was taken as made now, its deadline 90 min past by
    the stepped clock: a terminate at once, the job out half an hour early. Its skew tells it
    was made before the step; its deadline is where the clock it was made on puts it."""
    for first in (True, False):
        skews = {"kubernetes": -7200.0}
        board, clocks = _skewed_board(skews)
        clocks.step(-7200.0)  # the node's clock 2 h behind
        termination = T0 + timedelta(minutes=30)  # by the cluster's clock, boot clock 0
        made = termination - timedelta(hours=2)  # as the node's clock reads it
        skewed = _karpenter(made, clock_ahead_seconds=-7200.0).model_copy(
            update={"deadline_on_boot_clock": True}
        )
        if not first:
            sent = board.report(skewed)
            assert sent is not None and sent.action == "drain"
        clocks.run(10)
        assert board.due() == ([], [])
        clocks.step(7200.0)  # NTP's step: the wall clock is right
        clocks.run(1)
        stale = board.report(skewed)
        if stale is not None:
            assert stale.action == "drain", (first, stale)
            assert abs(stale.deadline - termination) < timedelta(seconds=2), (first, stale)
        for _ in range(3):
            clocks.run(1)
            escalated, expired = board.due()
            assert (escalated, expired) == ([], []), first
            assert all(n.action == "drain" for n in board.take_moved()), first
        [active] = board.active()
        assert active.action == "drain", first
        assert abs(active.deadline - termination) < timedelta(seconds=2), (first, active)
        skews["kubernetes"] = 0.0  # the watcher's next look at the clock
        assert board.report(_karpenter(termination)) is None, first
        clocks.run(STEP_SETTLE)
        assert board.due() == ([], []), first
