"""The pure parsers and the mapping, example by example and property by property."""

from __future__ import annotations

import contextlib
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from forewarn.agent.protocol import Report
from forewarn.protocol.timefmt import format_time, parse_time
from forewarn.providers.base import ParseError
from forewarn.providers.gcp.settings import Settings
from forewarn.providers.gcp.watch import (
    MAINTENANCE_VALUES,
    NoticeTrack,
    gpu_machine_type,
    keep_stop,
    local_gpus,
    maintenance_report,
    metadata_root,
    parse_maintenance_event,
    parse_notice_duration,
    parse_on_host_maintenance,
    parse_preempted,
    parse_upcoming,
    preemption_report,
    unknown_upcoming_words,
    upcoming_report,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

NOW = datetime(2026, 11, 30, 3, 0, tzinfo=timezone.utc)
# Aware UTC times of this century and the next: window starts and clocks for the properties.
UTC_TIMES = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(timezone.utc)
)


# instance/preempted


@pytest.mark.parametrize(("text", "value"), [("TRUE", True), ("FALSE", False), ("TRUE\n", True)])
def test_preempted_values(text: str, value: bool) -> None:
    assert parse_preempted(text) is value


@pytest.mark.parametrize("text", ["", "true", "yes", "<html>", "TRUE FALSE"])
def test_preempted_rejects_anything_else(text: str) -> None:
    with pytest.raises(ParseError, match="instance/preempted"):
        parse_preempted(text)


@given(st.text())
def test_preempted_is_true_only_for_true(text: str) -> None:
    try:
        value = parse_preempted(text)
    except ParseError:
        assert text.strip() not in ("TRUE", "FALSE")
    else:
        assert value is (text.strip() == "TRUE")


# instance/maintenance-event


@pytest.mark.parametrize("value", MAINTENANCE_VALUES)
def test_maintenance_values(value: str) -> None:
    assert parse_maintenance_event(value + "\n") == value


@given(st.one_of(st.text(), st.from_regex(r"\A[A-Z][A-Z0-9_]{0,30}\Z")))
def test_maintenance_parser_accepts_the_three_values_and_other_upper_case_words(
    text: str,
) -> None:
    try:
        value = parse_maintenance_event(text)
    except ParseError as error:
        assert text.strip() not in MAINTENANCE_VALUES
        assert "instance/maintenance-event" in str(error)
    else:
        assert value == text.strip()
        assert value in MAINTENANCE_VALUES or (value.isupper() and " " not in value)


@pytest.mark.parametrize("text", ["<html>maintenance</html>", "terminate", "", "TRUE NOW"])
def test_maintenance_parser_refuses_what_is_not_a_value(text: str) -> None:
    with pytest.raises(ParseError, match="instance/maintenance-event"):
        parse_maintenance_event(text)


def test_an_unknown_maintenance_value_drains_without_deadline() -> None:
    report = maintenance_report("RESTART_ON_HOST_MAINTENANCE", Settings(migrate="ignore"), NOW)
    assert report is not None
    assert (report.action, report.reason, report.deadline) == ("drain", "host-maintenance", None)
    assert report.detail == {"maintenance-event": "RESTART_ON_HOST_MAINTENANCE"}


# instance/upcoming-maintenance

WINDOW = {
    "can_reschedule": True,
    "latest_window_start_time": "2026-12-14T02:00:00Z",
    "maintenance_reasons": ["PLANNED_UPDATE"],
    "maintenance_status": "PENDING",
    "type": "SCHEDULED",
    "window_end_time": "2026-12-07T06:00:00Z",
    "window_start_time": "2026-12-07T02:00:00Z",
}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "NONE",
        "{}",
        "{ }",
        '"NONE"',
        "null",
        '{"error":"no notifications have been received yet, try again later"}',
    ],
)
def test_upcoming_nothing_scheduled(text: str) -> None:
    assert parse_upcoming(text) is None


def test_upcoming_window() -> None:
    window = parse_upcoming(json.dumps(WINDOW))
    assert window is not None
    assert window.start == datetime(2026, 12, 7, 2, 0, tzinfo=timezone.utc)
    assert window.document == WINDOW


def test_upcoming_window_with_offset_and_camel_case() -> None:
    window = parse_upcoming(json.dumps({"windowStartTime": "2026-12-07T03:00:00+01:00"}))
    assert window is not None and window.start == datetime(2026, 12, 7, 2, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("<html>oops</html>", "not JSON"),
        ("[1, 2]", "JSON object"),
        ('{"window_start_time": "next tuesday"}', "window_start_time"),
        ('{"window_start_time": 12, "type": "SCHEDULED"}', "window_start_time is not a time"),
        ('{"foo": 1}', "no window_start_time"),
        ('{"status": "PENDING"}', "no window_start_time"),
        ('{"window_start_time": "", "type": "", "can_reschedule": false}', "no window_start_time"),
        ('{"maintenance_status": "UNKNOWN", "maintenance_reasons": []}', "no window_start_time"),
    ],
)
def test_upcoming_rejects_malformed_documents(text: str, why: str) -> None:
    with pytest.raises(ParseError, match=why):
        parse_upcoming(text)


@given(st.text())
def test_upcoming_parser_raises_only_parse_errors(text: str) -> None:
    with contextlib.suppress(ParseError):
        parse_upcoming(text)


@given(
    st.datetimes(
        min_value=datetime(2000, 1, 1),
        max_value=datetime(2200, 1, 1),
        timezones=st.just(timezone.utc),
    ),
    st.dictionaries(st.sampled_from(["type", "maintenance_status", "can_reschedule"]), st.text()),
)
def test_upcoming_window_start_round_trips(start: datetime, extra: dict[str, str]) -> None:
    document = {**extra, "window_start_time": format_time(start)}
    window = parse_upcoming(json.dumps(document))
    assert window is not None
    # format_time keeps milliseconds.
    assert abs(window.start - start) < timedelta(milliseconds=1)
    assert window.document == document


# The preemption notice duration in instance/scheduling/


@pytest.mark.parametrize(
    ("document", "seconds"),
    [
        ({}, None),
        ({"preemptible": "TRUE"}, None),
        ({"preemptionNoticeDuration": "120s"}, 120.0),
        ({"preemptionNoticeDuration": 120}, 120.0),
        ({"preemptionNoticeDuration": {"seconds": "120"}}, 120.0),
        ({"preemptionNoticeDuration": {"seconds": 90, "nanos": 500000000}}, 90.5),
        ({"preemption-notice-duration": "2m"}, 120.0),
    ],
)
def test_notice_duration(document: dict[str, object], seconds: float | None) -> None:
    assert parse_notice_duration(json.dumps(document)) == seconds


@pytest.mark.parametrize(
    "text",
    ['{"preemptionNoticeDuration": "soon"}', '{"preemptionNoticeDuration": true}', "[]", "x"],
)
def test_notice_duration_rejects_nonsense(text: str) -> None:
    with pytest.raises(ParseError):
        parse_notice_duration(text)


@given(st.text())
def test_notice_duration_raises_only_parse_errors(text: str) -> None:
    with contextlib.suppress(ParseError):
        parse_notice_duration(text)


# A whole number too large for a float (JSON reads up to 4,300 digits): `float()` raised
# OverflowError, which ended the task reading the scheduling document with no line naming
# the answer (found: adversarial pass H235).
HUGE = 10**400


@pytest.mark.parametrize(
    "duration",
    [HUGE, -HUGE, {"seconds": HUGE}, {"seconds": 1, "nanos": HUGE}, {"seconds": str(HUGE)}],
    ids=["number", "negative", "seconds", "nanos", "seconds-text"],
)
def test_a_notice_duration_past_a_float_is_out_of_range(duration: object) -> None:
    with pytest.raises(ParseError, match="out of range"):
        parse_notice_duration(json.dumps({"preemptionNoticeDuration": duration}))


durations = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**500), max_value=10**500)
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["120s", "1e999", "nan", "-0", "2m"]),
    lambda children: (
        st.dictionaries(st.sampled_from(["seconds", "nanos", "x"]), children, max_size=3)
        | st.lists(children, max_size=2)
    ),
    max_leaves=5,
)


@settings(max_examples=examples(300), deadline=None)
@given(durations)
def test_any_notice_duration_is_seconds_in_range_or_a_parse_error(duration: object) -> None:
    try:
        seconds = parse_notice_duration(json.dumps({"preemptionNoticeDuration": duration}))
    except ParseError:
        return
    assert seconds is None or 0 <= seconds <= 86400


# Mapping


def test_preempted_maps_to_terminate_with_the_notice_as_deadline() -> None:
    report = preemption_report(True, 30.0, NOW)
    assert report is not None
    assert (report.action, report.reason) == ("terminate", "preemption")
    assert report.deadline == NOW + timedelta(seconds=30)
    assert preemption_report(False, 30.0, NOW) is None


def test_terminate_on_host_maintenance_drains_with_an_hour() -> None:
    report = maintenance_report("TERMINATE_ON_HOST_MAINTENANCE", Settings(), NOW)
    assert report is not None
    assert (report.action, report.reason) == ("drain", "host-maintenance")
    assert report.deadline == NOW + timedelta(hours=1)


@pytest.mark.parametrize(
    ("text", "gpus"),
    [
        ("projects/123/machineTypes/a2-highgpu-1g", True),
        ("projects/123/machineTypes/a3-megagpu-8g", True),
        ("projects/123/machineTypes/g2-standard-4", True),
        ("projects/123/machineTypes/n1-standard-8", False),
        ("projects/123/machineTypes/n2-standard-8", False),
        ("projects/123/machineTypes/c3-standard-4\n", False),
    ],
)
def test_gpu_machine_types(text: str, gpus: bool) -> None:
    assert gpu_machine_type(text) is gpus


def test_local_gpus(tmp_path: Path) -> None:
    device, driver = tmp_path / "nvidia0", tmp_path / "gpus"
    driver.mkdir()
    assert not local_gpus((driver, device))  # an empty driver list, no device
    (driver / "0000:00:04.0").mkdir()
    assert local_gpus((driver, device))
    device.touch()
    assert local_gpus((device,))


def test_a_maintenance_notice_given_wins() -> None:
    report = maintenance_report("TERMINATE_ON_HOST_MAINTENANCE", Settings(), NOW, 60.0)
    assert report is not None and report.deadline == NOW + timedelta(seconds=60)


def test_migrate_drains_without_deadline_unless_ignored() -> None:
    report = maintenance_report("MIGRATE_ON_HOST_MAINTENANCE", Settings(), NOW)
    assert report is not None and report.action == "drain" and report.deadline is None
    assert (
        maintenance_report("MIGRATE_ON_HOST_MAINTENANCE", Settings(migrate="ignore"), NOW) is None
    )
    assert maintenance_report("NONE", Settings(), NOW) is None


def test_upcoming_window_drains_until_its_start() -> None:
    window = parse_upcoming(json.dumps(WINDOW))
    report = upcoming_report(window, NOW)
    assert report is not None
    assert (report.action, report.reason) == ("drain", "scheduled-maintenance")
    assert report.deadline == datetime(2026, 12, 7, 2, tzinfo=timezone.utc)
    assert report.detail == WINDOW


@given(
    start=UTC_TIMES,
    now=UTC_TIMES,
    status=st.sampled_from(["ONGOING", "ongoing", " Ongoing ", "PENDING", "", None, 1]),
    key=st.sampled_from(["maintenance_status", "maintenanceStatus"]),
    live_migrates=st.booleans(),
)
def test_an_upcoming_window_ongoing_before_its_start_is_due_now(
    start: datetime, now: datetime, status: Any, key: str, live_migrates: bool
) -> None:
    """Maintenance that began before its window (ONGOING, the start still ahead: Google, or
    the user's `perform-maintenance`, started it early) has started, and started means now;
    a drain toward the old start kept the job training into the stop. Otherwise the window's
    start stands; a live-migrating VM has no deadline either way."""
    document: dict[str, Any] = {"window_start_time": format_time(start), key: status}
    window = parse_upcoming(json.dumps(document))
    report = upcoming_report(window, now, live_migrates=live_migrates)
    assert report is not None and report.action == "drain"
    ongoing = isinstance(status, str) and status.strip().upper() == "ONGOING"
    parsed = parse_time(format_time(start))
    expected = min(parsed, now) if ongoing else parsed
    assert report.deadline == (None if live_migrates else expected)


# NoticeTrack: ids


def _drain(value: str, at: datetime = NOW) -> Report | None:
    return maintenance_report(value, Settings(), at)


_VALUES = st.sampled_from(
    ["NONE", "MIGRATE_ON_HOST_MAINTENANCE", "TERMINATE_ON_HOST_MAINTENANCE", "SOMETHING_NEW"]
)


@given(st.lists(st.tuples(_VALUES, st.integers(0, 7200)), max_size=12))
def test_a_stop_announced_stands_until_migrate_or_none(answers: list[tuple[str, int]]) -> None:
    """Whatever values follow TERMINATE_ON_HOST_MAINTENANCE, seconds apart in time order,
    the deadline published is its first one until MIGRATE, NONE or that deadline: never
    dropped by a value not known, never moved later by TERMINATE shown again."""
    track = NoticeTrack("maintenance-event")
    stop: datetime | None = None  # the deadline of the stop announced and not called off
    settings = Settings(migrate="drain")
    for value, seconds in sorted(answers, key=lambda answer: answer[1]):
        now = NOW + timedelta(seconds=seconds)
        report = keep_stop(maintenance_report(value, settings, now), track.active, now)
        sent = track.observe(report, {"maintenance-event": value})
        if value in ("NONE", "MIGRATE_ON_HOST_MAINTENANCE"):
            stop = None
        elif value == "TERMINATE_ON_HOST_MAINTENANCE":
            if stop is None or stop <= now:
                # A new stop, unless TERMINATE stands unchanged (then the notice keeps its own).
                standing = track.active is not None and track.active.deadline == stop
                stop = stop if standing and sent is None else now + timedelta(hours=1)
        elif stop is not None and stop <= now:
            stop = None  # past: a value not known is a drain without deadline again
        if track.active is not None:
            assert track.active.deadline == stop
        if sent is not None and sent.action == "drain":
            assert sent.deadline == stop


def test_track_keeps_one_id_over_repeats_and_clears_under_it() -> None:
    track = NoticeTrack("maintenance-event")
    first = track.observe(_drain("TERMINATE_ON_HOST_MAINTENANCE"), {}, "etag-1")
    assert first is not None and first.id.startswith("gcp/maintenance-event/")
    later = NOW + timedelta(seconds=60)
    assert track.observe(_drain("TERMINATE_ON_HOST_MAINTENANCE", later), {}, "etag-1") is None
    cleared = track.observe(None, {"maintenance-event": "NONE"}, "etag-2")
    assert cleared is not None
    assert (cleared.id, cleared.action, cleared.reason) == (first.id, "clear", "host-maintenance")
    assert cleared.detail == {"maintenance-event": "NONE"}
    assert track.observe(None, {}, "etag-2") is None


def test_track_change_keeps_the_id_and_a_new_episode_gets_a_new_one() -> None:
    track = NoticeTrack("maintenance-event")
    first = track.observe(_drain("MIGRATE_ON_HOST_MAINTENANCE"), {}, "a")
    changed = track.observe(_drain("TERMINATE_ON_HOST_MAINTENANCE"), {}, "b")
    assert first is not None and changed is not None
    assert changed.id == first.id and changed.deadline is not None
    assert track.observe(None, {}, "c") is not None
    again = track.observe(_drain("TERMINATE_ON_HOST_MAINTENANCE", NOW + timedelta(1)), {}, "d")
    assert again is not None and again.id != first.id


@given(st.lists(st.sampled_from(MAINTENANCE_VALUES), max_size=30))
def test_track_reports_only_transitions(values: list[str]) -> None:
    track = NoticeTrack("maintenance-event")
    active: str | None = None
    for index, value in enumerate(values):
        at = NOW + timedelta(seconds=index)
        report = track.observe(_drain(value, at), {"maintenance-event": value}, str(index))
        now_active = None if value == "NONE" else value
        if now_active == active:
            assert report is None
        else:
            assert report is not None
            assert report.action == ("clear" if now_active is None else "drain")
        active = now_active


# The metadata root


@pytest.mark.parametrize(
    ("url", "environ", "root"),
    [
        (None, {}, "http://metadata.google.internal/computeMetadata/v1"),
        ("http://127.0.0.1:8089", {}, "http://127.0.0.1:8089/computeMetadata/v1"),
        (
            "http://127.0.0.1:8089/computeMetadata/v1/",
            {},
            "http://127.0.0.1:8089/computeMetadata/v1",
        ),
        (None, {"GCE_METADATA_HOST": "127.0.0.1:9999"}, "http://127.0.0.1:9999/computeMetadata/v1"),
        (None, {"GCE_METADATA_ROOT": "127.0.0.1:7"}, "http://127.0.0.1:7/computeMetadata/v1"),
        (
            "http://127.0.0.1:1",
            {"GCE_METADATA_HOST": "127.0.0.1:2"},
            "http://127.0.0.1:1/computeMetadata/v1",
        ),
    ],
)
def test_metadata_root(url: str | None, environ: dict[str, str], root: str) -> None:
    assert metadata_root(url, environ) == root


@pytest.mark.parametrize(
    ("document", "policy"),
    [
        ({"onHostMaintenance": "MIGRATE", "preemptible": "FALSE"}, "MIGRATE"),
        ({"on-host-maintenance": "terminate"}, "TERMINATE"),
        ({"preemptible": "TRUE"}, None),
        ({"onHostMaintenance": ""}, None),
    ],
)
def test_on_host_maintenance_is_read_from_the_scheduling_directory(
    document: dict[str, Any], policy: str | None
) -> None:
    assert parse_on_host_maintenance(json.dumps(document)) == policy


def test_an_upcoming_window_of_a_live_migrating_vm_drains_without_deadline() -> None:
    window = parse_upcoming(json.dumps({"window_start_time": "2026-12-09T03:00:00Z"}))
    report = upcoming_report(window, NOW, live_migrates=True)
    assert report is not None and (report.action, report.deadline) == ("drain", None)


@given(
    st.one_of(
        st.text(max_size=60),
        st.dictionaries(st.text(max_size=20), st.text(max_size=20)).map(json.dumps),
    )
)
def test_on_host_maintenance_never_raises_but_parse_error(text: str) -> None:
    with contextlib.suppress(ParseError):
        policy = parse_on_host_maintenance(text)
        assert policy is None or (policy and policy == policy.upper())


_NESTED = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    "parse", [parse_upcoming, parse_notice_duration, parse_on_host_maintenance]
)
def test_a_document_nested_past_json_recursion_is_a_parse_error(parse: Any) -> None:
    """json.loads raises RecursionError, not ValueError, for a body nested a few thousand
    deep: it escaped the parser, and the watcher crashed at every poll of that answer."""
    with pytest.raises(ParseError, match="not JSON"):
        parse(_NESTED)
    with pytest.raises(ParseError, match="not JSON"):
        parse('{"a": ' + _NESTED + "}")


def test_an_upcoming_window_keeps_its_notice_until_its_end() -> None:
    window = parse_upcoming(json.dumps(WINDOW))
    report = upcoming_report(window, NOW)
    assert report is not None
    assert report.until == datetime(2026, 12, 7, 6, tzinfo=timezone.utc)
    # A VM that live-migrates has no deadline, so no window to keep it by either.
    migrating = upcoming_report(window, NOW, live_migrates=True)
    assert migrating is not None and migrating.until is None


@given(
    start=UTC_TIMES,
    end=st.one_of(
        st.datetimes(
            min_value=datetime(1990, 1, 1),
            max_value=datetime(2110, 1, 1),
            timezones=st.just(timezone.utc),
        ).map(format_time),
        st.text(max_size=40),
        st.integers(),
        st.none(),
    ),
    key=st.sampled_from(["window_end_time", "windowEndTime"]),
)
def test_an_upcoming_window_end_is_after_its_start_or_none(
    start: datetime, end: Any, key: str
) -> None:
    """Whatever `window_end_time` holds, the window parses (an odd end never hides the
    window), and its end is read only when it is a time after the start."""
    document = {"window_start_time": format_time(start), key: end}
    window = parse_upcoming(json.dumps(document))
    assert window is not None
    if window.end is not None:
        assert window.end > window.start
        assert isinstance(end, str) and abs(parse_time(end) - window.end) < timedelta(seconds=1)
    elif isinstance(end, str):
        with contextlib.suppress(ValueError, OverflowError):
            assert parse_time(end) <= window.start  # a time given, so not after the start


# The keys of an upcoming-maintenance document (contracts 2.5), in both spellings.
_MAINTENANCE_KEYS = [
    "can_reschedule",
    "latest_window_start_time",
    "maintenance_reasons",
    "maintenance_status",
    "type",
    "window_end_time",
    "window_start_time",
    "canReschedule",
    "maintenanceStatus",
    "windowStartTime",
]
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=30))
# What says maintenance is coming, without a start.
_NAMING = st.one_of(
    st.tuples(st.just("maintenance_status"), st.sampled_from(["PENDING", "ONGOING", " ongoing"])),
    st.tuples(st.just("type"), st.sampled_from(["SCHEDULED", "UNSCHEDULED", "unscheduled\n"])),
    st.tuples(
        st.just("maintenance_reasons"),
        st.lists(st.sampled_from(["PLANNED_UPDATE", "FAILURE_GPU"]), min_size=1),
    ),
)
_DEFAULTS = st.sampled_from([None, "", False, [], "UNKNOWN", "MAINTENANCE_STATUS_UNSPECIFIED"])


def _without_start(document: dict[str, Any]) -> None:
    for key in ("window_start_time", "windowStartTime"):
        if key in document:
            document[key] = None if document[key] is None else ""


@given(
    document=st.dictionaries(st.sampled_from(_MAINTENANCE_KEYS), _VALUES),
    naming=_NAMING,
    ongoing=st.booleans(),
)
def test_maintenance_without_a_start_is_a_drain_without_deadline(
    document: dict[str, Any], naming: tuple[str, Any], ongoing: bool
) -> None:
    """An upcoming-maintenance document that says maintenance is coming (an UNSCHEDULED
    one begun at once, say) but gives no window start was a parse error: nothing published,
    the provider degraded, and the job trained into the stop. It is maintenance coming at a
    time not known: a drain without deadline, now when it is ONGOING."""
    _without_start(document)
    key, value = naming
    document[key] = value
    for camel in ("maintenanceStatus", "maintenanceReasons"):
        document.pop(camel, None)
    status = document.get("maintenance_status")
    if ongoing:
        document["maintenance_status"] = "ONGOING"
    elif isinstance(status, str) and status.strip().upper() == "ONGOING":
        document["maintenance_status"] = "PENDING"
    window = parse_upcoming(json.dumps(document))
    assert window is not None and window.start is None and window.document == document
    report = upcoming_report(window, NOW)
    assert report is not None
    assert (report.action, report.reason, report.detail) == (
        "drain",
        "scheduled-maintenance",
        document,
    )
    assert report.deadline == (NOW if ongoing else None)


@given(document=st.dictionaries(st.sampled_from(_MAINTENANCE_KEYS), _DEFAULTS, min_size=1))
def test_a_document_of_defaults_without_a_start_is_no_notice(document: dict[str, Any]) -> None:
    """Empty strings, false and unspecified enums (a message marshalled with its defaults)
    say nothing is coming: never a drain, which would stand on every VM for good."""
    with pytest.raises(ParseError, match="window_start_time"):
        parse_upcoming(json.dumps(document))


_DOCUMENTED = {"maintenance_status": ("PENDING", "ONGOING"), "type": ("SCHEDULED", "UNSCHEDULED")}
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


@settings(max_examples=examples(200))
@given(
    status=st.one_of(
        st.sampled_from(["PENDING", " ongoing ", "", "MAINTENANCE_STATUS_UNSPECIFIED"]), _JSON
    ),
    kind=st.one_of(st.sampled_from(["SCHEDULED", "unscheduled", "TYPE_UNSPECIFIED"]), _JSON),
    present=st.sets(st.sampled_from(["maintenance_status", "type"])),
)
def test_unknown_upcoming_words_names_exactly_the_values_not_documented(
    status: Any, kind: Any, present: set[str]
) -> None:
    """Whatever a window document holds (any JSON under the two keys), the words reported are
    the status and type that are not documented, defaults aside; a documented one in any
    case and spacing is never reported."""
    document = {"maintenance_status": status, "type": kind, "window_start_time": "x"}
    document = {k: v for k, v in document.items() if k in present or k == "window_start_time"}
    words = unknown_upcoming_words(document)
    expected = []
    for key in ("maintenance_status", "type"):
        if key not in document or document[key] is None:
            continue
        value = document[key]
        if isinstance(value, str):
            word = value.strip().upper()
            if word in _DOCUMENTED[key] or not word or word.endswith("UNSPECIFIED"):
                continue
        expected.append(key)
    assert [w.split(" ", 1)[0] for w in words] == expected
    assert all(len(w) < 200 for w in words)  # a huge value is quoted short
