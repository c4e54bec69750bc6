"""The record of which events ended the machine's previous boot (`azure-boot.json`)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from forewarn.providers.azure.boots import BOOT_FILE, BootRecord
from forewarn.providers.azure.events import parse_event
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)
ids = st.sampled_from(["A", "B", "C"])
files = st.fixed_dictionaries(
    {
        "boot_id": st.sampled_from(["this-boot", "the-boot-before"]) | json_values,
        "seen": st.lists(ids | json_values, max_size=4) | json_values,
        "ended": st.lists(ids | json_values, max_size=4) | json_values,
        "retired": st.lists(ids | json_values, max_size=4) | json_values,
    }
)
events = st.lists(
    st.builds(
        lambda event_id, kind, status: parse_event(
            {"EventId": event_id, "EventType": kind, "EventStatus": status, "Resources": ["vm"]}
        ),
        ids,
        st.sampled_from(["Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"]),
        st.sampled_from(["Scheduled", "Started"]),
    ),
    max_size=3,
    unique_by=lambda event: event.event_id,
)


def record(tmp_path: Path, payload: Any) -> BootRecord:
    path = tmp_path / BOOT_FILE
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return BootRecord(path, "this-boot")


@settings(max_examples=examples(200), deadline=None)
@given(payload=files | json_values | st.text(max_size=20), first=events, then=events)
def test_any_file_gives_a_record_that_holds_back_only_listed_started_events(
    tmp_path_factory: Any, payload: Any, first: list[Any], then: list[Any]
) -> None:
    tmp_path = tmp_path_factory.mktemp("boots")
    boots = record(tmp_path, payload)
    for document in (first, then):
        held = boots.held_back(document) | boots.retired_listed(document)
        started = {event.event_id for event in document if event.status == "Started"}
        assert held <= started
        boots.published([event for event in document if event.event_id not in held])
        for event in document:
            if event.status == "Started" and event.event_id not in held:
                boots.retire(event.event_id)
    # What it wrote is read back as the same record, by this boot.
    again = BootRecord(tmp_path / BOOT_FILE, "this-boot")
    assert (again.seen, again.ended, again.before) == (boots.seen, boots.ended, set())
    assert again.retired == boots.retired


def test_a_retired_started_event_is_held_while_listed_started_and_across_a_stray_answer(
    tmp_path: Path,
) -> None:
    """The agent retired a Started event that Azure still lists: held back while it stays
    listed, by a record read again in this boot (a restarted agent) too; one document without
    it (a stray answer) does not let it go, two in a row do. Another boot holds nothing."""
    started = parse_event(
        {"EventId": "A", "EventType": "Reboot", "EventStatus": "Started", "Resources": ["vm"]}
    )
    boots = BootRecord(tmp_path / BOOT_FILE, "this-boot")
    assert boots.retired_listed([started]) == set()
    boots.retire("A")
    assert boots.retired_listed([started]) == {"A"}
    again = BootRecord(tmp_path / BOOT_FILE, "this-boot")
    assert again.retired_listed([started]) == {"A"}
    assert again.retired_listed([]) == set()  # a stray answer: kept, nothing listed to hold
    assert again.retired_listed([started]) == {"A"}
    assert again.retired_listed([]) == set()
    assert again.retired_listed([]) == set()  # two in a row: over
    assert again.retired_listed([started]) == set()  # listed again: a new one to raise
    boots.retire("A")
    boots.published([])
    # In the next boot it is not retired any more, but it is what ended the last boot.
    after_reboot = BootRecord(tmp_path / BOOT_FILE, "the-next-boot")
    assert after_reboot.retired_listed([started]) == set()
    assert after_reboot.held_back([started]) == {"A"}


def test_only_the_first_document_after_a_reboot_decides(tmp_path: Path) -> None:
    started = parse_event(
        {"EventId": "A", "EventType": "Reboot", "EventStatus": "Started", "Resources": ["vm"]}
    )
    boots = record(tmp_path, {"boot_id": "the-boot-before", "seen": ["A"], "ended": []})
    assert boots.held_back([]) == set()  # not listed at the first document of this boot
    assert boots.held_back([started]) == set()  # then listed Started: it started in this boot
    boots = record(tmp_path, {"boot_id": "the-boot-before", "seen": ["A"], "ended": []})
    assert boots.held_back([started]) == {"A"}
    assert boots.held_back([started]) == {"A"}
    assert boots.held_back([]) == set()  # gone: nothing to hold back any more
    assert BootRecord(None, "this-boot").held_back([started]) == set()


BOOTED = datetime(2026, 12, 5, 9, 0, tzinfo=timezone.utc)


def test_without_a_boot_id_the_boot_time_tells_the_boot_before(tmp_path: Path) -> None:
    """In a container where /proc/sys/kernel/random/boot_id cannot be read, the record kept no
    file: after a Reboot restarted the VM, Azure listing it Started for minutes more, the
    event was published again as a terminate due now, and the job resumed after the reboot
    exited at once, again at each restart until Azure removed it. The boot time (the clock
    since boot) tells the boots apart there, as for AWS."""
    started = parse_event(
        {"EventId": "A", "EventType": "Reboot", "EventStatus": "Started", "Resources": ["vm"]}
    )
    scheduled = parse_event(
        {"EventId": "A", "EventType": "Reboot", "EventStatus": "Scheduled", "Resources": ["vm"]}
    )
    path = tmp_path / BOOT_FILE
    earlier = BOOTED - timedelta(hours=1)
    first = BootRecord(path, None, booted=earlier)
    assert first.held_back([scheduled]) == set()
    first.published([scheduled])
    # The same boot, its start read again a little off (now less the clock since boot).
    same = BootRecord(path, None, booted=earlier + timedelta(seconds=0.4))
    assert (same.seen, same.before) == ({"A"}, set())
    assert same.held_back([started]) == set()
    # The next boot: the event Started before it began is held back while it is listed.
    after = BootRecord(path, None, booted=BOOTED)
    assert after.held_back([started]) == {"A"}
    after.published([])
    assert BootRecord(path, None, booted=BOOTED).held_back([started]) == {"A"}
    # Neither an id nor a boot time: nothing held back, no file written.
    blind = tmp_path / "blind.json"
    BootRecord(blind, None, booted=None).published([scheduled])
    assert not blind.exists()


@settings(max_examples=examples(60), deadline=None)
@given(
    payload=files | json_values | st.text(max_size=20),
    booted=st.sampled_from(["2026-12-05T09:00:00Z", "2026-12-05T07:00:00Z"]) | json_values,
    first=events,
)
def test_any_file_read_by_boot_time_holds_back_only_listed_started_events(
    tmp_path_factory: Any, payload: Any, booted: Any, first: list[Any]
) -> None:
    tmp_path = tmp_path_factory.mktemp("boots")
    path = tmp_path / BOOT_FILE
    if isinstance(payload, dict):
        payload = {**payload, "booted": booted}
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    boots = BootRecord(path, None, booted=BOOTED)
    held = boots.held_back(first)
    assert held <= {event.event_id for event in first if event.status == "Started"}
    boots.published([event for event in first if event.event_id not in held])
    again = BootRecord(path, None, booted=BOOTED)
    assert (again.seen, again.ended, again.before) == (boots.seen, boots.ended, set())
