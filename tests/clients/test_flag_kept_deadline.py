"""The deadline of a flag file handled with no agent, kept beside it (`<flag>.jobs/`) for the
jobs that start before it passes, and the rules that end it: a file removed by hand before
every job saved, a flag without a deadline handled later, a deadline long past, an earlier
boot."""

from __future__ import annotations

import json
import logging
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from flag_guard import looked, save_for_flag
from forewarn.clients import CheckpointGuard
from forewarn.protocol import flagkept
from forewarn.protocol.flagfile import past_when_read
from forewarn.protocol.flagkept import KeptDeadline, KeptDeadlines, parse_record, record_name
from forewarn.protocol.timefmt import format_time, utcnow
from hypothesis import given, settings
from hypothesis import strategies as st
from support import eventually, examples


def job(flag: Path, margin: float = 1.0) -> CheckpointGuard:
    return CheckpointGuard(
        notices=False, handle_signals=False, flag_file=flag, agree=False, exit_margin=margin
    )


# A flag file left over: written this long ago (after this machine booted: one older is read
# as written before a step of the clock), its deadline this long past, more than the grace.
WRITTEN_AGO = 900.0
PAST_BY = 600.0


def records(flag: Path) -> list[str]:
    directory = flag.with_name(flag.name + ".jobs")
    try:
        return sorted(name for name in os.listdir(directory) if name.startswith(".deadline-"))
    except FileNotFoundError:
        return []


def test_a_job_started_after_the_last_one_closed_still_gets_the_deadline(tmp_path: Path) -> None:
    """The only job saved (the file removed) and ended; the deadline is an hour away: a job
    started now saves for the flag and holds the deadline, as the agent replays the drain."""
    flag = tmp_path / "checkpoint-now"
    first = job(flag)
    try:
        flag.write_text("1h\n")
        save_for_flag(first)
        assert not flag.exists()
    finally:
        first.close()
    assert len(records(flag)) == 1, "the kept deadline went with the last job"
    late = job(flag)
    try:
        eventually(lambda: late.due(1), timeout=5, what="the late job's save for the flag")
        result = late.saved(1, 0.01)
        assert result.reasons == ("flag",) and not result.exit
        assert late._flag_deadline is not None
        assert abs((late._flag_deadline - utcnow()).total_seconds() - 3600) < 30
        assert not late.due(2), "saved once for it, as for the file"
    finally:
        late.close()


def test_a_flag_removed_by_hand_before_every_job_saved_keeps_no_deadline(tmp_path: Path) -> None:
    flag = tmp_path / "checkpoint-now"
    first, second = job(flag), job(flag)
    late: CheckpointGuard | None = None
    try:
        flag.write_text("1h\n")
        save_for_flag(first)
        eventually(lambda: second.due(1), timeout=5, what="the second job's flag")
        flag.unlink()  # withdrawn while the second job still saves
        assert not second.saved(1, 0.01).exit
        assert records(flag) == []
        late = job(flag)
        looked(late)
        assert not late.due(1) and late._flag_deadline is None
    finally:
        for guard in (first, second, late):
            if guard is not None:
                guard.close()


def test_a_flag_without_a_deadline_handled_later_withdraws_the_kept_one(tmp_path: Path) -> None:
    """Written again without a deadline (a new request), the agent clears the kept drain: the
    jobs then running drop the deadline, and so does a job started after its save."""
    flag = tmp_path / "checkpoint-now"
    first = job(flag)
    late: CheckpointGuard | None = None
    try:
        flag.write_text("1h\n")
        save_for_flag(first)
        assert len(records(flag)) == 1
        flag.write_text("")
        save_for_flag(first, 2)
        assert not flag.exists() and first._flag_deadline is None
        assert records(flag) == []
        late = job(flag)
        looked(late)
        assert not late.due(1) and late._flag_deadline is None
    finally:
        first.close()
        if late is not None:
            late.close()


def test_a_newer_flag_without_a_deadline_outdoes_an_older_record_left_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record this user cannot remove (another user's, in the sticky directory) is outdone by
    the newer flag's: one handled without a deadline leaves a record saying so, and neither
    stands. Both go once they can."""
    flag = tmp_path / "checkpoint-now"
    directory = flag.with_name(flag.name + ".jobs")
    directory.mkdir()
    kept = KeptDeadlines(directory)
    older = KeptDeadline((1, 2, 100), utcnow() + timedelta(hours=1))
    older_name = record_name(older.flag)
    (directory / older_name).write_text(older.to_text())
    removable = KeptDeadlines._remove
    # Another user's record: the sticky directory refuses its removal (EPERM), as no mode
    # bit refuses root, who runs this suite in CI.
    monkeypatch.setattr(
        KeptDeadlines,
        "_remove",
        lambda self, name: False if name == older_name else removable(self, name),
    )
    assert (held := kept.in_force()) is not None and held.flag == older.flag
    kept.keep(KeptDeadline((1, 3, 200), None))  # a newer flag handled without a deadline
    assert len(records(flag)) == 2, "no record withdrew the older flag's deadline"
    assert kept.in_force() is None, "the older flag's deadline stood over the newer flag"
    assert len(records(flag)) == 2, "the newer record went while the older one stayed"
    monkeypatch.undo()
    assert kept.in_force() is None
    assert records(flag) == [], "dead records once removable are removed"


@pytest.mark.parametrize("stale", ["long past", "earlier boot"])
def test_a_stale_kept_deadline_neither_saves_nor_exits_a_new_job(
    tmp_path: Path, stale: str
) -> None:
    """A record left over (its deadline more than the agent's grace past, or a duration written
    in an earlier boot whose moment passed before this boot began: a runtime directory that
    outlived a reboot) made a new job save and exit at once. It is dead: the job trains on,
    and it is removed."""
    flag = tmp_path / "checkpoint-now"
    directory = flag.with_name(flag.name + ".jobs")
    directory.mkdir()
    boot_id, booted = flagkept.this_boot()
    if stale == "long past":
        deadline = utcnow() - timedelta(seconds=flagkept.GRACE_SECONDS + 60)
        record = KeptDeadline((1, 2, 3), deadline, None, boot_id, booted)
    else:
        if booted is None:
            pytest.skip("no boot clock here")
        # A duration (`5m`) whose moment passed a minute before this boot began.
        deadline = booted - timedelta(seconds=60)
        other = "0" * 32 if boot_id else None
        record = KeptDeadline((1, 2, 3), deadline, 50.0, other, deadline - timedelta(days=1), True)
    (directory / record_name(record.flag)).write_text(record.to_text())
    guard = job(flag)
    try:
        looked(guard)
        assert not guard.due(1) and not guard.should_exit
        assert records(flag) == []
    finally:
        guard.close()


@pytest.mark.parametrize("written_as", ["time", "duration"])
def test_a_deadline_kept_in_an_earlier_boot_still_stands_for_a_new_job(
    tmp_path: Path, written_as: str
) -> None:
    """A deadline kept in an earlier boot names a real moment after a reboot, written as an
    RFC 3339 time or as a duration (`30m` from the writing: the record keeps its wall time),
    as the agent reads it and as `forewarn notify --deadline 30m` of an earlier boot stands:
    dropped, a job started after the reboot trained on past the deadline it named."""
    flag = tmp_path / "checkpoint-now"
    directory = flag.with_name(flag.name + ".jobs")
    directory.mkdir()
    boot_id, booted = flagkept.this_boot()
    deadline = utcnow().replace(microsecond=0) + timedelta(minutes=30)
    earlier = None if booted is None else booted - timedelta(days=1)
    other = "0" * 32 if boot_id else None
    duration = written_as == "duration"
    # A duration's reading of that boot's clock: nothing to this boot's.
    at = 1234.0 if duration else None
    record = KeptDeadline((1, 2, 3), deadline, at, other, earlier, duration)
    (directory / record_name(record.flag)).write_text(record.to_text())
    guard = job(flag)
    try:
        eventually(lambda: guard.due(1), timeout=5, what="the save for the kept deadline")
        assert not guard.saved(1, 0.01).exit
        assert guard._flag_deadline == deadline
        assert records(flag) == [record_name(record.flag)]
    finally:
        guard.close()


@given(
    before_boot=st.floats(0.001, 299.0),
    past=st.floats(0.0, 299.0),
    earlier_boot_id=st.booleans(),
)
def test_a_time_kept_in_an_earlier_boot_that_passed_before_this_boot_is_dead(
    before_boot: float, past: float, earlier_boot_id: bool
) -> None:
    """An RFC 3339 time kept in the boot before that passed before this machine started (the
    flag's deadline, then a stop and start a minute after it) named the machine the reboot
    ended: it stood until 300 s past, and a job started after the boot saved and exited at
    its first look (the agent raised it again as a drain past its deadline: a terminate). One
    that came after this boot began still stands until the grace, as in the same boot."""
    now = datetime(2026, 12, 7, 6, 0, tzinfo=timezone.utc)
    booted = now - timedelta(seconds=past)
    boot = ("1" * 32 if earlier_boot_id else None, booted)
    kept_in = ("0" * 32 if earlier_boot_id else None, booted - timedelta(days=1))
    gone = KeptDeadline((1, 2, 3), booted - timedelta(seconds=before_boot), None, *kept_in, False)
    assert flagkept.seconds_left(gone, now, boot, past) is None
    this = KeptDeadline((1, 2, 3), booted + timedelta(seconds=past / 2), None, *kept_in, False)
    assert flagkept.seconds_left(this, now, boot, past) == pytest.approx(-past / 2, abs=1e-5)
    same_boot = KeptDeadline((1, 2, 3), gone.deadline, None, boot[0], booted, False)
    within_grace = past + before_boot <= flagkept.GRACE_SECONDS
    assert (flagkept.seconds_left(same_boot, now, boot, past) is not None) == within_grace


@given(
    deadline_off=st.floats(-1e5, 1e5, allow_nan=False),
    up=st.floats(0.0, 1e5, allow_nan=False),
    written_before_boot=st.floats(3.0, 1e6, allow_nan=False),
)
def test_an_earlier_boots_flag_file_and_kept_deadline_die_by_one_rule(
    deadline_off: float, up: float, written_before_boot: float
) -> None:
    """A deadline in a flag file an earlier boot wrote (a runtime directory that outlives a
    reboot) is dead exactly when the same deadline kept beside it in that boot is: past
    before this boot began, or more than the grace past. The file's stood while less than
    300 s past, a terminate due at once after a reboot a minute past its deadline, where the
    kept one was dead."""
    now = datetime(2026, 12, 7, 6, 0, tzinfo=timezone.utc)
    started = now - timedelta(seconds=up)
    deadline = now - timedelta(seconds=deadline_off)
    written = started - timedelta(seconds=written_before_boot)
    boot = ("1" * 32, started)
    kept = KeptDeadline((1, 2, 3), deadline, None, "0" * 32, written, False)
    file_dead = past_when_read(deadline, now, written, started) is not None
    assert file_dead == (flagkept.seconds_left(kept, now, boot, up) is None)


def test_a_record_of_an_older_version_is_a_duration_when_kept_on_the_boot_clock() -> None:
    text = json.dumps({"flag": [1, 2, 3], "deadline": "2026-12-06T03:00:00Z"})
    assert (record := parse_record(text)) is not None and not record.duration
    text = json.dumps({"flag": [1, 2, 3], "deadline": "2026-12-06T03:00:00Z", "boot_deadline": 9})
    assert (record := parse_record(text)) is not None and record.duration


def test_a_new_flag_removed_by_hand_leaves_no_older_deadline_in_force(tmp_path: Path) -> None:
    """Written again, the file is a new request that replaces the kept one, as the agent
    clears the kept drain: removed by hand before any job saved, it withdrew nothing, and a
    job started after it took the older flag's deadline."""
    flag = tmp_path / "checkpoint-now"
    first = job(flag)
    late: CheckpointGuard | None = None
    try:
        flag.write_text("1h\n")
        save_for_flag(first)
        assert len(records(flag)) == 1
        flag.write_text("")
        eventually(lambda: first.due(2), timeout=5, what="the new request's save")
        flag.unlink()  # withdrawn by hand before the save
        assert not first.saved(2, 0.01).exit
        assert records(flag) == []
        late = job(flag)
        looked(late)
        assert not late.due(1) and late._flag_deadline is None
    finally:
        first.close()
        if late is not None:
            late.close()


def test_a_leftover_flag_long_past_its_deadline_neither_exits_a_job_nor_is_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Written with a right time 15 minutes ago, its deadline 10 minutes past (a runtime
    directory that is no tmpfs; days past as well): a job started now took it for a terminate
    due at once and exited at its first step, as every job after it did. It saves once for the
    request and trains on, and the log names the file and the time."""
    flag = tmp_path / "checkpoint-now"
    past = format_time(utcnow() - timedelta(seconds=PAST_BY))
    flag.write_text(past + "\n")
    if (flagkept.boot_seconds() or 0.0) < WRITTEN_AGO + 60:
        pytest.skip("this machine booted too recently to hold a flag written before")
    written = time.time() - WRITTEN_AGO
    os.utime(flag, (written, written))
    guard = job(flag, margin=5.0)
    try:
        with caplog.at_level(logging.WARNING):
            eventually(lambda: guard.due(1), timeout=5, what="the flag's save")
            result = guard.saved(1, 0.01)
            assert result.reasons == ("flag",) and not result.exit
            assert not any(guard.due(step) for step in range(2, 20))
        assert not guard.should_exit and guard.exit_code == 0
        assert not flag.exists() and records(flag) == []
        warned = [r.getMessage() for r in caplog.records if str(flag) in r.getMessage()]
        assert any(
            past in m and "more than 300 s past when the file was read" in m for m in warned
        ), warned
    finally:
        guard.close()


def test_a_kept_deadline_just_past_still_exits_a_new_job(tmp_path: Path) -> None:
    """Within the agent's grace past the deadline the agent still sends its terminate to a
    client that connects: the job saves and exits."""
    flag = tmp_path / "checkpoint-now"
    directory = flag.with_name(flag.name + ".jobs")
    directory.mkdir()
    boot_id, booted = flagkept.this_boot()
    record = KeptDeadline((1, 2, 3), utcnow() - timedelta(seconds=30), None, boot_id, booted)
    (directory / record_name(record.flag)).write_text(record.to_text())
    guard = job(flag)
    try:
        eventually(lambda: guard.should_exit, timeout=5, what="the exit")
        assert guard.saved(1, 0.01).exit
    finally:
        guard.close()


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)
_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "flag": st.one_of(_VALUES, st.lists(st.integers(-5, 2**64), min_size=3, max_size=3)),
        "deadline": st.one_of(_VALUES, st.just("2026-12-06T03:00:00Z")),
        "boot_deadline": _VALUES,
        "boot_id": _VALUES,
        "booted": st.one_of(_VALUES, st.just("2026-12-06T01:00:00+01:00")),
        "duration": st.one_of(_VALUES, st.booleans()),
    },
)


@settings(max_examples=examples(200))
@given(st.one_of(st.text(max_size=200), _FIELDS.map(json.dumps), _VALUES.map(json.dumps)))
def test_a_record_reads_as_one_or_as_none_never_an_error(text: str) -> None:
    """A record is read from a directory every user may write: any text there reads as a
    record or as none, and a record read is written back the same."""
    record = parse_record(text)
    if record is not None:
        assert parse_record(record.to_text()) == record
        assert record.flag[0] >= 0 and record.flag[1] >= 0  # the mtime may be before 1970


@given(
    st.tuples(st.integers(0, 2**63), st.integers(0, 2**63), st.integers(0, 2**63)),
    st.one_of(st.none(), st.datetimes(timezones=st.just(timezone.utc))),
    st.one_of(st.none(), st.floats(-1e9, 1e9)),
    st.one_of(st.none(), st.text(max_size=36)),
    st.booleans(),
)
def test_a_record_written_reads_back_the_same(
    flag: tuple[int, int, int],
    deadline: datetime | None,
    at: float | None,
    boot: str | None,
    duration: bool,
) -> None:
    record = KeptDeadline(flag, deadline, at, boot, deadline, duration)
    back = parse_record(record.to_text())
    assert back is not None and back.flag == flag and back.boot_id == boot
    assert back.duration is duration
    assert back.boot_deadline == at
    if deadline is not None:
        assert back.deadline is not None
        assert abs((back.deadline - deadline).total_seconds()) < 1e-3


def test_a_record_names_the_deadline_as_the_first_job_held_it(tmp_path: Path) -> None:
    flag = tmp_path / "checkpoint-now"
    guard = job(flag, margin=1.0)
    try:
        deadline = utcnow() + timedelta(hours=2)
        flag.write_text(format_time(deadline) + "\n")
        save_for_flag(guard)
        (name,) = records(flag)
        record = parse_record((flag.with_name(flag.name + ".jobs") / name).read_text())
        assert record is not None and record.deadline == guard._flag_deadline
        assert record.boot_deadline is None  # a time stays that time
    finally:
        guard.close()


@settings(max_examples=examples(60))
@given(
    # Past the recursion limit (about 1,000) in half the draws.
    depth=st.integers(1, 4096) | st.integers(1000, 4096),
    opener=st.sampled_from(["[", "[{}, ", '{"":']),
    inside=st.sampled_from(["", "1", "null"]),
)
def test_a_record_nested_any_depth_reads_as_none_never_an_error(
    depth: int, opener: str, inside: str
) -> None:
    """Nested past the recursion limit (4,096 `[` fit in the 4 KiB read), `json.loads` raised
    RecursionError, which no reader caught: the agent's local watcher and each job's guard
    ticker died on a record anyone on the machine may plant."""
    closer = "]" if opener == "[" else "}"
    text = (opener * depth + inside + closer * depth)[: flagkept.MAX_RECORD_BYTES]
    assert parse_record(text) is None


def test_a_flag_written_before_1970_keeps_its_deadline_for_a_later_job(tmp_path: Path) -> None:
    """A flag file whose mtime is before the epoch (a clock reset, `touch -d 1969-...`, a
    copy that kept it): its record, `.deadline--<ns>-...`, was skipped by the reader (its
    order read as no number) and refused by the parser (a negative part): a job started
    later knew nothing of the deadline and trained on until the machine went."""
    flag = tmp_path / "checkpoint-now"
    first = job(flag)
    try:
        flag.write_text("2030-01-01T00:00:00Z\n")
        os.utime(flag, ns=(-86_400 * 10**9 - 1, -86_400 * 10**9 - 1))
        save_for_flag(first)
        assert not flag.exists()
    finally:
        first.close()
    assert [name.startswith(".deadline--") for name in records(flag)] == [True]
    kept = KeptDeadlines(flag.with_name(flag.name + ".jobs")).in_force()
    assert kept is not None and kept.flag[2] == -86_400 * 10**9 - 1
    late = job(flag)
    try:
        eventually(lambda: late.due(1), timeout=5, what="the late job's save for the flag")
        assert late._flag_deadline == datetime(2030, 1, 1, tzinfo=timezone.utc)
    finally:
        late.close()


@given(
    st.tuples(st.integers(0, 2**63), st.integers(0, 2**63), st.integers(-(2**63), 2**63)),
    st.integers(-(2**63), 2**63),
)
def test_records_are_read_in_the_order_of_their_flags_mtimes(
    flag: tuple[int, int, int], other: int
) -> None:
    """Whatever the mtimes, before 1970 too: the newest flag's record is the one read."""
    dev, ino, mtime = flag
    older, newer = sorted([(dev, ino, mtime), (dev, ino + 1, other)], key=lambda f: f[2])
    names = [record_name(newer), record_name(older)]
    assert [flagkept.record_order(name) for name in names] == [newer[2], older[2]]
    assert flagkept.record_order(f"{flagkept.PREFIX}tmp-12-ab") is None
    assert flagkept.record_order(f"{flagkept.PREFIX}--1-2-3") is None
