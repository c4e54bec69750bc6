"""Approval (StartRequests) in-process against the simulator: once, after the ack, per mode."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from azure_harness import running
from forewarn.providers.azure.approve import (
    MAX_ATTEMPTS,
    RETRY_CEILING,
    Approver,
    load_approved,
    said_at,
)
from forewarn.providers.azure.simulate import AzureSimulator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import eventually_async, examples


async def test_after_ack_approves_exactly_once_and_not_before_flushed() -> None:
    async with running(removal_after=30) as h:
        event_id = h.sim.raise_notice("Terminate", {"not_before_seconds": 600})
        await eventually_async(lambda: h.reports, what="the terminate")
        await h.more_polls(4)
        assert h.sim.approvals == []  # no ack yet, no approval
        assert h.watcher.approvals.stats.sent == 0

        h.watcher.flushed(f"azure/{event_id}")
        await eventually_async(lambda: h.sim.approvals, what="the approval")
        h.watcher.flushed(f"azure/{event_id}")  # acked again
        await eventually_async(lambda: len(h.reports) >= 2, what="the Started document")
        await h.more_polls(3)
        assert [a["EventId"] for a in h.sim.approvals] == [event_id]
        await eventually_async(
            lambda: h.watcher.approvals.stats.sent == 1, what="the 200 to be counted"
        )
        assert h.watcher.approvals.stats.by_reason == {"after-ack": 1}
        assert h.watcher.approval_counts() == {"sent": 1, "failed": 0, "skipped": 0}
        assert h.reports[-1].detail["EventStatus"] == "Started"


@pytest.mark.parametrize("kind", ["Reboot", "Redeploy"])
async def test_a_drain_flush_does_not_approve(kind: str) -> None:
    # Clients flush a drain and keep training; an approval would start the reboot under them
    # minutes before NotBefore. It starts at NotBefore, after the board's terminate.
    async with running(removal_after=30) as h:
        event_id = h.sim.raise_notice(kind, {"not_before_seconds": 600})
        await eventually_async(lambda: h.reports, what="the drain")
        assert h.reports[-1].action == "drain"
        h.watcher.flushed(f"azure/{event_id}")
        await h.more_polls(3)
        assert h.sim.approvals == []
        assert h.sim.events[event_id]["EventStatus"] == "Scheduled"
        assert "drain" in h.watcher.approvals.skipped[event_id]


async def test_flushed_for_other_providers_or_unknown_events_does_nothing() -> None:
    async with running() as h:
        h.watcher.flushed("aws/spot-itn/abc")
        h.watcher.flushed("azure/NOT-AN-EVENT")
        await h.more_polls(2)
        assert h.sim.approvals == []
        assert h.watcher.approvals.stats.skipped == 1  # the unknown azure event


async def test_immediately_approves_once_without_any_ack() -> None:
    async with running(approve="immediately", removal_after=30) as h:
        event_id = h.sim.raise_notice("Preempt", {"not_before_seconds": 600})
        await eventually_async(lambda: h.sim.approvals, what="the approval")
        await eventually_async(lambda: len(h.reports) >= 2, what="the Started document")
        await h.more_polls(3)
        assert [a["EventId"] for a in h.sim.approvals] == [event_id]
        await eventually_async(
            lambda: h.watcher.approvals.stats.sent == 1, what="the 200 to be counted"
        )
        assert h.watcher.approvals.stats.by_reason == {"immediately": 1}


async def test_off_never_approves() -> None:
    async with running(approve="off") as h:
        event_id = h.sim.raise_notice("Reboot", {})
        await eventually_async(lambda: h.reports, what="the reboot")
        h.watcher.flushed(f"azure/{event_id}")
        await h.more_polls(3)
        assert h.sim.approvals == []


async def test_started_events_are_not_approved() -> None:
    async with running(removal_after=30) as h:
        event_id = h.sim.raise_notice("Preempt", {"status": "Started"})
        await eventually_async(lambda: h.reports, what="the started eviction")
        h.watcher.flushed(f"azure/{event_id}")
        await h.more_polls(2)
        assert h.sim.approvals == []
        assert h.watcher.approvals.skipped == {event_id: "its status is Started"}


async def test_shared_events_are_approved_only_when_allowed() -> None:
    async with running(removal_after=30) as h:
        event_id = h.sim.raise_notice("Terminate", {"resources": ["gpu-0", "gpu-1"]})
        await eventually_async(lambda: h.reports, what="the shared terminate")
        h.watcher.flushed(f"azure/{event_id}")
        await h.more_polls(2)
        assert h.sim.approvals == []
        assert "gpu-1" in h.watcher.approvals.skipped[event_id]
    async with running(removal_after=30, approve_shared=True) as h:
        event_id = h.sim.raise_notice("Terminate", {"resources": ["gpu-0", "gpu-1"]})
        await eventually_async(lambda: h.reports, what="the shared terminate")
        h.watcher.flushed(f"azure/{event_id}")
        await eventually_async(lambda: h.sim.approvals, what="the approval")


async def test_a_failed_approval_is_retried_on_later_polls() -> None:
    sim = AzureSimulator(vm_name="gpu-0", removal_after=30, rate_limit=10)
    async with running(sim) as h:
        event_id = h.sim.raise_notice("Terminate", {})
        await eventually_async(lambda: h.reports, what="the terminate")
        original = h.sim._post_events
        failures = {"left": 1}

        def flaky(body: bytes):  # type: ignore[no-untyped-def]
            if failures["left"]:
                failures["left"] -= 1
                raise RuntimeError("IMDS hiccup")  # the simulator answers 500
            return original(body)

        h.sim._post_events = flaky  # type: ignore[method-assign]
        h.watcher.flushed(f"azure/{event_id}")
        await eventually_async(lambda: h.sim.approvals, what="the retried approval")
        # The simulator records the POST before the watcher has read the answer.
        await eventually_async(
            lambda: h.watcher.approvals.stats.sent == 1, what="the 200 to be counted"
        )
        assert h.watcher.approvals.stats.failed == 1
        assert [a["EventId"] for a in h.sim.approvals] == [event_id]


async def test_a_flush_before_the_first_answer_is_approved_after_it() -> None:
    # An agent restarted while its clients flushed a Preempt: their acks (and flushed()) can
    # come before the watcher's first answer. Before, the approval was skipped for good as
    # "no longer listed", and the eviction waited for its NotBefore.
    sim = AzureSimulator(vm_name="gpu-0", removal_after=30, rate_limit=10, first_call_delay=1.0)
    event_id = sim.raise_notice("Preempt", {})
    async with running(sim) as h:
        h.watcher.flushed(f"azure/{event_id}")
        assert not h.watcher.answered
        await eventually_async(lambda: h.sim.approvals, what="the approval")
        assert [a["EventId"] for a in h.sim.approvals] == [event_id]


@pytest.mark.parametrize("kind", ["Reboot", "Redeploy"])
async def test_a_drain_flushed_before_the_first_answer_is_not_approved_after_it(kind: str) -> None:
    """`after-ack` never approves a drain: its clients flushed and keep training until the
    terminate near NotBefore. A restarted agent's clients acking a restored drain before the
    watcher's first answer went past that check (the watcher had no report of it yet), and the
    approval asked again after the first poll was sent: Azure started the reboot under them."""
    sim = AzureSimulator(vm_name="gpu-0", removal_after=30, rate_limit=10, first_call_delay=1.0)
    event_id = sim.raise_notice(kind, {"not_before_seconds": 900})
    async with running(sim, approve_types="reboot,redeploy,preempt,terminate") as h:
        h.watcher.flushed(f"azure/{event_id}")
        assert not h.watcher.answered
        await eventually_async(lambda: h.reports, what="the drain")
        await h.more_polls(3)
        assert h.sim.approvals == []
        assert h.sim.events[event_id]["EventStatus"] == "Scheduled"
        assert "drain" in h.watcher.approvals.skipped[event_id]


async def test_flushed_from_another_thread_is_handled_on_the_loop() -> None:
    async with running(removal_after=30) as h:
        event_id = h.sim.raise_notice("Terminate", {})
        await eventually_async(lambda: h.reports, what="the terminate")
        thread = threading.Thread(target=h.watcher.flushed, args=(f"azure/{event_id}",))
        thread.start()
        thread.join()
        await eventually_async(lambda: h.sim.approvals, what="the approval")


URL = "http://127.0.0.1:1/metadata/scheduledevents"


async def tries(approver: Approver, count: int, **kwargs: Any) -> list[bool]:
    """`count` calls of `approve`, each once the last refusal's wait is over."""
    results = []
    for _ in range(count):
        await eventually_async(lambda: approver.due("E1"), what="the wait to end")
        results.append(await approver.approve("E1", "after-ack", **kwargs))
    return results


@respx.mock
async def test_approver_posts_the_documented_body_and_gives_up_after_max_attempts() -> None:
    """A 400 says the request itself is wrong: tried MAX_ATTEMPTS times, not until NotBefore."""
    route = respx.post(URL).mock(return_value=httpx.Response(400, json={"error": "Bad request"}))
    async with httpx.AsyncClient(trust_env=False, headers={"Metadata": "true"}) as client:
        approver = Approver(client, URL, "2020-07-01", 1, retry_first=0.01)
        not_before = datetime.now(timezone.utc) + timedelta(minutes=10)
        results = await tries(approver, MAX_ATTEMPTS + 2, not_before=not_before)
    assert results == [False] * (MAX_ATTEMPTS + 2)
    assert route.call_count == MAX_ATTEMPTS
    request = route.calls[0].request
    assert request.headers["Metadata"] == "true"
    assert request.url.params["api-version"] == "2020-07-01"
    assert request.read() == b'{"StartRequests":[{"EventId":"E1"}]}'
    assert approver.stats.failed == MAX_ATTEMPTS and approver.retry == {}


@respx.mock
@pytest.mark.parametrize("status", [429, 500, 503])
async def test_a_busy_imds_is_tried_until_not_before_and_no_longer(status: int) -> None:
    """Refused as busy, the approval is tried again with backoff until NotBefore, then left:
    the event starts then anyway."""
    route = respx.post(URL).mock(return_value=httpx.Response(status))
    async with httpx.AsyncClient(trust_env=False) as client:
        approver = Approver(client, URL, "2020-07-01", 1, retry_first=0.01)
        not_before = datetime.now(timezone.utc) + timedelta(seconds=0.3)
        approver.retry["E1"] = "after-ack"
        while "E1" in approver.retry:
            await eventually_async(lambda: approver.due("E1"), what="the wait to end")
            await approver.approve("E1", "after-ack", not_before)
        ended = datetime.now(timezone.utc)
    assert MAX_ATTEMPTS < route.call_count < 30  # backoff: not a try every 10 ms
    assert ended < not_before + timedelta(seconds=0.2)
    assert await approver.approve("E1", "after-ack", not_before) is False
    assert approver.stats.failed == route.call_count and approver.stats.sent == 0


@respx.mock
async def test_a_busy_imds_is_tried_until_the_events_current_not_before() -> None:
    """The event was rescheduled later while its approval was refused as busy: the tries
    stopped at the NotBefore seen at the first one, so the approval that released the saved
    job was never sent and the VM idled until the new NotBefore."""
    # The first NotBefore 1 s ahead: on a loaded machine 0.3 s had passed before the first
    # try, which then saw NotBefore past and tried no more (nothing to reschedule).
    first = datetime.now(timezone.utc) + timedelta(seconds=1)
    later = first + timedelta(seconds=30)
    busy_until = first + timedelta(seconds=0.2)

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503 if datetime.now(timezone.utc) < busy_until else 200)

    route = respx.post(URL).mock(side_effect=answer)
    async with httpx.AsyncClient(trust_env=False) as client:
        approver = Approver(client, URL, "2020-07-01", 1, retry_first=0.01)
        assert await approver.approve("E1", "after-ack", first) is False
        while "E1" in approver.retry:  # rescheduled: each later try sees the new NotBefore
            await eventually_async(lambda: approver.due("E1"), what="the wait to end")
            await approver.approve("E1", "after-ack", later)
    assert "E1" in approver.approved, approver.stats
    assert approver.stats.sent == 1 and route.call_count == approver.stats.failed + 1


async def test_an_approval_given_up_at_not_before_is_tried_again_once_rescheduled() -> None:
    """Refused with a Retry-After past NotBefore, the approval was given up (the event starts
    then anyway); Azure then rescheduled the event later, and it was never tried again: the
    job that had saved waited out the new NotBefore, the VM idle."""
    sim = AzureSimulator(vm_name="gpu-0", removal_after=30, rate_limit=10)
    async with running(sim) as h:
        event_id = h.sim.raise_notice("Terminate", {})  # NotBefore in 300 s
        await eventually_async(lambda: h.reports, what="the terminate")
        events = "/metadata/scheduledevents"
        h.sim.add_fault("status", path=events, method="POST", status=503, retry_after=600, count=1)
        h.watcher.flushed(f"azure/{event_id}")
        await eventually_async(lambda: h.watcher.approvals.stats.failed == 1, what="the 503")
        assert h.watcher.approvals.retry == {}  # given up: 600 s is past NotBefore
        h.sim.change_notice(event_id, {"not_before_seconds": 900})
        await eventually_async(lambda: h.sim.approvals, what="the approval, rescheduled")
        assert [a["EventId"] for a in h.sim.approvals] == [event_id]
        await eventually_async(lambda: h.watcher.approvals.stats.sent == 1, what="the 200")


@respx.mock
async def test_a_retry_after_past_not_before_ends_the_tries() -> None:
    route = respx.post(URL).mock(return_value=httpx.Response(429, headers={"Retry-After": "60"}))
    async with httpx.AsyncClient(trust_env=False) as client:
        approver = Approver(client, URL, "2020-07-01", 1, retry_first=0.01)
        not_before = datetime.now(timezone.utc) + timedelta(seconds=30)
        assert await approver.approve("E1", "after-ack", not_before) is False
    assert route.call_count == 1 and approver.retry == {}


@respx.mock
async def test_a_retry_after_is_waited_out_before_the_next_try() -> None:
    respx.post(URL).mock(
        side_effect=[httpx.Response(503, headers={"Retry-After": "30"}), httpx.Response(200)]
    )
    async with httpx.AsyncClient(trust_env=False) as client:
        approver = Approver(client, URL, "2020-07-01", 1, retry_first=0.01)
        not_before = datetime.now(timezone.utc) + timedelta(minutes=10)
        assert await approver.approve("E1", "after-ack", not_before) is False
        assert approver.retry == {"E1": "after-ack"} and not approver.due("E1")
        assert await approver.approve("E1", "after-ack", not_before) is False
        approver._not_until["E1"] = 0.0  # the 30 s are over
        assert await approver.approve("E1", "after-ack", not_before) is True
    assert approver.stats.failed == 1 and approver.stats.sent == 1


@pytest.mark.parametrize("count", [2, 5])
async def test_concurrent_flushes_post_once(count: int) -> None:
    async with running(removal_after=30) as h:
        event_id = h.sim.raise_notice("Terminate", {})
        await eventually_async(lambda: h.reports, what="the terminate")
        for _ in range(count):
            h.watcher.flushed(f"azure/{event_id}")
        await eventually_async(lambda: h.sim.approvals, what="the approval")
        await h.more_polls(2)  # time enough to approve again, were it to
        assert len(h.sim.approvals) == 1


@pytest.mark.parametrize("kind", ["Reboot", "Redeploy"])
async def test_immediately_leaves_a_drain_to_its_not_before(kind: str) -> None:
    # Approved, a Reboot starts within seconds, under clients that flushed the drain and kept
    # training. Only the types in azure.approve_types (Preempt, Terminate) are approved.
    async with running(approve="immediately", removal_after=30) as h:
        reboot = h.sim.raise_notice(kind, {"not_before_seconds": 900})
        await eventually_async(lambda: h.reports, what="the drain")
        preempt = h.sim.raise_notice("Preempt", {"not_before_seconds": 600})
        await eventually_async(lambda: h.sim.approvals, what="the Preempt's approval")
        await h.more_polls(3)
        assert [a["EventId"] for a in h.sim.approvals] == [preempt]
        assert h.sim.events[reboot]["EventStatus"] == "Scheduled"
        assert "azure.approve_types" in h.watcher.approvals.skipped[reboot]


async def test_approve_types_lets_a_reboot_be_approved_when_listed() -> None:
    async with running(approve="immediately", approve_types="reboot", removal_after=30) as h:
        reboot = h.sim.raise_notice("Reboot", {"not_before_seconds": 900})
        await eventually_async(lambda: h.sim.approvals, what="the Reboot's approval")
        assert [a["EventId"] for a in h.sim.approvals] == [reboot]


def test_approve_types_names_a_type_that_does_not_exist() -> None:
    from forewarn.providers.azure.settings import Settings
    from pydantic import ValidationError

    assert Settings(approve_types=" preempt , Terminate,PREEMPT").approve_types == [
        "Preempt",
        "Terminate",
    ]
    with pytest.raises(ValidationError, match="'LiveMigration' is not an EventType"):
        Settings(approve_types="Preempt,LiveMigration")


URL = "http://127.0.0.1:1/metadata/scheduledevents"


@respx.mock
async def test_an_approval_is_kept_in_the_state_file_until_its_event_leaves_the_list(
    tmp_path: Path,
) -> None:
    respx.post(URL).mock(return_value=httpx.Response(200))
    path = tmp_path / "azure-approved.json"
    async with httpx.AsyncClient(trust_env=False) as client:
        assert await Approver(client, URL, "2020-07-01", 1, path=path).approve("E1", "immediately")
        assert set(load_approved(path)) == {"E1"}
        # A restarted watcher's approver: E1 is approved, and not POSTed again.
        again = Approver(client, URL, "2020-07-01", 1, path=path)
        assert again.done("E1") and again.restored == {"E1"}
        assert not await again.approve("E1", "immediately")
        again.keep_only(["E2"])  # E1 is no longer listed
    assert load_approved(path) == {}
    assert respx.calls.call_count == 1


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not json",
        b"[]",
        b'{"approved": []}',
        b'{"approved": {"E1": "x", "E2": true}}',
        b'{"approved": {"E1": 1' + b"0" * 400 + b"}}",
    ],
)
def test_an_unreadable_approvals_file_is_no_approval(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "azure-approved.json"
    path.write_bytes(content)
    assert load_approved(path) == {}


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**300)
    | st.floats()
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@settings(max_examples=examples(200), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    payload=st.one_of(
        st.binary(max_size=64).map(lambda b: b.decode("latin-1")),
        JSON.map(lambda value: json.dumps(value)),
        st.dictionaries(st.text(max_size=8), JSON).map(lambda a: json.dumps({"approved": a})),
    )
)
def test_load_approved_never_raises_and_gives_event_ids_with_times(
    tmp_path: Path, payload: str
) -> None:
    path = tmp_path / "azure-approved.json"
    path.write_text(payload, encoding="utf-8", errors="surrogatepass")
    for event_id, at in load_approved(path).items():
        assert isinstance(event_id, str) and isinstance(at, float) and math.isfinite(at)


@pytest.mark.parametrize(
    ("attempt", "since_said", "loud"),
    [
        (1, None, True),
        (3, 0.1, True),
        (4, 0.1, True),  # the 4th, 8th, 16th...
        (5, 0.1, False),
        (7, 59.9, False),
        (7, 60.0, True),  # at least once a minute
        (8, 0.1, True),
        (9, None, True),  # none said yet for this event (a watcher built again)
        (1000, 5.0, False),
        (1024, 5.0, True),
    ],
)
def test_a_failed_approval_is_a_warning_at_its_first_tries_and_then_rate_limited(
    attempt: int, since_said: float | None, loud: bool
) -> None:
    assert said_at(attempt, since_said) is loud


@settings(max_examples=examples(100), deadline=None)
@given(
    first=st.floats(0.01, 15),
    draw=st.floats(0, 1),
    refusals=st.integers(1, 8),
    status=st.sampled_from([429, 500, 503]),
)
def test_the_wait_between_tries_never_passes_the_ceiling(
    first: float, draw: float, refusals: int, status: int
) -> None:
    """The wait after a refused approval doubles up to RETRY_CEILING (or the interval, when it
    is longer): its 10 % jitter took it to 11 s."""
    ceiling = max(first, RETRY_CEILING)

    async def run() -> list[float]:
        transport = httpx.MockTransport(lambda request: httpx.Response(status))
        async with httpx.AsyncClient(transport=transport) as client:
            approver = Approver(client, URL, "2020-07-01", 1, retry_first=first, rng=lambda: draw)
            not_before = datetime.now(timezone.utc) + timedelta(hours=1)
            waits = []
            for _ in range(refusals):
                assert await approver.approve("E1", "after-ack", not_before) is False
                waits.append(approver._not_until["E1"] - time.monotonic())
                approver._not_until["E1"] = 0.0  # the wait is over
            return waits

    waits = asyncio.run(run())
    assert all(wait <= ceiling for wait in waits), (ceiling, waits)


async def test_an_event_that_no_longer_names_this_vm_is_not_approved() -> None:
    """An event still listed but whose Resources no longer name this VM (Azure moved it to
    the other VMs of the set) was kept for one more document, as one missing from the list
    is, and an ack in that window approved it: a StartRequests that released the event of
    VMs this one is not among (with azure.approve_shared, since none of them is this VM)."""
    async with running(removal_after=30, approve_shared=True) as h:
        event_id = h.sim.raise_notice("Terminate", {})
        await eventually_async(lambda: h.reports, what="the terminate")
        h.sim.change_notice(event_id, {"resources": ["gpu-1"]})
        # The first document without this VM in it read; the ack comes before the next.
        await eventually_async(lambda: h.watcher._missing, what="the document without gpu-0")
        h.watcher.flushed(f"azure/{event_id}")
        await eventually_async(
            lambda: event_id in h.watcher.approvals.skipped or h.sim.approvals,
            what="the approval judged",
        )
        await h.more_polls(2)
        assert h.sim.approvals == []
        assert "gpu-0" in h.watcher.approvals.skipped[event_id]
