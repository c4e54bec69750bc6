"""A node whose clock is hours off the API server's: Karpenter's termination timestamp (a time
on the cluster's clock) goes out as this node's clock reads it, read against the `Date` of the
API server's answers, across a step of the clock and an agent restart."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from forewarn.agent.board import NoticeBoard, Sequencer
from forewarn.protocol.timefmt import format_time, parse_time, utcnow
from forewarn.providers.base import PollHealth, WatcherContext
from forewarn.providers.kubernetes import watch as k8s_watch
from forewarn.providers.kubernetes.settings import Settings
from forewarn.providers.kubernetes.watch import KubernetesWatcher, as_written
from forewarn.providers.report import Report
from forewarn.providers.skew import CLOCK_AHEAD
from hypothesis import given
from hypothesis import strategies as st
from k8s_support import NODE, Cluster, Running
from support import running_watcher

TAINT = f"kubernetes/{NODE}/taint/karpenter.sh/disrupted"
DELETING = f"kubernetes/{NODE}/deleting"


class SteppedClock:
    """The wall clock as the watcher sees it: the true time plus `ahead`, which a test steps."""

    def __init__(self, ahead: timedelta) -> None:
        self.ahead = ahead

    def __call__(self) -> datetime:
        return utcnow() + self.ahead


def _in(minutes: int) -> str:
    return format_time(
        datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=minutes)
    )


def _shift(report: Report, written: datetime) -> float:
    assert report.deadline is not None
    return (report.deadline - written).total_seconds()


def _watcher(cluster: Cluster, tmp_path: Path) -> KubernetesWatcher:
    settings = Settings(
        url=cluster.url, node_name=NODE, token_file=cluster.token_file, retry_max=0.3
    )
    return KubernetesWatcher(settings, WatcherContext(tmp_path, tmp_path, PollHealth("k")))


@pytest.mark.parametrize("hours", [2, -2])
async def test_karpenters_deadline_is_timed_on_a_node_clock_hours_off_as_on_a_right_one(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hours: int
) -> None:
    # The board and the job time the deadline by this node's clock. 2 h behind, Karpenter's
    # forced termination 30 min away was 2 h 30 min away: one drain, and the terminate came 2
    # h after the machine was gone (the job trained on unsaved into it); 2 h ahead, 1 h 30
    # min past: a terminate at once. The API server's answers carry a `Date`.
    clock = SteppedClock(timedelta(hours=hours))
    monkeypatch.setattr(k8s_watch, "utcnow", clock)
    monkeypatch.setattr(k8s_watch, "CLOCK_CHECK", 0.05)
    async with running_watcher(Running(_watcher(cluster, tmp_path))) as run:
        await run.until(lambda: run.watcher.watches >= 1, what="the first watch")
        assert "clock" in run.health.conditions
        termination = _in(30)
        written = parse_time(termination)
        cluster.raise_("karpenter", termination=termination)
        await run.until(
            lambda: any(r.id == DELETING and r.deadline for r in run.reports), 8, "the deadline"
        )
        timed = [r for r in run.reports if r.deadline is not None]
        assert {r.id for r in timed} == {TAINT, DELETING}
        for report in timed:
            # The skew is read from a Date of whole seconds.
            assert _shift(report, written) == pytest.approx(hours * 3600, abs=3)
            assert report.detail[CLOCK_AHEAD] == _shift(report, written)
        notice = NoticeBoard(Sequencer(0), 30.0, now=clock).report(timed[-1])
        assert notice is not None and notice.action == "drain"
        seen = len(run.reports)
        clock.ahead = timedelta(0)  # NTP's step, in the middle of a watch
        await run.until(lambda: len(run.reports) >= seen + 2, 3, "the deadlines again")
        for report in run.reports[seen:]:
            assert (report.action, report.deadline) == ("drain", written)
            assert CLOCK_AHEAD not in report.detail
        assert "clock" not in run.health.conditions


@pytest.mark.parametrize("drift", [0, 30])
async def test_a_restart_on_a_clock_hours_off_sends_karpenters_deadline_as_restored(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drift: int
) -> None:
    # After an agent restart the watcher is given its notices as the agent restored them, on
    # this node's clock: its first list must send them as they were, not as written first
    # (the job told of a deadline 2 h off), nor moved twice by the skew they carry, nor
    # moved by the few seconds the skew read now differs from theirs (a `Date` has whole
    # seconds; an unset clock drifts: `drift`), each a changed notice to every job.
    clock = SteppedClock(timedelta(hours=-2))
    monkeypatch.setattr(k8s_watch, "utcnow", clock)
    termination = _in(30)
    written = parse_time(termination)
    cluster.raise_("karpenter", termination=termination)
    async with running_watcher(Running(_watcher(cluster, tmp_path))) as first:
        await first.until(
            lambda: any(r.id == DELETING and r.deadline for r in first.reports), 8, "the deadline"
        )
        held = {r.id: r for r in first.reports}
    clock.ahead += timedelta(seconds=drift)
    watcher = _watcher(cluster, tmp_path)
    watcher.restored(list(held.values()))
    assert "clock" in watcher.health.conditions  # before the first answer
    async with running_watcher(Running(watcher)) as again:
        await again.until(lambda: again.watcher.watches >= 1, what="the first watch")
        assert [(r.id, r.deadline) for r in again.reports] == [
            (r.id, r.deadline) for r in held.values()
        ]
        for report in again.reports:
            if report.deadline is not None:
                assert _shift(report, written) == pytest.approx(-7200, abs=3)
        assert "clock" in again.health.conditions


@given(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=10),
    )
)
def test_a_restored_deadline_is_read_as_written_from_any_saved_skew(seconds: Any) -> None:
    deadline = datetime(2030, 1, 1, tzinfo=timezone.utc)
    detail: dict[str, Any] = {"node": NODE} if seconds is None else {CLOCK_AHEAD: seconds}
    report = Report(
        id=TAINT, action="drain", reason="node-drain", provider="kubernetes", deadline=deadline
    ).model_copy(update={"detail": detail})
    found = as_written(report)
    assert isinstance(found, datetime)
    if isinstance(seconds, int) and not isinstance(seconds, bool) and abs(seconds) < 10**8:
        assert found == deadline - timedelta(seconds=seconds)
