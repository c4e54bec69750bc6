"""The `time` of a spot interruption in the forms IMDS itself writes times in. AWS documents
RFC 3339 with `Z` for it, but writes the scheduled events' dates as `21 Jan 2019 09:00:43 GMT`;
a notice in that form went out with no deadline and nothing said, so the job was told to go
now, two minutes early, with no word in the log why. Read whenever the time can be read
unambiguously; otherwise still a terminate (never dropped), and the value is named."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from aws_support import watching
from forewarn.providers.aws.imds import (
    NOTICE_TIME,
    SPOT_PATH,
    PartialParse,
    parse_instance_action,
    parse_rebalance,
)
from forewarn.providers.aws.settings import Settings
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.aws.watch import AwsWatcher
from forewarn.providers.base import PollHealth
from forewarn.providers.simulator import SimServer
from hypothesis import given, settings
from hypothesis import strategies as st
from support import WatcherRun, examples, running_watcher

NOW = datetime(2026, 12, 7, 18, 48, tzinfo=timezone.utc)
AT = datetime(2026, 12, 7, 18, 50, tzinfo=timezone.utc)


def _body(time: object) -> str:
    return json.dumps({"action": "terminate", "time": time})


@pytest.mark.parametrize(
    ("text", "deadline"),
    [
        ("2026-12-07T18:50:00Z", AT),
        ("2026-12-07T18:50:00.250Z", AT.replace(microsecond=250000)),
        ("2026-12-07T18:50:00+00:00", AT),
        ("2026-12-07T19:50:00+01:00", AT),
        ("7 Dec 2026 18:50:00 GMT", AT),
        ("Mon, 07 Dec 2026 18:50:00 GMT", AT),
        ("2016-12-31T23:59:60Z", datetime(2016, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)),
    ],
)
def test_a_spot_time_in_a_form_imds_writes_is_the_deadline(text: str, deadline: datetime) -> None:
    (report,) = parse_instance_action(_body(text), now=NOW)
    assert (report.action, report.deadline) == ("terminate", deadline)


@pytest.mark.parametrize(
    ("time", "named"),
    [
        ("in 2 minutes", "'in 2 minutes'"),
        # No zone: UTC as documented, or the writer's local time? Not guessed.
        ("2026-12-07T18:50:00", "'2026-12-07T18:50:00'"),
        (1796669400, "1796669400"),
        (None, "None"),
    ],
)
def test_a_spot_time_that_cannot_be_read_is_said_by_value_and_still_a_terminate(
    time: object, named: str
) -> None:
    with pytest.raises(PartialParse) as caught:
        parse_instance_action(_body(time), now=NOW)
    (report,) = caught.value.reports
    assert (report.action, report.reason, report.deadline) == (
        "terminate",
        "spot-interruption",
        None,
    )
    assert "'time'" in str(caught.value) and named in str(caught.value)
    assert "published as a terminate without a deadline all the same" in str(caught.value)


def test_a_spot_notice_without_a_time_says_so() -> None:
    with pytest.raises(PartialParse, match="field 'time' is missing") as caught:
        parse_instance_action('{"action": "terminate"}', now=NOW)
    assert caught.value.reports[0].deadline is None


@settings(max_examples=examples(150))
@given(
    moment=st.datetimes(
        min_value=datetime(1970, 1, 1),
        max_value=datetime(9999, 12, 1),
        timezones=st.just(timezone.utc),
    ).map(lambda moment: moment.replace(microsecond=0)),
    form=st.sampled_from(
        ["%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S+00:00", "%d %b %Y %H:%M:%S GMT"]
    ),
    action=st.sampled_from(["terminate", "stop"]),
)
def test_any_spot_time_in_an_imds_form_is_its_deadline(
    moment: datetime, form: str, action: str
) -> None:
    text = moment.strftime(form).replace(f"{moment.year}", f"{moment.year:04d}", 1)
    (report,) = parse_instance_action(json.dumps({"action": action, "time": text}), now=NOW)
    assert report.deadline == moment


@settings(max_examples=examples(150))
@given(time=st.one_of(st.text(max_size=40), st.integers(), st.floats(), st.none(), st.booleans()))
def test_any_spot_time_gives_a_terminate_with_a_deadline_or_a_line_naming_it(time: object) -> None:
    """Never dropped: a terminate every time, its deadline read or its value said."""
    try:
        (report,) = parse_instance_action(_body(time), now=NOW)
    except PartialParse as partial:
        (report,) = partial.reports
        assert report.deadline is None and "'time'" in str(partial)
    assert (report.action, report.reason) == ("terminate", "spot-interruption")


async def test_a_spot_notice_without_a_readable_time_is_restated_after_a_restart(
    sim: ImdsSimulator, server: SimServer
) -> None:
    """After an agent restart the watcher reports the notices it adopted again at the path's
    first answer, or the agent withdraws them for want of a report. An answer read only in
    part (here a `time` without a zone) skipped that: the interruption restored without a
    deadline was never reported again."""
    body = '{"action": "terminate", "time": "2026-12-07T18:50:00"}'
    sim.add_fault("status", path=SPOT_PATH, status=200, body=body)
    fast = {"spot_interval": 0.25, "rebalance_interval": 0.25}
    async with watching(server.url, **fast) as run:
        notice, _ = await run.report_at(action="terminate")
    assert notice.deadline is None
    watcher = AwsWatcher(Settings(url=server.url, **fast), PollHealth("aws"))
    watcher.restored([notice])
    async with running_watcher(WatcherRun(watcher)) as again:
        kept, _ = await again.report_at(id=notice.id, timeout=5)
        assert (kept.action, kept.deadline) == ("terminate", None)
        assert again.health.errors_by_kind.get("bad-spot", 0) >= 1


@pytest.mark.parametrize(
    "text", ["2020-10-27T08:22:00.000Z", "2020-10-27T08:22:00+00:00", "27 Oct 2020 08:22:00 GMT"]
)
def test_a_rebalance_notice_time_in_a_form_imds_writes_is_stated(text: str) -> None:
    """The rebalance's `noticeTime` feeds the detection-delay metric: in the events' date form
    it was a bad-rebalance error and no `notice_time`, as the spot time was no deadline."""
    (report,) = parse_rebalance(json.dumps({"noticeTime": text}))
    assert report.detail[NOTICE_TIME] == "2020-10-27T08:22:00Z"
