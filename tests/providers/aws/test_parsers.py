"""The IMDS parsers as pure functions: the documented payloads, and anything else."""

from __future__ import annotations

import inspect
import json
import locale
from datetime import datetime, timezone

import pytest
from forewarn.agent.metrics import notice_time
from forewarn.agent.protocol import Notice
from forewarn.agent.state import AgentState, encode_state
from forewarn.providers.aws import imds
from forewarn.providers.aws.imds import (
    PartialParse,
    format_aws_date,
    parse_aws_date,
    parse_identity,
    parse_instance_action,
    parse_lifecycle_state,
    parse_rebalance,
    parse_scheduled,
)
from forewarn.providers.base import ParseError
from forewarn.providers.report import Report
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

NOW = datetime(2026, 11, 30, 3, 0, tzinfo=timezone.utc)
AWS_EXAMPLE = [
    {
        "NotBefore": "21 Jan 2019 09:00:43 GMT",
        "Code": "system-reboot",
        "Description": "scheduled reboot",
        "EventId": "instance-event-0d59937288b749b32",
        "NotAfter": "21 Jan 2019 09:17:23 GMT",
        "State": "active",
    }
]


@pytest.mark.parametrize("action", ["terminate", "stop"])
def test_a_spot_interruption_is_a_terminate_with_its_time_as_deadline(action: str) -> None:
    body = json.dumps({"action": action, "time": "2017-09-18T08:22:00Z"}).encode()
    (report,) = parse_instance_action(body, now=NOW)
    assert report.action == "terminate" and report.reason == "spot-interruption"
    assert report.deadline == datetime(2017, 9, 18, 8, 22, tzinfo=timezone.utc)
    assert report.detail == {"action": action, "time": "2017-09-18T08:22:00Z"}
    assert report.id.startswith("aws/spot-itn/") and report.provider == "aws"


def test_hibernation_has_no_lead_so_its_deadline_is_now() -> None:
    body = '{"action": "hibernate", "time": "2026-11-30T03:02:00Z"}'
    (report,) = parse_instance_action(body, now=NOW)
    assert report.action == "terminate" and report.deadline == NOW


def test_the_same_payload_gives_the_same_id() -> None:
    body = '{"action": "terminate", "time": "2017-09-18T08:22:00Z"}'
    assert parse_instance_action(body)[0].id == parse_instance_action(body)[0].id


def test_a_rebalance_is_a_drain_without_deadline() -> None:
    (report,) = parse_rebalance(b'{"noticeTime": "2020-10-27T08:22:00Z"}')
    assert report.action == "drain" and report.reason == "rebalance-recommendation"
    assert report.deadline is None and report.detail["noticeTime"] == "2020-10-27T08:22:00Z"


def test_a_rebalance_states_its_notice_time_for_the_detection_delay_metric() -> None:
    """docs/operations.md: AWS's rebalance `noticeTime` is copied as `detail["notice_time"]`,
    which `forewarn_detection_delay_seconds` reads; without it the metric never moved for AWS."""
    (report,) = parse_rebalance(b'{"noticeTime": "2020-10-27T08:22:00Z"}')
    assert report.detail == {
        "noticeTime": "2020-10-27T08:22:00Z",
        "notice_time": "2020-10-27T08:22:00Z",
    }
    assert notice_time(report.detail) == datetime(2020, 10, 27, 8, 22, tzinfo=timezone.utc)


def test_a_scheduled_event_drains_with_not_before_as_deadline() -> None:
    (report,) = parse_scheduled(json.dumps(AWS_EXAMPLE))
    assert report.action == "drain" and report.reason == "scheduled-maintenance"
    assert report.deadline == datetime(2019, 1, 21, 9, 0, 43, tzinfo=timezone.utc)
    assert report.id == "aws/scheduled/instance-event-0d59937288b749b32"
    assert report.detail == AWS_EXAMPLE[0]
    # The end of the window the agent keeps it active through.
    assert report.until == datetime(2019, 1, 21, 9, 17, 23, tzinfo=timezone.utc)


@pytest.mark.parametrize("state", ["canceled", "completed", "Cancelled"])
def test_a_canceled_or_completed_event_clears(state: str) -> None:
    event = dict(AWS_EXAMPLE[0], State=state)
    (report,) = parse_scheduled(json.dumps([event]))
    assert (
        report.action == "clear" and report.id == "aws/scheduled/instance-event-0d59937288b749b32"
    )


def test_a_history_entry_without_state_clears_by_its_description_prefix() -> None:
    event = {k: v for k, v in AWS_EXAMPLE[0].items() if k != "State"}
    event["Description"] = "[Canceled] scheduled reboot"
    assert parse_scheduled(json.dumps([event]))[0].action == "clear"


def test_an_unreadable_not_before_drains_without_deadline_and_hides_no_other_event() -> None:
    odd = dict(AWS_EXAMPLE[0], NotBefore="soon", EventId="instance-event-0odd")
    stop = dict(AWS_EXAMPLE[0], Code="instance-stop", NotAfter="whenever")
    with pytest.raises(PartialParse) as caught:
        parse_scheduled(json.dumps([odd, stop]))
    assert "item 0: field 'NotBefore'" in str(caught.value)
    first, second = caught.value.reports
    assert (first.id, first.action, first.deadline) == (
        "aws/scheduled/instance-event-0odd",
        "drain",
        None,
    )
    assert second.action == "drain"
    assert second.deadline == datetime(2019, 1, 21, 9, 0, 43, tzinfo=timezone.utc)


def test_an_unreadable_not_after_is_no_problem() -> None:
    event = dict(AWS_EXAMPLE[0], NotAfter="some day", NotBeforeDeadline="")
    (report,) = parse_scheduled(json.dumps([event]))
    assert report.deadline == datetime(2019, 1, 21, 9, 0, 43, tzinfo=timezone.utc)
    assert report.until is None


@pytest.mark.parametrize("body", [b"[]", b"", b"  \n", "[]"])
def test_no_scheduled_events(body: bytes | str) -> None:
    assert parse_scheduled(body) == []


def test_an_event_without_an_id_gets_a_stable_one() -> None:
    event = {k: v for k, v in AWS_EXAMPLE[0].items() if k != "EventId"}
    first = parse_scheduled(json.dumps([event]))[0].id
    assert first == parse_scheduled(json.dumps([event]))[0].id
    assert first.startswith("aws/scheduled/")


def test_an_event_id_with_a_trailing_newline_is_not_used_as_the_notice_id() -> None:
    # The agent refuses such an id and would drop the notice: a stable id keeps it.
    event = dict(AWS_EXAMPLE[0], EventId="instance-event-0d59937288b749b32\n")
    (report,) = parse_scheduled(json.dumps([event]))
    assert "\n" not in report.id and report.id.startswith("aws/scheduled/")
    assert report.action == "drain"


@pytest.mark.parametrize(
    "state", ["Terminated", "Warmed:Terminated", "Warmed:Stopped", "Warmed:Hibernated"]
)
def test_an_asg_target_of_terminated_is_a_terminate(state: str) -> None:
    (report,) = parse_lifecycle_state(state + "\n")
    assert report.action == "terminate" and report.detail == {"target-lifecycle-state": state}


@pytest.mark.parametrize(
    "body",
    [
        '{"action": "stop", "time": "in 2 minutes"}',
        '{"action": "terminate", "time": "0001-01-01T00:00:00+01:00"}',
        '{"action": "terminate", "time": 1700000000}',
        '{"action": "terminate"}',
    ],
)
def test_a_spot_notice_whose_time_does_not_parse_is_terminate_without_deadline(body: str) -> None:
    # Dropping it (as before) left the job running into the reclaim; Azure's rule is safer.
    # The unread time is said (PartialParse), not passed over in silence.
    with pytest.raises(PartialParse, match="'time'") as caught:
        parse_instance_action(body, now=NOW)
    (report,) = caught.value.reports
    assert (report.action, report.reason, report.deadline) == (
        "terminate",
        "spot-interruption",
        None,
    )
    assert report.detail == json.loads(body)
    with pytest.raises(PartialParse) as again:
        parse_instance_action(body)
    assert again.value.reports[0].id == report.id


@pytest.mark.parametrize(
    "body",
    [
        '{"action": "explode", "time": "2017-09-18T08:22:00Z"}',
        '{"action": "Terminate", "time": "2017-09-18T08:22:00Z"}',
        '{"action": 7, "time": "2017-09-18T08:22:00Z"}',
        '{"time": "2017-09-18T08:22:00Z"}',
    ],
)
def test_a_spot_notice_with_an_action_not_documented_is_still_a_terminate(body: str) -> None:
    # A 200 on instance-action is the interruption itself; dropped for an action outside the
    # three documented, the job ran into the reclaim with only a bad-spot error in the log.
    with pytest.raises(PartialParse) as caught:
        parse_instance_action(body, now=NOW)
    (report,) = caught.value.reports
    assert (report.action, report.reason) == ("terminate", "spot-interruption")
    assert report.deadline == datetime(2017, 9, 18, 8, 22, tzinfo=timezone.utc)
    assert report.detail == json.loads(body)
    with pytest.raises(PartialParse) as again:
        parse_instance_action(body, now=NOW)
    assert again.value.reports[0].id == report.id


@pytest.mark.parametrize("state", ["InService", "Standby", "Warmed:Running", "Detached"])
def test_other_asg_states_are_no_notice(state: str) -> None:
    assert parse_lifecycle_state(state) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("21 Jan 2019 09:00:43 GMT", datetime(2019, 1, 21, 9, 0, 43, tzinfo=timezone.utc)),
        ("2 Feb 2026 15:04:05 GMT", datetime(2026, 2, 2, 15, 4, 5, tzinfo=timezone.utc)),
        ("Mon, 21 Jan 2019 09:00:43 GMT", datetime(2019, 1, 21, 9, 0, 43, tzinfo=timezone.utc)),
        ("9 DEC 2030 9:05:00 UTC", datetime(2030, 12, 9, 9, 5, tzinfo=timezone.utc)),
        ("2019-01-21T09:00:43Z", datetime(2019, 1, 21, 9, 0, 43, tzinfo=timezone.utc)),
    ],
)
def test_aws_dates(text: str, expected: datetime) -> None:
    assert parse_aws_date(text) == expected


@pytest.mark.parametrize("text", ["21 Foo 2019 09:00:43 GMT", "31 Feb 2019 09:00:43 GMT", "soon"])
def test_bad_aws_dates(text: str) -> None:
    with pytest.raises(ValueError):
        parse_aws_date(text)


def test_aws_dates_do_not_depend_on_the_locale() -> None:
    # strptime's %b follows LC_TIME; this machine may only have the C locale, so also make
    # sure the parser does not go near it.
    source = inspect.getsource(imds)
    assert "strptime" not in source and "%b" not in source
    for name in ("de_DE.UTF-8", "fr_FR.UTF-8", "ja_JP.UTF-8", "C.UTF-8"):
        try:
            previous = locale.setlocale(locale.LC_TIME, name)
        except locale.Error:
            continue
        try:
            moment = datetime(2019, 5, 3, 9, 0, 43, tzinfo=timezone.utc)
            assert format_aws_date(moment) == "3 May 2019 09:00:43 GMT"
            assert parse_aws_date("3 May 2019 09:00:43 GMT") == moment
        finally:
            locale.setlocale(locale.LC_TIME, previous)


@pytest.mark.parametrize(
    "body",
    [
        '{"noticeTime": "2020-10-27T08:22:00"}',
        '{"noticeTime": "soon"}',
        '{"noticeTime": 5}',
        "{}",
    ],
)
def test_a_rebalance_whose_notice_time_does_not_parse_still_drains(body: str) -> None:
    """A 200 on the rebalance path is the recommendation; its noticeTime only says when it
    was sent. One without a zone (`2020-10-27T08:22:00`), unreadable or missing was a
    ParseError: counted, and no drain at all. It now drains (without `notice_time`), and the
    odd field is still said as a PartialParse, as for a scheduled event's NotBefore."""
    with pytest.raises(PartialParse) as caught:
        parse_rebalance(body)
    assert "noticeTime" in str(caught.value)
    (report,) = caught.value.reports
    assert (report.action, report.reason) == ("drain", "rebalance-recommendation")
    assert report.detail == json.loads(body) and imds.NOTICE_TIME not in report.detail
    again = caught.value.reports[0].id
    with pytest.raises(PartialParse) as caught:
        parse_rebalance(body)
    assert caught.value.reports[0].id == again


@pytest.mark.parametrize(
    ("parser", "body", "fragment"),
    [
        (parse_instance_action, b"\xff\xfe", "not UTF-8"),
        (parse_instance_action, "{nope", "not JSON"),
        (parse_instance_action, "[1]", "expected a JSON object"),
        (parse_instance_action, '{"time": "2017-09-18T08:22:00Z"}', "'action'"),
        (parse_instance_action, '{"action": "explode", "time": "2017-09-18T08:22:00Z"}', "explode"),
        (parse_rebalance, '{"noticeTime": 5}', "'noticeTime'"),
        (parse_scheduled, '{"EventId": "x"}', "expected a JSON array"),
        (parse_scheduled, "[1]", "item 0"),
        (parse_scheduled, '[{"State": "active", "NotBefore": "tomorrow"}]', "'NotBefore'"),
        (parse_scheduled, "[" * 100000, "not JSON"),
        (parse_lifecycle_state, "<html>404</html>", "not a lifecycle state"),
        (parse_identity, '{"instanceId": "vm-1"}', "not an instance"),
    ],
)
def test_bad_bodies_raise_a_parse_error_naming_the_fault(parser, body, fragment) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ParseError) as caught:
        parser(body)
    assert fragment in str(caught.value)


# Property tests: whatever IMDS (or a broken proxy) answers, only ParseError escapes.

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
times = st.one_of(
    st.datetimes(timezones=st.just(timezone.utc)).map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ")),
    st.datetimes(timezones=st.just(timezone.utc)).map(format_aws_date),
    st.text(max_size=30),
)
spot_like = st.fixed_dictionaries(
    {"action": st.sampled_from(["terminate", "stop", "hibernate", "x"]) | json_values},
    optional={"time": times | json_values},
)
rebalance_like = st.fixed_dictionaries({}, optional={"noticeTime": times | json_values})
event_like = st.fixed_dictionaries(
    {},
    optional={
        "NotBefore": times | json_values,
        "NotAfter": times | json_values,
        "EventId": st.text(max_size=150) | json_values,
        "State": st.sampled_from(["active", "canceled", "completed"]) | json_values,
        "Code": st.text(max_size=20),
        "Description": st.text(max_size=40) | json_values,
    },
)
bodies = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200),
    json_values.map(json.dumps),
    spot_like.map(json.dumps),
    rebalance_like.map(json.dumps),
    st.lists(event_like | json_values, max_size=3).map(json.dumps),
)
PARSERS = [
    parse_instance_action,
    parse_rebalance,
    parse_scheduled,
    parse_lifecycle_state,
    parse_identity,
]


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.__name__)
@settings(max_examples=examples(300), deadline=None)
@given(body=bodies)
def test_nothing_but_parse_error_escapes(parser, body) -> None:  # type: ignore[no-untyped-def]
    try:
        result = parser(body)
    except ParseError:
        return
    assert isinstance(result, (list, dict))


@settings(max_examples=examples(300), deadline=None)
@given(text=st.text(max_size=40))
def test_aws_date_parsing_raises_only_value_error(text: str) -> None:
    try:
        parsed = parse_aws_date(text)
    except ValueError:
        return
    assert parsed.tzinfo is not None


@settings(max_examples=examples(200), deadline=None)
@given(moment=st.datetimes(timezones=st.just(timezone.utc)))
def test_aws_dates_round_trip(moment: datetime) -> None:
    moment = moment.replace(microsecond=0)
    assert parse_aws_date(format_aws_date(moment)) == moment


def _publishable(report: Report) -> None:
    """The agent's notice of `report` serializes, as its publish and its state file need."""
    notice = Notice(
        id=report.id,
        seq=1,
        action=report.action,
        reason=report.reason,
        provider=report.provider,
        deadline=report.deadline,
        noticed_at=NOW,
        sent_at=NOW,
        detail=report.detail,
    )
    json.loads(notice.model_dump_json())
    encode_state(AgentState(provider=[notice]))


@settings(max_examples=examples(60))
@given(depth=st.integers(0, 900), shape=st.sampled_from(["object", "array"]))
def test_a_spot_answer_with_a_field_nested_deep_is_still_a_terminate_the_agent_can_send(
    depth: int, shape: str
) -> None:
    """The answer is the notice's detail: a field nested 300 deep (JSON reads up to about
    1,000) made a Report whose notice pydantic could not serialize ("Maximum serialization
    depth exceeded"): the publish raised in the watcher, which crashed at every answer, and
    the terminate never went out."""
    nested: object = "x"
    for _ in range(depth):
        nested = {"a": nested} if shape == "object" else [nested]
    body = json.dumps({"action": "terminate", "time": "2017-09-18T08:22:00Z", "extra": nested})
    (report,) = parse_instance_action(body.encode(), now=NOW)
    assert report.action == "terminate" and report.deadline is not None
    _publishable(report)


@settings(max_examples=examples(200), deadline=None)
@given(spot=spot_like)
def test_any_object_at_instance_action_is_one_terminate(spot: dict[str, object]) -> None:
    try:
        reports = parse_instance_action(json.dumps(spot), now=NOW)
    except PartialParse as partial:
        reports = partial.reports
    assert [(r.action, r.reason) for r in reports] == [("terminate", "spot-interruption")]
