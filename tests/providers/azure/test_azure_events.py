# ruff: noqa: E501  (Microsoft's examples are copied verbatim, long lines included)
"""The pure parser: Microsoft's documented answers, every mapping, and property tests."""

from __future__ import annotations

import contextlib
import json
import re
from datetime import datetime, timedelta, timezone

import pytest
from azure_harness import EXPECTED_MAPPING
from forewarn.providers.azure.events import (
    EventsDocument,
    cleared,
    format_not_before,
    parse_compute,
    parse_document,
    parse_not_before,
    report_for,
    reports_for,
    vm_names,
)
from forewarn.providers.base import ParseError
from forewarn.providers.report import Report
from forewarn.providers.skew import CLOCK_AHEAD
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

NOW = datetime(2026, 11, 30, 3, 0, 0, tzinfo=timezone.utc)

# Microsoft's example sequence for two VMs live-migrated together (scheduled-events.md,
# "Example responses"), copied as documented, including its wrong weekday.
DOC_EXAMPLES = [
    """{
    "DocumentIncarnation":  1,
    "Events":  [
               ]
}""",
    """{
    "DocumentIncarnation":  2,
    "Events":  [
                   {
                       "EventId":  "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
                       "EventStatus":  "Scheduled",
                       "EventType":  "Freeze",
                       "ResourceType":  "VirtualMachine",
                       "Resources":  [
                                         "WestNO_0",
                                         "WestNO_1"
                                     ],
                       "NotBefore":  "Mon, 11 Apr 2026 22:26:58 GMT",
                       "Description":  "Virtual machine is being paused because of a memory-preserving Live Migration operation.",
                       "EventSource":  "Platform",
                       "DurationInSeconds":  5
                   }
               ]
}""",
    """{
    "DocumentIncarnation":  3,
    "Events":  [
                   {
                       "EventId":  "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
                       "EventStatus":  "Started",
                       "EventType":  "Freeze",
                       "ResourceType":  "VirtualMachine",
                       "Resources":  [
                                         "WestNO_0",
                                         "WestNO_1"
                                     ],
                       "NotBefore":  "",
                       "Description":  "Virtual machine is being paused because of a memory-preserving Live Migration operation.",
                       "EventSource":  "Platform",
                       "DurationInSeconds":  5
                   }
               ]
}""",
    """{
    "DocumentIncarnation":  4,
    "Events":  [
               ]
}""",
]

# The reference's section 3.2 example (provider-contracts.md).
REFERENCE_EXAMPLE = """{
  "DocumentIncarnation": 2,
  "Events": [
    {"EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123", "EventStatus": "Scheduled", "EventType": "Freeze",
     "ResourceType": "VirtualMachine", "Resources": ["WestNO_0", "WestNO_1"],
     "NotBefore": "Mon, 11 Apr 2026 22:26:58 GMT",
     "Description": "Virtual machine is being paused because of a memory-preserving Live Migration operation.",
     "EventSource": "Platform", "DurationInSeconds": 5}
  ]
}"""

# Microsoft's instance metadata example (instance-metadata-service.md, compute section, Linux).
DOC_COMPUTE = {
    "azEnvironment": "AZUREPUBLICCLOUD",
    "isHostCompatibilityLayerVm": "true",
    "licenseType": "Windows_Client",
    "location": "westus",
    "name": "examplevmname",
    "offer": "UbuntuServer",
    "osProfile": {
        "adminUsername": "admin",
        "computerName": "examplevmname",
        "disablePasswordAuthentication": "true",
    },
    "osType": "Linux",
    "placementGroupId": "f67c14ab-e92c-408c-ae2d-da15866ec79a",
    "platformFaultDomain": "36",
    "platformUpdateDomain": "42",
    "publisher": "Canonical",
    "resourceGroupName": "macikgo-test-may-23",
    "resourceId": "/subscriptions/xxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxx/resourceGroups/"
    "macikgo-test-may-23/providers/Microsoft.Compute/virtualMachines/examplevmname",
    "sku": "18.04-LTS",
    "subscriptionId": "xxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxx",
    "tags": "baz:bash;foo:bar",
    "version": "15.05.22",
    "vmId": "02aab8a4-74ef-476e-8182-f6d2ba4166a6",
    "vmScaleSetName": "crpteste9vflji9",
    "vmSize": "Standard_A3",
    "zone": "",
}


def event(kind: str = "Preempt", **overrides: object) -> dict[str, object]:
    base: dict[str, object] = {
        "EventId": "602d9444-d2cd-49c7-8624-8643e7171297",
        "EventStatus": "Scheduled",
        "EventType": kind,
        "ResourceType": "VirtualMachine",
        "Resources": ["gpu-0"],
        "NotBefore": "Mon, 30 Nov 2026 03:00:30 GMT",
        "Description": "",
        "EventSource": "Platform",
        "DurationInSeconds": -1,
    }
    base.update(overrides)
    return base


def doc(*events: dict[str, object], incarnation: int = 1) -> EventsDocument:
    return parse_document(json.dumps({"DocumentIncarnation": incarnation, "Events": list(events)}))


class TestDocumentedExamples:
    def test_live_migration_sequence_parses(self) -> None:
        documents = [parse_document(text) for text in DOC_EXAMPLES]
        assert [d.incarnation for d in documents] == [1, 2, 3, 4]
        assert [len(d.events) for d in documents] == [0, 1, 1, 0]
        scheduled, started = documents[1].events[0], documents[2].events[0]
        assert scheduled.event_type == "Freeze" and scheduled.status == "Scheduled"
        assert scheduled.resources == ("WestNO_0", "WestNO_1")
        assert scheduled.not_before == datetime(2026, 4, 11, 22, 26, 58, tzinfo=timezone.utc)
        assert started.status == "Started" and started.not_before is None

    def test_reference_example_parses(self) -> None:
        parsed = parse_document(REFERENCE_EXAMPLE)
        assert parsed.incarnation == 2
        assert parsed.events[0].event_id == "C7061BAC-AFDC-4513-B24B-AA5F13A16123"

    def test_documented_freeze_drains_one_of_the_two_vms_only_when_configured(self) -> None:
        parsed = parse_document(DOC_EXAMPLES[1])
        assert reports_for(parsed, {"westno_1"}, freeze=False, previous={}, now=NOW) == {}
        reports = reports_for(parsed, {"westno_1"}, freeze=True, previous={}, now=NOW)
        (report,) = reports.values()
        assert report.id == "azure/C7061BAC-AFDC-4513-B24B-AA5F13A16123"
        assert (report.action, report.reason, report.deadline) == (
            "drain",
            "host-maintenance",
            None,
        )
        assert report.detail["DurationInSeconds"] == 5
        assert reports_for(parsed, {"westno_2"}, freeze=True, previous={}, now=NOW) == {}

    def test_documented_compute_gives_the_vm_name(self) -> None:
        assert vm_names(DOC_COMPUTE) == {"examplevmname"}
        assert vm_names({"compute": DOC_COMPUTE, "network": {}}) == {"examplevmname"}


class TestMapping:
    @pytest.mark.parametrize(
        ("kind", "action", "reason"),
        EXPECTED_MAPPING,
    )
    def test_types_map_with_not_before_as_deadline(
        self, kind: str, action: str, reason: str
    ) -> None:
        (parsed,) = doc(event(kind)).events
        report = report_for(parsed, freeze=False, previous_deadline=None, now=NOW)
        assert report is not None
        assert (report.action, report.reason) == (action, reason)
        assert report.deadline == datetime(2026, 11, 30, 3, 0, 30, tzinfo=timezone.utc)
        assert report.id == "azure/602d9444-d2cd-49c7-8624-8643e7171297"
        assert report.provider == "azure"

    def test_started_keeps_the_previous_deadline_else_now(self) -> None:
        (started,) = doc(event("Reboot", EventStatus="Started", NotBefore="")).events
        before = NOW - timedelta(seconds=3)
        kept = report_for(started, freeze=False, previous_deadline=before, now=NOW)
        assert kept is not None and kept.deadline == before
        fresh = report_for(started, freeze=False, previous_deadline=None, now=NOW)
        assert fresh is not None and fresh.deadline == NOW

    def test_started_early_means_the_deadline_is_now(self) -> None:
        # Approved (by us or a neighbour) long before NotBefore: the reboot is under way now.
        # Before: the old deadline, 15 minutes out, was kept and no terminate was ever sent.
        first = reports_for(
            doc(event("Reboot", NotBefore=format_not_before(NOW + timedelta(minutes=15)))),
            {"gpu-0"},
            freeze=False,
            previous={},
            now=NOW,
        )
        later = NOW + timedelta(seconds=2)
        for not_before in ("", format_not_before(NOW + timedelta(minutes=15))):
            second = reports_for(
                doc(event("Reboot", EventStatus="Started", NotBefore=not_before), incarnation=2),
                {"gpu-0"},
                freeze=False,
                previous=first,
                now=later,
            )
            (report,) = second.values()
            assert report.deadline == later and report.id == next(iter(first))

    def test_started_through_reports_for_keeps_the_deadline(self) -> None:
        first = reports_for(doc(event("Preempt")), {"gpu-0"}, freeze=False, previous={}, now=NOW)
        later = NOW + timedelta(seconds=40)
        second = reports_for(
            doc(event("Preempt", EventStatus="Started", NotBefore=""), incarnation=2),
            {"gpu-0"},
            freeze=False,
            previous=first,
            now=later,
        )
        (report,) = second.values()
        assert report.deadline == datetime(2026, 11, 30, 3, 0, 30, tzinfo=timezone.utc)
        assert report.detail["EventStatus"] == "Started"

    @given(st.integers(-3 * 86400, 3 * 86400), st.integers(-3 * 86400, 3 * 86400))
    def test_a_started_events_deadline_follows_the_skew_as_notbefore_does(
        self, was: int, now_ahead: int
    ) -> None:
        """A Started event keeps the earliest deadline published for it, on the clock its
        skew (`clock_ahead_seconds`) gave: when the skew moves (NTP's step), it moves by as
        much, as a Scheduled event's NotBefore does. Kept as it was, a step 2 h forward left
        it 2 h past, and the board retired the terminate while Azure still listed it."""
        started = NOW - timedelta(seconds=30)  # on Azure's clock
        raw = {**event("Preempt", EventStatus="Started", NotBefore="")}
        before_ahead, ahead = timedelta(seconds=was), timedelta(seconds=now_ahead)
        detail = {**raw, CLOCK_AHEAD: float(was)} if was else dict(raw)
        previous = Report(
            id="azure/" + str(raw["EventId"]),
            action="terminate",
            reason="eviction",
            provider="azure",
            deadline=started + before_ahead,
            noticed_at=started + before_ahead,
            detail=detail,
        )
        document = doc(raw, incarnation=2)
        local_now = NOW + ahead
        (report,) = reports_for(
            document,
            {"gpu-0"},
            freeze=False,
            previous={previous.id: previous},
            now=local_now,
            ahead=ahead,
        ).values()
        assert report.id == previous.id
        assert report.deadline == started + ahead
        assert report.deadline_on_boot_clock == bool(now_ahead)

    def test_another_events_change_leaves_the_report_as_it_was(self) -> None:
        # A neighbour's event bumps DocumentIncarnation: this VM's unchanged event keeps the
        # incarnation it was reported with, so the agent has nothing new to send.
        mine = event("Reboot")
        first = reports_for(doc(mine), {"gpu-0"}, freeze=False, previous={}, now=NOW)
        neighbour = event("Preempt", EventId="other", Resources=["gpu-1"])
        later = NOW + timedelta(seconds=5)
        second = reports_for(
            doc(mine, neighbour, incarnation=2), {"gpu-0"}, freeze=False, previous=first, now=later
        )
        assert second[next(iter(first))].detail == next(iter(first.values())).detail
        changed = reports_for(
            doc({**mine, "Resources": ["gpu-0", "gpu-1"]}, incarnation=3),
            {"gpu-0"},
            freeze=False,
            previous=second,
            now=later,
        )
        (report,) = changed.values()
        assert report.detail["DocumentIncarnation"] == 3

    def test_unknown_type_drains_without_deadline(self) -> None:
        (parsed,) = doc(event("LiveMigration")).events
        report = report_for(parsed, freeze=False, previous_deadline=None, now=NOW)
        assert report is not None and (report.action, report.deadline) == ("drain", None)

    def test_events_for_other_vms_of_the_set_are_ignored(self) -> None:
        document = doc(
            event("Preempt", EventId="a", Resources=["set_1"]),
            event("Reboot", EventId="b", Resources=["set_0", "SET_1", "set_2"]),
            event("Redeploy", EventId="c", Resources=[]),
        )
        reports = reports_for(document, {"set_1"}, freeze=False, previous={}, now=NOW)
        assert sorted(reports) == ["azure/a", "azure/b"]
        assert reports_for(document, {"set_3"}, freeze=False, previous={}, now=NOW) == {}

    def test_gone_events_are_cleared(self) -> None:
        first = reports_for(doc(event("Reboot")), {"gpu-0"}, freeze=False, previous={}, now=NOW)
        gone = cleared(first, {}, NOW)
        assert [(r.id, r.action, r.deadline) for r in gone] == [
            ("azure/602d9444-d2cd-49c7-8624-8643e7171297", "clear", None)
        ]
        assert cleared(first, first, NOW) == []


class TestNotBefore:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("Mon, 19 Sep 2016 18:29:47 GMT", datetime(2016, 9, 19, 18, 29, 47)),
            ("Mon, 11 Apr 2026 22:26:58 GMT", datetime(2026, 4, 11, 22, 26, 58)),  # wrong day
            ("Tue, 1 Dec 2026 00:00:00 GMT", datetime(2026, 12, 1)),
            ("01 Dec 2026 01:00:00 +0100", datetime(2026, 12, 1)),
            ("Tue, 01 DEC 2026 00:00:00 UTC", datetime(2026, 12, 1)),
        ],
    )
    def test_rfc1123(self, text: str, expected: datetime) -> None:
        assert parse_not_before(text) == expected.replace(tzinfo=timezone.utc)

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("2026-11-30T03:00:00Z", datetime(2026, 11, 30, 3)),
            ("2026-11-30T04:00:00+01:00", datetime(2026, 11, 30, 3)),
            ("2026-11-30T03:00:00.1226547Z", datetime(2026, 11, 30, 3, 0, 0, 122654)),
            ("2026-11-30T03:00:00", datetime(2026, 11, 30, 3)),
        ],
    )
    def test_iso_8601_as_microsofts_mock_sends_it(self, text: str, expected: datetime) -> None:
        # Before: ParseError, so the notice had no deadline and never escalated.
        assert parse_not_before(text) == expected.replace(tzinfo=timezone.utc)

    def test_empty_means_started(self) -> None:
        assert parse_not_before("") is None
        assert parse_not_before("  ") is None

    @pytest.mark.parametrize(
        "text",
        ["Mon, 32 Sep 2016 18:29:47 GMT", "Mon, 19 Sep 2016", "soon", "2026-13-30T03:00:00Z"],
    )
    def test_rejects_other_formats(self, text: str) -> None:
        with pytest.raises(ParseError, match="NotBefore"):
            parse_not_before(text)

    def test_parsing_ignores_the_locale(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import locale

        for name in ("de_DE.UTF-8", "fr_FR.UTF-8"):
            try:
                locale.setlocale(locale.LC_TIME, name)
                break
            except locale.Error:
                continue
        try:
            text = format_not_before(datetime(2026, 5, 3, 4, 5, 6, tzinfo=timezone.utc))
            assert text == "Sun, 03 May 2026 04:05:06 GMT"
            assert parse_not_before(text) == datetime(2026, 5, 3, 4, 5, 6, tzinfo=timezone.utc)
        finally:
            locale.setlocale(locale.LC_TIME, "C")

    @given(st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9999, 12, 31)))
    def test_round_trip(self, moment: datetime) -> None:
        moment = moment.replace(microsecond=0, tzinfo=timezone.utc)
        assert parse_not_before(format_not_before(moment)) == moment


class TestBadAnswers:
    @pytest.mark.parametrize(
        ("body", "match"),
        [
            ("<html>proxy says hi</html>", "not JSON"),
            ("[]", "JSON object"),
            ('{"Events": []}', "DocumentIncarnation"),
            ('{"DocumentIncarnation": true, "Events": []}', "DocumentIncarnation"),
            ('{"DocumentIncarnation": 1}', "Events must be a list"),
        ],
    )
    def test_parse_error_names_the_problem(self, body: str, match: str) -> None:
        with pytest.raises(ParseError, match=match):
            parse_document(body)

    @pytest.mark.parametrize(
        ("body", "name", "match"),
        [
            ('{"DocumentIncarnation": 1, "Events": [1]}', "Events[0]", "Events\\[0\\]"),
            (
                '{"DocumentIncarnation": 1, "Events": [{"EventType": "Reboot"}]}',
                "Events[0]",
                "EventId",
            ),
        ],
    )
    def test_an_unreadable_event_is_skipped_and_named(
        self, body: str, name: str, match: str
    ) -> None:
        document = parse_document(body)
        assert document.events == ()
        (bad,) = document.malformed
        assert bad.name == name and re.search(match, bad.problem)

    # Before, one such event was a ParseError of the whole document: the Preempt beside it
    # was never seen, and the work it would have saved was lost.
    def test_bad_event_fields_skip_that_event_only(self) -> None:
        document = doc(
            event("Reboot", EventId="bad-resources", Resources="gpu-0"),
            event("Redeploy", EventId="bad-status", EventStatus=None),
            event("Preempt", EventId="fine"),
        )
        assert [e.event_id for e in document.events] == ["fine"]
        problems = {bad.event_id: bad.problem for bad in document.malformed}
        assert set(problems) == {"bad-resources", "bad-status"}
        assert "Resources" in problems["bad-resources"]
        assert "EventStatus" in problems["bad-status"]
        assert [bad.name for bad in document.malformed] == [
            "event bad-resources",
            "event bad-status",
        ]
        reports = reports_for(document, {"gpu-0"}, freeze=False, previous={}, now=NOW)
        assert list(reports) == ["azure/fine"]
        assert reports["azure/fine"].action == "terminate"

    # Before, a NotBefore that was not a string at all (a Unix time, an object) was a
    # ParseError of the whole document: the Preempt beside it was never published.
    @pytest.mark.parametrize("odd_value", ["tomorrow-ish", 1764471630, {"at": "soon"}])
    def test_an_odd_not_before_spoils_only_its_own_deadline(self, odd_value: object) -> None:
        document = doc(
            event("Reboot", EventId="odd", NotBefore=odd_value),
            event("Preempt", EventId="fine"),
        )
        odd, fine = document.events
        assert odd.not_before is None and str(odd_value) in (odd.not_before_error or "")
        reports = reports_for(document, {"gpu-0"}, freeze=False, previous={}, now=NOW)
        assert reports["azure/odd"].deadline is None  # unknown, not "now"
        assert reports["azure/fine"].deadline == fine.not_before

    def test_incarnation_as_digits_is_accepted(self) -> None:
        assert parse_document('{"DocumentIncarnation": "7", "Events": []}').incarnation == 7


class TestVmNames:
    def test_uniform_scale_set_instance(self) -> None:
        compute = {
            "name": "gpuset_3",
            "vmScaleSetName": "gpuset",
            "resourceId": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/"
            "virtualMachineScaleSets/gpuset/virtualMachines/3",
        }
        assert vm_names(compute) == {"gpuset_3"}

    def test_instance_id_from_resource_id_when_name_differs(self) -> None:
        compute = {
            "name": "",
            "vmScaleSetName": "GpuSet",
            "resourceId": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/"
            "virtualMachineScaleSets/GpuSet/virtualMachines/12",
        }
        assert vm_names(compute) == {"gpuset_12"}

    def test_no_name_is_an_error(self) -> None:
        with pytest.raises(ParseError, match="neither"):
            vm_names({"name": "", "vmScaleSetName": ""})
        with pytest.raises(ParseError, match="not JSON"):
            parse_compute(b"nope")


# Property tests: any JSON at all either parses or raises ParseError, nothing else.

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)
event_like = st.fixed_dictionaries(
    {
        "EventId": st.text(min_size=0, max_size=40) | st.integers(),
        "EventType": st.sampled_from(["Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"])
        | st.text(max_size=10),
        "EventStatus": st.sampled_from(["Scheduled", "Started"]) | st.none(),
        "Resources": st.lists(st.text(max_size=10), max_size=3) | json_values,
        "NotBefore": st.sampled_from(["", "Mon, 19 Sep 2016 18:29:47 GMT"]) | st.text(max_size=30),
    }
)
documents = st.fixed_dictionaries(
    {
        "DocumentIncarnation": st.integers() | json_values,
        "Events": st.lists(event_like | json_values, max_size=4) | json_values,
    }
)


@settings(max_examples=examples(300), deadline=None)
@given(documents | json_values)
def test_any_json_parses_or_raises_parse_error(payload: object) -> None:
    try:
        parsed = parse_document(json.dumps(payload))
    except ParseError:
        return
    reports = reports_for(parsed, {"gpu-0"}, freeze=True, previous={}, now=NOW)
    for report in reports.values():
        assert report.id.startswith("azure/")
        assert report.action in ("drain", "terminate")


@settings(max_examples=examples(200), deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_parse_or_raise_parse_error(body: bytes) -> None:
    with contextlib.suppress(ParseError):
        parse_document(body)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(min_value=2_000, max_value=200_000),
    st.sampled_from(["[", '{"a":', '{"Events":[', '{"compute":']),
    st.booleans(),
)
def test_json_nested_past_the_parsers_depth_is_a_parse_error(
    depth: int, opening: str, closed: bool
) -> None:
    """An answer nested deeper than json.loads recurses (well within the 1 MiB cap) raised
    RecursionError, which no caller catches: the watcher crashed at every poll."""
    closing = {"[": "]", '{"a":': "}", '{"Events":[': "]}", '{"compute":': "}"}[opening]
    body = opening * depth + ("0" + closing * depth if closed else "")
    with pytest.raises(ParseError, match="not JSON"):
        parse_document(body)
    with pytest.raises(ParseError, match="not JSON"):
        parse_compute(body.encode())


valid_events = st.builds(
    lambda kind, status, names, mine, seconds: event(
        kind,
        EventId=f"id-{seconds}",
        EventStatus=status,
        Resources=[*names, "me"] if mine else names,
        NotBefore=""
        if status == "Started"
        else format_not_before(NOW + timedelta(seconds=seconds)),
    ),
    st.sampled_from(["Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"]),
    st.sampled_from(["Scheduled", "Started"]),
    st.lists(st.from_regex(r"[a-z]{1,6}_[0-9]{1,2}", fullmatch=True), max_size=3),
    st.booleans(),
    st.integers(min_value=0, max_value=10**6),
)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(valid_events, max_size=5, unique_by=lambda e: e["EventId"]), st.booleans())
def test_only_this_vms_events_are_reported(events: list[dict[str, object]], freeze: bool) -> None:
    parsed = doc(*events)
    reports = reports_for(parsed, {"me"}, freeze=freeze, previous={}, now=NOW)
    mine = {
        f"azure/{e['EventId']}"
        for e in events
        if "me" in e["Resources"] and (freeze or e["EventType"] != "Freeze")  # type: ignore[operator]
    }
    assert set(reports) == mine
    for report in reports.values():
        assert report.deadline is None or report.deadline >= NOW


def _spoiled(good: dict[str, object], how: str) -> object:
    """`good` made unreadable in one way (with its EventId kept where the way allows)."""
    if how == "not-an-object":
        return [good]
    spoilt = dict(good)
    if how == "no-id":
        del spoilt["EventId"]
    elif how == "id-not-a-string":
        spoilt["EventId"] = 7
    elif how == "blank-id":
        spoilt["EventId"] = "  "
    elif how == "resources":
        spoilt["Resources"] = "me"
    elif how == "resources-item":
        spoilt["Resources"] = ["me", 3]
    elif how == "type":
        spoilt["EventType"] = None
    else:
        spoilt["EventStatus"] = ["Scheduled"]
    return spoilt


NAMED_SPOILS = ("resources", "resources-item", "type", "status")
spoils = st.sampled_from(("not-an-object", "no-id", "id-not-a-string", "blank-id", *NAMED_SPOILS))


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.tuples(valid_events, st.none() | spoils),
        max_size=6,
        unique_by=lambda pair: pair[0]["EventId"],
    )
)
def test_mixed_good_and_bad_events_every_good_one_is_read(
    pairs: list[tuple[dict[str, object], str | None]],
) -> None:
    """However many events of a document are unreadable, and however they are, every other
    one is read and reported, and each bad one is listed, by its EventId when it has one."""
    body = [good if how is None else _spoiled(good, how) for good, how in pairs]
    parsed = parse_document(json.dumps({"DocumentIncarnation": 3, "Events": body}))
    good = [e for e, how in pairs if how is None]
    bad = [(e, how) for e, how in pairs if how is not None]
    assert [e.event_id for e in parsed.events] == [e["EventId"] for e in good]
    assert len(parsed.malformed) == len(bad)
    for found, (spoilt, how) in zip(parsed.malformed, bad, strict=True):
        assert found.event_id == (spoilt["EventId"] if how in NAMED_SPOILS else None)
        assert found.problem
        assert found.name == (
            f"event {spoilt['EventId']}" if how in NAMED_SPOILS else f"Events[{found.index}]"
        )
    reports = reports_for(parsed, {"me"}, freeze=True, previous={}, now=NOW)
    mine = {f"azure/{e['EventId']}" for e in good if "me" in e["Resources"]}  # type: ignore[operator]
    assert set(reports) == mine


# What a problem with an answer may say of it: the log line and `status` name the field and
# show the start of its value, never the whole of a megabyte answer.
PROBLEM_CHARS = 400
BIG = "x" * (1 << 20)
big_documents = [
    {"DocumentIncarnation": 1, "Events": {"a": BIG}},
    {"DocumentIncarnation": BIG, "Events": []},
    {"DocumentIncarnation": [BIG], "Events": []},
    {"DocumentIncarnation": 1, "Events": [{"EventId": BIG, "EventType": "Preempt"}]},
    {"DocumentIncarnation": 1, "Events": [{"EventId": "e", "EventType": [BIG]}]},
    {
        "DocumentIncarnation": 1,
        "Events": [
            {
                "EventId": "e",
                "EventType": "Preempt",
                "EventStatus": "Scheduled",
                "Resources": [1, BIG],
            }
        ],
    },
    {
        "DocumentIncarnation": 1,
        "Events": [
            {"EventId": "e", "EventType": "Preempt", "EventStatus": "Scheduled", "NotBefore": BIG}
        ],
    },
    {
        "DocumentIncarnation": 1,
        "Events": [
            {"EventId": "e", "EventType": "Preempt", "EventStatus": "Scheduled", "NotBefore": [BIG]}
        ],
    },
]


def _problems(body: str) -> list[str]:
    """Every problem the parser names in `body`: its error, or each skipped event's and each
    unreadable NotBefore's."""
    try:
        document = parse_document(body)
    except ParseError as error:
        return [str(error)]
    return [bad.problem for bad in document.malformed] + [
        event.not_before_error for event in document.events if event.not_before_error
    ]


@pytest.mark.parametrize("payload", big_documents, ids=range(len(big_documents)))
def test_a_megabyte_field_is_named_in_a_bounded_problem(payload: dict[str, object]) -> None:
    # Found by the adversarial pass (H235): each problem quoted the whole value, so a 1 MiB
    # field made a 1 MiB warning at every poll, and the watcher's set of logged problems (256
    # of them) held up to 256 MiB for answers that changed.
    problems = _problems(json.dumps(payload))
    assert problems
    for problem in problems:
        assert len(problem) <= PROBLEM_CHARS, f"{len(problem)} characters: {problem[:120]}..."


# Leaves that are long and unprintable (a NUL, a bidi override), where a field's value goes.
long_texts = st.integers(min_value=0, max_value=5_000).map(lambda n: "\x00\u202e" * n)
long_values = st.recursive(
    st.none() | st.integers() | long_texts,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(long_texts, children, max_size=3)
    ),
    max_leaves=6,
)
long_events = st.fixed_dictionaries(
    {
        "EventId": st.sampled_from(["e"]) | long_values,
        "EventType": st.sampled_from(["Preempt"]) | long_values,
        "EventStatus": st.sampled_from(["Scheduled"]) | long_values,
        "Resources": st.lists(long_texts, max_size=2) | long_values,
        "NotBefore": long_values,
    }
)
long_documents = st.fixed_dictionaries(
    {
        "DocumentIncarnation": st.integers() | long_values,
        "Events": st.lists(long_events | long_values, max_size=3) | long_values,
    }
)


@settings(max_examples=examples(200), deadline=None)
@given(long_documents | long_values)
def test_every_problem_is_bounded_and_printable_whatever_the_answer(payload: object) -> None:
    for problem in _problems(json.dumps(payload)):
        assert len(problem) <= PROBLEM_CHARS
        assert problem.isprintable()
