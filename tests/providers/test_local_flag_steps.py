"""The flag file's watcher after a step of the wall clock: a deadline written as a duration
(`5m`) is five minutes of real time from the writing, whatever NTP does to the clock."""

from __future__ import annotations

import asyncio
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from forewarn.protocol.timefmt import format_time, parse_duration, parse_time
from forewarn.providers.base import PollHealth, WatcherContext
from forewarn.providers.local import watch
from forewarn.providers.report import Report
from hypothesis import assume, given
from hypothesis import strategies as st

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=timezone.utc)


class Clocks:
    """The wall clock and the boot clock the watcher reads, set by the test."""

    def __init__(self) -> None:
        self.wall = T0
        self.boot = 1000.0

    def step(self, wall: timedelta, elapsed: float) -> None:
        self.wall += wall + timedelta(seconds=elapsed)
        self.boot += elapsed


@pytest.fixture
def clocks(monkeypatch: pytest.MonkeyPatch) -> Clocks:
    held = Clocks()
    monkeypatch.setattr(watch, "utcnow", lambda: held.wall)
    monkeypatch.setattr(watch, "since_boot", lambda: held.boot)
    return held


@pytest.mark.parametrize("content", ["5m\n", "2026-11-30T03:05:00Z\n"])
def test_a_flushed_flags_duration_stays_in_force_after_a_forward_step(
    tmp_path: Path, clocks: Clocks, content: str
) -> None:
    """`echo 5m > checkpoint-now`, the job flushed, and NTP had stepped the clock forward 25
    min meanwhile: the watcher judged the deadline by the wall clock, found it past, and
    withdrew the drain with a clear, so no terminate ever went out. One minute of real time
    has passed: the drain stays in force (the agent sends the terminate at its deadline). A
    deadline written as a time names a moment, which a step does not move: that one is past."""
    flag = tmp_path / "checkpoint-now"
    flag.write_text(content)
    mtime_ns = int(T0.timestamp()) * 10**9
    os.utime(flag, ns=(mtime_ns, mtime_ns))
    context = WatcherContext(tmp_path, tmp_path, PollHealth("local"))
    watcher = watch.LocalWatcher(flag, 0.25, context)
    emitted: list[Report] = []
    watcher._emit = emitted.append  # as `watch` sets it; a poll is all this test needs
    asyncio.run(watcher.poll(emitted.append))
    (raised,) = emitted
    assert raised.deadline == T0 + timedelta(minutes=5)
    clocks.step(timedelta(minutes=25), 60.0)
    watcher.flushed(raised.id)
    assert not flag.exists()
    if content == "5m\n":
        assert emitted == [raised] and watcher.current == raised
    else:
        assert [r.action for r in emitted] == ["drain", "clear"] and watcher.current is None


_FLAG_LINES = st.sampled_from(
    ["5m", "90", " 2h 30m", "1.5", "2026-11-30T03:05:00Z", "2026-11-30T03:05:00+01:00", "06:00"]
)


@given(st.one_of(_FLAG_LINES, st.text(max_size=40)), st.sampled_from(["", "\n", "\nnote"]))
def test_a_flags_deadline_is_a_duration_exactly_when_its_line_is_no_time(
    line: str, rest: str
) -> None:
    """A flag's deadline is held on the boot clock when it was written as a duration, and
    only then: it is the writing's time plus that duration. One written as a time, and text
    that is no deadline, are left as they were."""
    created = datetime(2026, 12, 2, tzinfo=timezone.utc)
    text = line + rest
    report = watch.flag_report(Path("/tmp/flag"), text, int(created.timestamp()) * 10**9)
    first = text.strip().splitlines()[0] if text.strip() else ""
    try:
        parse_time(first)
    except ValueError:
        is_time = False
    else:
        is_time = True
    assert report.deadline_is_duration == (report.deadline is not None and not is_time)
    if report.deadline_is_duration:
        assert report.deadline == created + timedelta(seconds=parse_duration(first))


_SECONDS = st.floats(-1e7, 1e7, allow_nan=False)


@given(_SECONDS, st.floats(0, 1e7), st.one_of(st.none(), st.floats(0, 1e7)))
def test_a_flags_anchor_is_its_mtime_unless_the_clock_shows_a_step_since(
    written_off: float, booted: float, empty_for: float | None
) -> None:
    """Read at T0 with the boot clock at `booted`, a file written `written_off` seconds
    before (negative: an mtime in the future), the watcher's last look without the file
    `empty_for` seconds before (None: it was there at the first look, so only the boot
    bounds it). The mtime stands where the file can have been written then; else the first
    read is the anchor."""
    empty_at = None if empty_for is None else max(0.0, booted - empty_for)
    written = T0 - timedelta(seconds=written_off)
    anchor = watch.written_anchor(written, T0, booted, empty_at)
    since = booted - empty_at if empty_at is not None else booted
    slack = watch.FLAG_CLOCK_SLACK
    # Times hold microseconds: a hair from either bound is either side.
    assume(abs(written_off + slack) > 1e-3 and abs(written_off - since - slack) > 1e-3)
    possible = -slack <= written_off <= since + slack
    assert anchor == (written if possible else T0)
    assert T0 - timedelta(seconds=since + slack) <= anchor <= T0 + timedelta(seconds=slack)


def test_without_a_boot_clock_only_an_mtime_in_the_future_is_no_anchor() -> None:
    hour = timedelta(hours=1)
    assert watch.written_anchor(T0 - hour, T0, None, None) == T0 - hour
    assert watch.written_anchor(T0 + hour, T0, None, None) == T0


@pytest.mark.parametrize("step", [timedelta(hours=2), timedelta(hours=-2)], ids=["fwd", "back"])
def test_a_flag_written_before_a_step_and_read_after_counts_from_the_read(
    tmp_path: Path, clocks: Clocks, step: timedelta
) -> None:
    """The watcher looked and found no file; `echo 10m > checkpoint-now` then, on the clock
    before NTP's step; the step; the watcher's next look. Counted from the mtime the deadline
    was 1 h 50 min past (forward) or 2 h 10 min away (back): it is 10 min from the read."""
    flag = tmp_path / "checkpoint-now"
    context = WatcherContext(tmp_path, tmp_path, PollHealth("local"))
    watcher = watch.LocalWatcher(flag, 0.25, context)
    emitted: list[Report] = []
    asyncio.run(watcher.poll(emitted.append))
    assert emitted == []
    flag.write_text("10m\n")
    mtime_ns = int((clocks.wall + timedelta(seconds=0.1)).timestamp()) * 10**9
    os.utime(flag, ns=(mtime_ns, mtime_ns))
    clocks.step(step, 0.25)
    asyncio.run(watcher.poll(emitted.append))
    (raised,) = emitted
    assert raised.deadline == clocks.wall + timedelta(minutes=10)
    assert raised.detail["notice_time"] == format_time(clocks.wall)
    assert raised.deadline_is_duration


@pytest.mark.parametrize("volatile", [False, True], ids=["persistent", "tmpfs"])
def test_a_flag_left_from_an_earlier_boot_counts_its_duration_from_its_mtime(
    tmp_path: Path, clocks: Clocks, monkeypatch: pytest.MonkeyPatch, volatile: bool
) -> None:
    """`echo 10m > checkpoint-now` two days ago, then a reboot, on a runtime directory that
    is no tmpfs: its mtime, before this boot, was taken for a step of the clock and the
    `10m` counted from the first read, a fresh deadline 10 min away (measured with a real
    agent: `deadline=...10:33:30Z` read at 10:23:30), a terminate to every job on the node.
    A moment written so was "more than 300 s past when read: a flag file left over?", a drain
    without a deadline. On a filesystem that outlives a reboot the mtime may be an earlier
    boot's: the duration counts from it, one rule with a moment and with the kept deadline
    (`protocol.flagkept`); on a tmpfs, the file is this boot's and the clock was stepped."""
    monkeypatch.setattr(watch, "outlives_boot", lambda path: not volatile)
    flag = tmp_path / "checkpoint-now"
    flag.write_text("10m\n")
    written = T0 - timedelta(days=2)
    mtime_ns = int(written.timestamp()) * 10**9
    os.utime(flag, ns=(mtime_ns, mtime_ns))
    context = WatcherContext(tmp_path, tmp_path, PollHealth("local"))
    watcher = watch.LocalWatcher(flag, 0.25, context)
    emitted: list[Report] = []
    asyncio.run(watcher.poll(emitted.append))
    (raised,) = emitted
    if volatile:
        assert raised.deadline == T0 + timedelta(minutes=10)
    else:
        assert raised.deadline is None, raised


def test_a_flag_written_in_an_earlier_boot_keeps_a_deadline_still_ahead(
    tmp_path: Path, clocks: Clocks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`echo 2h > checkpoint-now` 30 min before this boot (1000 s ago), on a persistent
    runtime directory: the writing plus 2 h, not 2 h from the read."""
    monkeypatch.setattr(watch, "outlives_boot", lambda path: True)
    flag = tmp_path / "checkpoint-now"
    flag.write_text("2h\n")
    written = T0 - timedelta(seconds=1000 + 1800)
    mtime_ns = int(written.timestamp()) * 10**9
    os.utime(flag, ns=(mtime_ns, mtime_ns))
    context = WatcherContext(tmp_path, tmp_path, PollHealth("local"))
    watcher = watch.LocalWatcher(flag, 0.25, context)
    emitted: list[Report] = []
    asyncio.run(watcher.poll(emitted.append))
    (raised,) = emitted
    assert raised.deadline == written + timedelta(hours=2)


@pytest.mark.parametrize("content", ["5m\n", "2026-11-30T02:56:20Z\n"], ids=["duration", "time"])
@pytest.mark.parametrize("past_boot", [-100.0, 60.0], ids=["before-boot", "after-boot"])
def test_an_earlier_boots_flag_deadline_that_passed_before_this_boot_is_dead(
    tmp_path: Path,
    clocks: Clocks,
    monkeypatch: pytest.MonkeyPatch,
    content: str,
    past_boot: float,
) -> None:
    """`echo 5m > checkpoint-now` (or the time it names) on a persistent runtime directory,
    then a reboot 2 min ago: its deadline passed 100 s before this boot began, 220 s ago,
    within the 300 s a deadline read late stands. It stood, a terminate due at once: every job
    started after the boot saved and exited at its first step, where the same deadline kept
    beside the file (`flagkept.seconds_left`) and a `forewarn notify --deadline` of the boot
    before are dead (one rule: it named the machine the reboot ended). One that passed after
    this boot began (60 s after, 60 s ago) still stands, as theirs do."""
    monkeypatch.setattr(watch, "outlives_boot", lambda path: True)
    clocks.boot = 120.0
    booted = T0 - timedelta(seconds=clocks.boot)
    deadline = booted + timedelta(seconds=past_boot)
    if content != "5m\n":
        content = format_time(deadline) + "\n"
    flag = tmp_path / "checkpoint-now"
    flag.write_text(content)
    written = deadline - timedelta(minutes=5)
    mtime_ns = int(written.timestamp()) * 10**9
    os.utime(flag, ns=(mtime_ns, mtime_ns))
    context = WatcherContext(tmp_path, tmp_path, PollHealth("local"))
    watcher = watch.LocalWatcher(flag, 0.25, context)
    emitted: list[Report] = []
    asyncio.run(watcher.poll(emitted.append))
    (raised,) = emitted
    if past_boot < 0:
        assert raised.deadline is None, raised
        assert raised.detail["note"] == content.strip()
    else:
        assert raised.deadline == deadline
