"""The record of which scheduled events ended the instance's previous boot (`aws-boot.json`)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from forewarn.providers.aws.boots import BOOT_FILE, RebootRecord
from forewarn.providers.aws.imds import parse_scheduled
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

BOOTED = datetime(2026, 12, 5, 9, 0, tzinfo=timezone.utc)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)
ids = st.sampled_from(["aws/scheduled/A", "aws/scheduled/B"])
dates = st.sampled_from(["5 Dec 2026 08:00:00 GMT", "5 Dec 2026 10:00:00 GMT"])
files = st.fixed_dictionaries(
    {
        "boot_id": st.sampled_from(["this-boot", "the-boot-before"]) | json_values,
        "seen": st.dictionaries(ids | st.text(max_size=4), dates | json_values, max_size=3)
        | json_values,
        "ended": st.dictionaries(ids, dates | json_values, max_size=3) | json_values,
    }
)
codes = st.sampled_from(["system-reboot", "instance-stop", "system-maintenance"])
documents = st.lists(
    st.builds(
        lambda event_id, code, not_before, state: {
            "EventId": event_id,
            "Code": code,
            "NotBefore": not_before,
            "State": state,
        },
        st.sampled_from(["A", "B"]),
        codes,
        dates,
        st.sampled_from(["active", "completed"]),
    ),
    max_size=2,
    unique_by=lambda event: event["EventId"],
)


def record(tmp_path: Path, payload: Any) -> RebootRecord:
    path = tmp_path / BOOT_FILE
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return RebootRecord(path, "this-boot", BOOTED)


@settings(max_examples=examples(60), deadline=None)
@given(payload=files | json_values | st.text(max_size=20), first=documents, then=documents)
def test_any_file_gives_a_record_that_holds_back_only_listed_reboots_due_before_the_boot(
    tmp_path_factory: Any, payload: Any, first: list[Any], then: list[Any]
) -> None:
    tmp_path = tmp_path_factory.mktemp("boots")
    boots = record(tmp_path, payload)
    for document in (first, then):
        reports = parse_scheduled(json.dumps(document))
        shown = boots.held_back(reports)
        for report in reports:
            if report not in shown:
                assert report.action == "drain" and report.deadline is not None
                assert report.deadline <= BOOTED
                assert report.detail["Code"] != "system-maintenance"
        boots.published(shown)
    # What it wrote is read back as the same record, by this boot.
    again = RebootRecord(tmp_path / BOOT_FILE, "this-boot", BOOTED)
    assert (again.seen, again.ended, again.before) == (boots.seen, boots.ended, {})


def test_only_the_first_answer_after_a_reboot_decides(tmp_path: Path) -> None:
    event = {"EventId": "A", "Code": "system-reboot", "NotBefore": "5 Dec 2026 08:00:00 GMT"}
    [listed] = parse_scheduled(json.dumps([event]))
    before = {"boot_id": "the-boot-before", "seen": {listed.id: event["NotBefore"]}}
    boots = record(tmp_path, before)
    assert boots.held_back([]) == []  # not listed at the first answer of this boot
    assert boots.held_back([listed]) == [listed]  # then listed: this boot's
    boots = record(tmp_path, before)
    assert boots.held_back([listed]) == []
    assert boots.held_back([listed]) == []
    [moved] = parse_scheduled(json.dumps([{**event, "NotBefore": "5 Dec 2026 10:00:00 GMT"}]))
    assert boots.held_back([moved]) == [moved]  # rescheduled: a reboot still to come
    assert RebootRecord(None, "this-boot", BOOTED).held_back([listed]) == [listed]
    assert record(tmp_path, before).held_back([listed]) == []
    assert RebootRecord(tmp_path / BOOT_FILE, None, BOOTED).held_back([listed]) == [listed]


def test_without_a_boot_id_the_boot_time_tells_the_boot_before(tmp_path: Path) -> None:
    """In a container where /proc/sys/kernel/random/boot_id cannot be read, the record kept no
    file: a scheduled reboot still listed after it rebooted the instance was published again,
    as a terminate past its NotBefore, and the job resumed after the reboot exited at once.
    The boot time (CLOCK_BOOTTIME) tells the boots apart there."""
    event = {"EventId": "A", "Code": "system-reboot", "NotBefore": "5 Dec 2026 08:00:00 GMT"}
    [listed] = parse_scheduled(json.dumps([event]))
    path = tmp_path / BOOT_FILE
    earlier = datetime(2026, 12, 5, 7, 0, tzinfo=timezone.utc)
    first = RebootRecord(path, None, earlier)
    assert first.held_back([listed]) == [listed]
    first.published([listed])
    # The same boot, its start read again a little off (the clock since boot, less now).
    same = RebootRecord(path, None, earlier + timedelta(seconds=0.4))
    assert (same.seen, same.before) == ({listed.id: event["NotBefore"]}, {})
    assert same.held_back([listed]) == [listed]
    # The next boot, begun after the reboot was due: held back while listed unchanged.
    after = RebootRecord(path, None, BOOTED)
    assert after.held_back([listed]) == []
    after.published([])
    assert RebootRecord(path, None, BOOTED).held_back([listed]) == []
    # Neither an id nor a boot time: nothing held back, no file written.
    blind = tmp_path / "blind.json"
    RebootRecord(blind, None, None).published([listed])
    assert not blind.exists()


@settings(max_examples=examples(60), deadline=None)
@given(
    payload=files | json_values | st.text(max_size=20),
    booted=st.sampled_from(["2026-12-05T09:00:00Z", "2026-12-05T07:00:00Z"]) | json_values,
    first=documents,
)
def test_any_file_read_by_boot_time_holds_back_only_listed_reboots_due_before_the_boot(
    tmp_path_factory: Any, payload: Any, booted: Any, first: list[Any]
) -> None:
    tmp_path = tmp_path_factory.mktemp("boots")
    path = tmp_path / BOOT_FILE
    if isinstance(payload, dict):
        payload = {**payload, "booted": booted}
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    boots = RebootRecord(path, None, BOOTED)
    reports = parse_scheduled(json.dumps(first))
    shown = boots.held_back(reports)
    for report in reports:
        if report not in shown:
            assert report.deadline is not None and report.deadline <= BOOTED
            assert report.detail["Code"] != "system-maintenance"
    boots.published(shown)
    again = RebootRecord(path, None, BOOTED)
    assert (again.seen, again.ended, again.before) == (boots.seen, boots.ended, {})
