"""The helpers every provider shares: backoff with jitter, HTTP dates, the atomic writer."""

from __future__ import annotations

import errno
import locale
import os
import stat
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from forewarn.protocol.timefmt import format_time
from forewarn.providers import persist
from forewarn.providers.backoff import Backoff
from forewarn.providers.health import PollHealth
from forewarn.providers.httpdate import (
    format_http_date,
    format_short_http_date,
    parse_http_date,
    retry_after_seconds,
)
from forewarn.providers.persist import write_atomically
from forewarn.providers.report import Report
from forewarn.providers.skew import (
    CLOCK_AHEAD,
    MOST_AHEAD,
    TRUSTED_SKEW,
    clock_ahead,
    report_on_clock,
    resume_skew,
    sent_skew,
    skew_message,
    take_skew,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import examples


class TestBackoff:
    def test_doubles_up_to_the_ceiling_and_resets(self) -> None:
        backoff = Backoff(0.5, 3.0, jitter=0.0)
        assert [backoff.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
        backoff.reset()
        assert backoff.next() == 0.5

    @settings(max_examples=examples(200), deadline=None)
    @given(
        first=st.floats(0.01, 10),
        ceiling=st.floats(0.01, 100),
        jitter=st.floats(0, 0.99),
        failures=st.integers(0, 10_000),
        draw=st.floats(0, 1, exclude_max=True),
    )
    def test_every_wait_stays_within_its_jitter(
        self, first: float, ceiling: float, jitter: float, failures: int, draw: float
    ) -> None:
        backoff = Backoff(first, ceiling, jitter=jitter, rng=lambda: draw)
        backoff.failures = failures  # an endpoint down for a very long time: still finite
        wait = backoff.next()
        base = min(first, ceiling) * 2 ** min(failures, 64)
        base = min(base, ceiling)
        assert base * (1 - jitter) - 1e-9 <= wait <= min(base * (1 + jitter), ceiling) + 1e-9

    @pytest.mark.parametrize("jitter", [0.1, 0.2, 0.5])
    def test_no_wait_passes_the_ceiling_by_its_jitter(self, jitter: float) -> None:
        """found: DigitalOcean's and Kubernetes' `retry_max` ("longest wait between
        reconnection attempts") was passed by 20 % at the draw's top, as AWS's 429 wait and
        Azure's poll were, until each capped it itself: the ceiling is one, for every caller."""
        backoff = Backoff(1.0, 4.0, jitter=jitter, rng=lambda: 0.999999)
        waits = [backoff.next() for _ in range(6)]
        assert max(waits) <= 4.0, waits
        assert waits[:2] > [1.0, 2.0]  # below the ceiling, the jitter still spreads upward

    def test_jitter_spreads_waits(self) -> None:
        waits = {Backoff(1.0, 2.0, jitter=0.5).next() for _ in range(50)}
        assert len(waits) > 40 and min(waits) >= 0.5 and max(waits) <= 1.5

    @pytest.mark.parametrize(
        ("first", "ceiling", "jitter"), [(0, 1, 0.1), (1, -1, 0.1), (1, 2, 1.0), (1, 2, -0.1)]
    )
    def test_bad_arguments_are_refused(self, first: float, ceiling: float, jitter: float) -> None:
        with pytest.raises(ValueError, match="backoff"):
            Backoff(first, ceiling, jitter=jitter)


UTC = timezone.utc


class TestHttpDates:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("Mon, 19 Sep 2016 18:29:47 GMT", datetime(2016, 9, 19, 18, 29, 47, tzinfo=UTC)),
            ("21 Jan 2019 09:00:43 GMT", datetime(2019, 1, 21, 9, 0, 43, tzinfo=UTC)),
            ("Sat, 11 Apr 2026 22:26:58 GMT", datetime(2026, 4, 11, 22, 26, 58, tzinfo=UTC)),
            ("Mon, 11 Apr 2026 22:26:58 GMT", datetime(2026, 4, 11, 22, 26, 58, tzinfo=UTC)),
            ("01 Dec 2026 01:00:00 +0100", datetime(2026, 12, 1, tzinfo=UTC)),
            ("9 DEC 2030 9:05:00 UTC", datetime(2030, 12, 9, 9, 5, tzinfo=UTC)),
            ("3 May 0001 09:00:43 GMT", datetime(1, 5, 3, 9, 0, 43, tzinfo=UTC)),
        ],
    )
    def test_parses(self, text: str, expected: datetime) -> None:
        assert parse_http_date(text) == expected

    @pytest.mark.parametrize(
        "text",
        [
            "",
            "soon",
            "Mon, 19 Sep 2016",
            "21 Jan 19 09:00:43 GMT",
            "31 Feb 2019 09:00:43 GMT",
            "21 Foo 2019 09:00:43 GMT",
            "1 Jan 0001 00:00:00 +0100",
        ],
    )
    def test_refuses(self, text: str) -> None:
        with pytest.raises(ValueError, match="HTTP date"):
            parse_http_date(text)

    @settings(max_examples=examples(300), deadline=None)
    @given(st.text(max_size=40))
    def test_only_value_error_escapes(self, text: str) -> None:
        try:
            moment = parse_http_date(text)
        except ValueError:
            return
        assert moment.tzinfo is not None

    @settings(max_examples=examples(300), deadline=None)
    @given(st.datetimes(timezones=st.just(UTC)))
    def test_both_forms_round_trip(self, moment: datetime) -> None:
        moment = moment.replace(microsecond=0)
        assert parse_http_date(format_http_date(moment)) == moment
        assert parse_http_date(format_short_http_date(moment)) == moment

    def test_independent_of_the_locale(self) -> None:
        for name in ("de_DE.UTF-8", "fr_FR.UTF-8"):
            try:
                locale.setlocale(locale.LC_TIME, name)
                break
            except locale.Error:
                continue
        try:
            moment = datetime(2026, 5, 3, 4, 5, 6, tzinfo=UTC)
            assert format_http_date(moment) == "Sun, 03 May 2026 04:05:06 GMT"
            assert format_short_http_date(moment) == "3 May 2026 04:05:06 GMT"
            assert parse_http_date("Sun, 03 May 2026 04:05:06 GMT") == moment
        finally:
            locale.setlocale(locale.LC_TIME, "C")


class TestAtomicWrite:
    def test_writes_text_and_bytes_with_the_mode(self, tmp_path: Path) -> None:
        target = tmp_path / "sub" / "state.json"
        write_atomically(target, "héllo")
        assert target.read_text() == "héllo"
        write_atomically(target, b"\x00\x01", mode=0o640)
        assert target.read_bytes() == b"\x00\x01"
        assert target.stat().st_mode & 0o777 == 0o640
        assert os.listdir(target.parent) == ["state.json"]

    def test_short_writes_are_continued(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        real_write = os.write
        calls = []

        def one_byte(fd: int, data: bytes | memoryview) -> int:
            calls.append(len(data))
            return real_write(fd, bytes(data[:1]))

        monkeypatch.setattr(persist.os, "write", one_byte)
        payload = b"0123456789" * 10
        write_atomically(tmp_path / "f", payload)
        assert (tmp_path / "f").read_bytes() == payload
        assert len(calls) == len(payload)

    @pytest.mark.parametrize("failing", ["write", "fsync", "replace"])
    def test_a_failure_keeps_the_old_file_and_leaves_no_temporary(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
    ) -> None:
        target = tmp_path / "f"
        write_atomically(target, "old")

        def broken(*args: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(persist.os, failing, broken)
        with pytest.raises(OSError, match="No space"):
            write_atomically(target, "new" * 1000)
        monkeypatch.undo()
        assert target.read_text() == "old"
        assert os.listdir(tmp_path) == ["f"]

    @pytest.mark.parametrize("code", [errno.EINVAL, errno.EIO])
    def test_a_directory_that_cannot_be_synced_is_not_a_failed_write(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
    ) -> None:
        """A file system whose directories have no fsync (the kernel answers EINVAL: CIFS
        before its no-op one, VirtualBox shared folders) had every write reported failed
        after its rename had replaced the file: the state file was saved, yet each `notify`
        said "not saved", `forewarn status` showed the state condition for ever, and a stop
        said the next start may lack every manual notice. EINVAL from the directory's sync
        is that file system's answer, not a failure; any other error still is one."""
        target = tmp_path / "f"
        real_fsync = os.fsync

        def no_directory_sync(fd: int) -> None:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                raise OSError(code, os.strerror(code))
            real_fsync(fd)

        monkeypatch.setattr(persist.os, "fsync", no_directory_sync)
        if code == errno.EIO:
            with pytest.raises(OSError, match="Input/output"):
                write_atomically(target, "new")
            return
        write_atomically(target, "new")
        assert target.read_text() == "new"
        assert os.listdir(tmp_path) == ["f"]


def test_an_approval_counted_once_is_not_counted_again_by_a_later_watcher() -> None:
    """The health outlives its watchers: each one built after a crash skipped the approvals of
    the flushed notices anew, and each skip was counted again."""
    health = PollHealth("azure")
    heard: list[str] = []
    health.approval_listeners.append(lambda provider, outcome: heard.append(outcome))
    assert health.approval("skipped", once="E1: it is a drain")
    assert not health.approval("skipped", once="E1: it is a drain")
    assert health.approval("skipped", once="E1: its status is Started")  # another cause
    assert health.approval("sent") and health.approval("sent")  # each POST counts
    assert health.approvals == {"skipped": 2, "sent": 2}
    assert heard == ["skipped", "skipped", "sent", "sent"]


@given(st.one_of(st.none(), st.text(max_size=60)))
def test_retry_after_is_a_finite_wait_or_none_and_never_raises(text: str | None) -> None:
    """The one Retry-After reader (Azure's approvals and polls, the Kubernetes watch)."""
    wait = retry_after_seconds(text)
    assert wait is None or 0 <= wait < float("inf")


@given(st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9999, 1, 1)))
def test_retry_after_as_a_date_is_the_time_left(moment: datetime) -> None:
    moment = moment.replace(microsecond=0, tzinfo=timezone.utc)
    wait = retry_after_seconds(format_http_date(moment))
    left = (moment - datetime.now(timezone.utc)).total_seconds()
    assert wait is not None and abs(wait - max(0.0, left)) < 5


class TestClockSkew:
    NOW = datetime(2026, 12, 5, 15, 0, tzinfo=timezone.utc)

    @given(
        st.lists(
            st.one_of(
                st.none(),
                st.booleans(),
                st.integers(),
                st.floats(allow_nan=True, allow_infinity=True),
                st.text(max_size=10),
            ),
            max_size=4,
        )
    )
    @example([-7200, None])
    @example([float("nan"), 10**20])
    def test_any_restored_skew_resumes_without_raising(self, values: list[object]) -> None:
        """A restored notice's skew comes from a state file: any value, only one this code
        could have written counts, and the latest notice's is the one resumed."""
        reports = [
            Report(
                id=f"p/{index}",
                action="drain",
                reason="manual",
                provider="p",
                noticed_at=self.NOW + timedelta(seconds=index),
                detail={} if value is None else {CLOCK_AHEAD: value},
            )
            for index, value in enumerate(values)
        ]
        health = PollHealth("p")
        ahead = resume_skew(reports, health, "the service")
        skews = [skew for report in reports if (skew := sent_skew(report)) is not None]
        assert all(abs(skew) <= MOST_AHEAD for skew in skews)
        assert ahead == (skews[-1] if skews else timedelta(0))
        assert ("clock" in health.conditions) == bool(ahead)

    @given(st.integers(-3 * 86400, 3 * 86400))
    def test_the_skew_counts_only_beyond_a_few_minutes(self, ahead: int) -> None:
        local = self.NOW + timedelta(seconds=ahead)
        skew = clock_ahead(format_http_date(self.NOW), local)
        if abs(ahead) <= TRUSTED_SKEW.total_seconds():
            assert skew == timedelta(0)
        else:
            assert skew == timedelta(seconds=ahead)

    @given(
        known=st.integers(-3 * 86400, 3 * 86400),
        ahead=st.integers(-3 * 86400, 3 * 86400),
        header=st.one_of(st.none(), st.text(max_size=40)),
        readable=st.booleans(),
    )
    def test_the_skew_the_watcher_holds_is_told_to_the_board(
        self, known: int, ahead: int, header: str | None, readable: bool
    ) -> None:
        """`PollHealth.ahead` is the skew the watcher holds after each `Date` that reads (the
        one it knew where the new one moved little), and stays unknown without one: the board
        tells by it a report made before the watcher saw a step of the wall clock."""
        health = PollHealth("p")
        date = format_http_date(self.NOW) if readable else header
        local = self.NOW + timedelta(seconds=ahead)
        took = take_skew(timedelta(seconds=known), date, local, health, "p", "the service")
        read = clock_ahead(date, local)
        if read is None:
            assert took is None and health.ahead is None
        else:
            held = timedelta(seconds=known) if took is None else took
            assert health.ahead == held.total_seconds()

    @given(
        st.one_of(st.none(), st.text(max_size=60)), st.datetimes(timezones=st.just(timezone.utc))
    )
    @example("Sat, 05 Dec 9999 23:59:59 GMT", datetime(1, 1, 1, tzinfo=timezone.utc))
    @example("Sat, 05 Dec 2026 15:00:00 GMT", NOW)
    def test_any_date_header_gives_a_skew_or_none(
        self, header: str | None, local: datetime
    ) -> None:
        skew = clock_ahead(header, local)
        assert skew is None or isinstance(skew, timedelta)
        if skew:
            assert "h " in skew_message(skew, "the service")

    @given(
        st.one_of(st.none(), st.datetimes(timezones=st.just(timezone.utc))),
        st.one_of(st.none(), st.datetimes(timezones=st.just(timezone.utc))),
        st.one_of(st.none(), st.text(max_size=30), st.integers()),
        st.integers(-(10**7), 10**7),
    )
    @example(datetime(2026, 12, 5, 16, tzinfo=timezone.utc), None, "2026-12-05T15:00:00Z", 7200)
    def test_a_report_goes_onto_the_clock_without_raising(
        self, deadline: datetime | None, until: datetime | None, noticed: object, ahead: int
    ) -> None:
        report = Report(
            id="aws/scheduled/e",
            action="drain",
            reason="scheduled-maintenance",
            provider="aws",
            deadline=deadline,
            until=until,
            detail={"notice_time": noticed},
        )
        moved = report_on_clock(report, timedelta(seconds=ahead))
        if not ahead or moved is report:
            return
        shift = timedelta(seconds=ahead)
        assert moved.detail[CLOCK_AHEAD] == ahead
        assert moved.deadline == (deadline + shift if deadline is not None else None)
        assert moved.until == (until + shift if until is not None else None)
        if noticed == "2026-12-05T15:00:00Z":
            assert moved.detail["notice_time"] == format_time(
                datetime(2026, 12, 5, 15, tzinfo=timezone.utc) + shift
            )


def test_a_poll_error_s_log_line_counts_in_words(caplog: pytest.LogCaptureFixture) -> None:
    """A provider's first error of a kind was logged `aws: http-503: GET ...: 503: IMDS is
    unavailable (seen 1 times)`. Found reading a real agent's log under a 12 s IMDS fault."""
    import logging

    health = PollHealth("aws", repeat_log_seconds=0.0)
    with caplog.at_level(logging.WARNING, logger="forewarn.providers"):
        health.error("http-503", "IMDS is unavailable")
        health.error("http-503", "IMDS is unavailable")
    said = [record.getMessage() for record in caplog.records]
    assert said == [
        "aws: http-503: IMDS is unavailable (seen once since the agent started)",
        "aws: http-503: IMDS is unavailable (seen 2 times since the agent started)",
    ], said
