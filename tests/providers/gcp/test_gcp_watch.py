"""The watcher against the simulator over real HTTP: every mapping, clears, ids, detection."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from forewarn.agent.protocol import Report
from forewarn.protocol.timefmt import format_time, utcnow
from forewarn.providers.boot import boot_id
from forewarn.providers.gcp.active import ACTIVE_FILE
from forewarn.providers.gcp.settings import Settings
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.gcp.watch import GcpWatcher
from forewarn.providers.simulator import SimRequest, SimResponse, SimServer, Simulator
from gcp_support import watching
from support import free_port

TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"
MIGRATE = "MIGRATE_ON_HOST_MAINTENANCE"


def _near(actual: Any, expected: Any, seconds: float = 5.0) -> bool:
    return abs((actual - expected).total_seconds()) < seconds


async def test_preempted_true_terminates_with_a_30_second_deadline(
    server: SimServer, sim: GcpSimulator
) -> None:
    async with watching(server.url) as run:
        await run.until_polling()
        sim.raise_notice("preempt", {})
        [report] = await run.count(1)
    assert (report.action, report.reason, report.provider) == ("terminate", "preemption", "gcp")
    assert report.detail == {"preempted": "TRUE"}
    assert report.deadline is not None
    assert _near(report.deadline, utcnow() + timedelta(seconds=30))


async def test_preemption_notice_duration_from_metadata_gives_120_seconds() -> None:
    sim = GcpSimulator(preemptible=True, preemption_notice_duration=120)
    with SimServer(sim) as server:
        async with watching(server.url) as run:
            await run.until_polling()
            sim.raise_notice("preempt", {})
            [report] = await run.count(1)
    assert report.deadline is not None
    assert _near(report.deadline, utcnow() + timedelta(seconds=120))


async def test_preemption_notice_duration_from_config(server: SimServer, sim: GcpSimulator) -> None:
    async with watching(server.url, preemption_notice_duration=120) as run:
        await run.until_polling()
        sim.raise_notice("preempt", {})
        [report] = await run.count(1)
    assert report.deadline is not None
    assert _near(report.deadline, utcnow() + timedelta(seconds=120))
    assert sim.requests["GET /computeMetadata/v1/instance/scheduling/"] == 1


async def test_a_reported_notice_duration_wins_over_the_configured_one() -> None:
    sim = GcpSimulator(preemptible=True, preemption_notice_duration=0)
    with SimServer(sim) as server:
        async with watching(server.url, preemption_notice_duration=120) as run:
            await run.until_polling()
            sim.raise_notice("preempt", {})
            [report] = await run.count(1)
    assert report.deadline is not None
    assert _near(report.deadline, utcnow() + timedelta(seconds=30))


async def test_preempted_back_to_false_while_running_keeps_the_terminate(
    server: SimServer, sim: GcpSimulator
) -> None:
    """Compute Engine never withdraws a preemption: once `preempted` is TRUE the VM is going
    down. A FALSE read after it in the same run (a metadata server answering from a reset
    state) was a clear: the jobs it reached went back to training and were killed with the
    VM seconds later, and a job started then saw no notice at all."""
    async with watching(server.url) as run:
        await run.until_polling()
        sim.raise_notice("preempt", {})
        [terminate] = await run.count(1)
        path = "GET /computeMetadata/v1/instance/preempted"
        await run.settle()  # the next long-poll is waiting
        asked = sim.requests[path]
        sim.withdraw("preempted")
        # The long-poll that answers FALSE is followed by the next one: FALSE was read.
        await run.until(lambda: sim.requests[path] > asked, what="FALSE read")
        await run.settle()
        assert run.summary() == [("terminate", terminate.id)]
        assert run.watcher.tracks["preempted"].active == terminate


async def test_preempted_back_to_false_across_a_restart_in_the_same_boot_keeps_the_terminate(
    server: SimServer, sim: GcpSimulator, tmp_path: Path
) -> None:
    """The agent restarts inside the preemption window (same boot: the VM is still going
    down) and the server answers FALSE. A running watcher keeps the terminate then; the
    restarted one cleared it, and the job, told the machine was not going away, saved and
    trained on into the stop."""
    async with watching(server.url, tmp_path) as run:
        await run.until_polling()
        sim.raise_notice("preempt", {})
        [terminate] = await run.count(1)
    sim.withdraw("preempted")
    async with watching(server.url, tmp_path) as run:
        [kept] = await run.count(1)  # reported as in force: the agent's restored one stands
        await run.until_polling()
        await run.settle()
        assert run.reports == [kept]
    assert (kept.action, kept.id) == ("terminate", terminate.id)
    assert kept.deadline is not None and terminate.deadline is not None
    assert _near(kept.deadline, terminate.deadline, 0.01)  # as saved (in milliseconds)


@pytest.mark.parametrize("boot", ["another boot id", "no boot id"])
async def test_a_preemption_before_a_stop_is_not_restored_when_the_vm_runs_again(
    server: SimServer, sim: GcpSimulator, tmp_path: Path, boot: str
) -> None:
    """A Spot VM stopped by its preemption and started again answers FALSE: the agent's
    saved terminate is the last boot's, not restored, and nothing is raised."""
    async with watching(server.url, tmp_path) as run:
        await run.until_polling()
        sim.raise_notice("preempt", {})
        await run.count(1)
    moved_before_this_boot(tmp_path, "preempted", boot)
    sim.withdraw("preempted")
    async with watching(server.url, tmp_path) as run:
        await run.until_polling()
        await run.settle()
        assert run.reports == []
        assert not run.watcher.preempted_seen


async def test_terminate_on_host_maintenance_drains_then_clears_under_the_same_id(
    server: SimServer, sim: GcpSimulator
) -> None:
    async with watching(server.url) as run:
        await run.until_polling()
        sim.raise_notice("maintenance", {"type": "TERMINATE"})
        [drain] = await run.count(1)
        sim.withdraw("maintenance-event")
        _, clear = await run.count(2)
    assert (drain.action, drain.reason) == ("drain", "host-maintenance")
    assert drain.detail == {"maintenance-event": TERMINATE}
    assert drain.deadline is not None
    assert _near(drain.deadline, utcnow() + timedelta(minutes=60))
    assert (clear.action, clear.id, clear.reason) == ("clear", drain.id, "host-maintenance")
    assert clear.detail == {"maintenance-event": "NONE"}


@pytest.mark.parametrize(
    ("machine_type", "settings", "minutes"),
    [
        ("n2-standard-8", {}, 1),  # no GPU: Compute Engine gives 60 s
        ("a3-highgpu-8g", {}, 60),  # GPUs: an hour
        ("n2-standard-8", {"maintenance_notice": 600}, 10),  # configured: as configured
    ],
)
async def test_terminate_on_host_maintenance_has_the_notice_of_the_machine(
    machine_type: str, settings: dict[str, Any], minutes: int
) -> None:
    sim = GcpSimulator(machine_type=machine_type)
    with SimServer(sim) as server:
        async with watching(server.url, **settings) as run:
            await run.until_polling()
            sim.raise_notice("maintenance", {"type": "TERMINATE"})
            [drain] = await run.count(1)
    assert drain.deadline is not None
    assert _near(drain.deadline, utcnow() + timedelta(minutes=minutes))


async def test_a_machine_type_unavailable_at_start_is_read_again() -> None:
    sim = GcpSimulator(machine_type="a3-highgpu-8g")
    sim.add_fault("status", path="/computeMetadata/v1/instance/machine-type", status=503, count=2)
    with SimServer(sim) as server:
        async with watching(server.url, retry_delay=0.05) as run:
            await run.until_polling()
            sim.raise_notice("maintenance", {"type": "TERMINATE"})
            [drain] = await run.count(1)
    assert drain.deadline is not None
    assert _near(drain.deadline, utcnow() + timedelta(minutes=60))
    assert run.watcher.has_gpus is True


async def test_migrate_drains_without_deadline(server: SimServer, sim: GcpSimulator) -> None:
    async with watching(server.url) as run:
        await run.until_polling()
        sim.raise_notice("maintenance", {"type": "MIGRATE", "duration": 0.3})
        drain, clear = await run.count(2)
    assert (drain.action, drain.deadline, drain.detail) == (
        "drain",
        None,
        {"maintenance-event": MIGRATE},
    )
    assert (clear.action, clear.id) == ("clear", drain.id)


async def test_migrate_can_be_ignored(server: SimServer, sim: GcpSimulator) -> None:
    async with watching(server.url, migrate="ignore") as run:
        await run.until_polling()
        sim.raise_notice("maintenance", {"type": "MIGRATE"})
        await run.settle()
        assert run.reports == []
        sim.raise_notice("maintenance", {"type": "TERMINATE"})
        [drain] = await run.count(1)
    assert drain.detail == {"maintenance-event": TERMINATE}


async def test_a_maintenance_value_the_agent_does_not_know_drains_then_clears(
    server: SimServer, sim: GcpSimulator, caplog: pytest.LogCaptureFixture
) -> None:
    # A value Compute Engine adds later still means maintenance is coming: without a notice,
    # a termination behind it would find the run unflushed.
    async with watching(server.url) as run:
        await run.until_polling()
        sim.set_value("instance/maintenance-event", "RESTART_ON_HOST_MAINTENANCE")
        [drain] = await run.count(1)
        sim.set_value("instance/maintenance-event", "NONE")
        _, clear = await run.count(2)
    assert (drain.action, drain.reason, drain.deadline) == ("drain", "host-maintenance", None)
    assert drain.detail == {"maintenance-event": "RESTART_ON_HOST_MAINTENANCE"}
    assert (clear.action, clear.id) == ("clear", drain.id)
    assert "does not know" in caplog.text


async def test_an_unknown_value_after_terminate_keeps_the_terminate_deadline(
    server: SimServer, sim: GcpSimulator, caplog: pytest.LogCaptureFixture
) -> None:
    """TERMINATE_ON_HOST_MAINTENANCE, then a value the agent does not know (one Compute Engine
    adds, say while the stop is under way): the drain was re-sent without its deadline, so
    the board never escalated it and the job trained on into the stop. Nothing says the stop
    was called off: the drain keeps its deadline until NONE clears it, also when TERMINATE
    shows again."""
    key = "instance/maintenance-event"
    async with watching(server.url) as run:
        await run.until_polling()
        sim.set_value(key, TERMINATE)
        [drain] = await run.count(1)
        sim.set_value(key, "TERMINATE_ON_HOST_MAINTENANCE_IN_PROGRESS")
        await run.until(lambda: "does not know" in caplog.text)
        polls = run.watcher.health.polls
        await run.until(lambda: run.watcher.health.polls > polls)
        sim.set_value(key, TERMINATE)  # the same stop: not an hour later now
        await run.until(lambda: run.reports[-1].detail == {"maintenance-event": TERMINATE})
        sim.set_value(key, "NONE")
        await run.until(lambda: run.reports[-1].action == "clear")
    assert drain.deadline is not None
    assert [(r.action, r.id, r.deadline) for r in run.reports if r.action != "clear"] == [
        ("drain", drain.id, drain.deadline)
    ] * (len(run.reports) - 1)
    assert (run.reports[-1].action, run.reports[-1].id) == ("clear", drain.id)


async def test_migrate_turning_into_terminate_keeps_the_id(
    server: SimServer, sim: GcpSimulator
) -> None:
    async with watching(server.url) as run:
        await run.until_polling()
        sim.raise_notice("maintenance", {"type": "MIGRATE"})
        await run.count(1)
        sim.change_notice("maintenance-event", {"type": "TERMINATE"})
        first, second = await run.count(2)
    assert second.id == first.id and second.deadline is not None


async def test_repeated_answers_make_no_new_notice_and_a_new_episode_a_new_id(
    server: SimServer, sim: GcpSimulator
) -> None:
    async with watching(server.url, timeout_sec=1) as run:
        await run.until_polling()
        sim.raise_notice("maintenance", {"type": "TERMINATE"})
        await run.count(1)
        # Long-polls time out and answer the same value again: still one notice.
        polls = run.watcher.health.polls
        while run.watcher.health.polls < polls + 2:
            await asyncio.sleep(0.05)
        assert len(run.reports) == 1
        sim.withdraw("maintenance-event")
        await run.count(2)
        sim.raise_notice("maintenance", {"type": "TERMINATE"})
        first, clear, again = await run.count(3)
    assert clear.id == first.id
    assert again.action == "drain" and again.id != first.id


async def test_terminate_withdrawn_and_raised_again_during_a_long_poll_keeps_a_drain(
    server: SimServer, sim: GcpSimulator
) -> None:
    """TERMINATE -> NONE -> TERMINATE while the watcher's long-poll hangs. Seen as one answer
    (both changes before the server answered: the same value under a new ETag), the drain
    stands under its id with its first deadline, the earlier of the two: never moved later,
    which taking each new ETag of the same value for a new event would do at every answer of
    a server that gives one per answer. With the NONE seen, it is cleared and the new event
    raised under a new id with its own deadline. Never a notice dropped, never a clear last."""
    key = "instance/maintenance-event"
    async with watching(server.url, timeout_sec=30) as run:
        await run.until_polling()
        path = f"GET /computeMetadata/v1/{key}"
        asked = sim.requests[path]  # the long-poll waiting now answers the change
        sim.set_value(key, TERMINATE)
        [first] = await run.count(1)
        await run.until(lambda: sim.requests[path] > asked)  # the next long-poll hangs
        with sim.changed:  # both changes before the waiting answer wakes
            sim.set_value(key, "NONE")
            sim.set_value(key, TERMINATE)
        # The request after the next: the answer to the changes was handled.
        await run.until(lambda: sim.requests[path] > asked + 1)
        assert [(r.action, r.id, r.deadline) for r in run.reports] == [
            ("drain", first.id, first.deadline)
        ]
        sim.set_value(key, "NONE")
        await run.count(2)
        sim.set_value(key, TERMINATE)
        _, clear, again = await run.count(3)
    assert (clear.action, clear.id) == ("clear", first.id)
    assert again.action == "drain" and again.id != first.id
    assert again.deadline is not None and first.deadline is not None
    assert again.deadline >= first.deadline


async def notice_before_a_stop(
    server: SimServer, sim: GcpSimulator, state_dir: Path, kind: str
) -> Report:
    """Run a watcher keeping its notices in `state_dir` until it reports a maintenance
    notice of `kind`, then stop it, as an agent stopping for a restart."""
    async with watching(server.url, state_dir) as run:
        await run.until_polling()
        sim.raise_notice("maintenance", {"type": kind})
        [report] = await run.count(1)
    return report


async def test_a_notice_in_force_across_a_restart_keeps_its_id_and_deadline(
    server: SimServer, sim: GcpSimulator, tmp_path: Path
) -> None:
    before = await notice_before_a_stop(server, sim, tmp_path, "TERMINATE")
    await asyncio.sleep(1.1)  # a restart later: a new notice would get a later deadline
    async with watching(server.url, tmp_path) as run:
        [after] = await run.count(1)
        sim.withdraw("maintenance-event")
        _, clear = await run.count(2)
    assert after.id == before.id and after.action == "drain"
    # The wire keeps milliseconds.
    assert after.deadline is not None and before.deadline is not None
    assert abs(after.deadline - before.deadline) < timedelta(milliseconds=1)
    assert abs(after.noticed_at - before.noticed_at) < timedelta(milliseconds=1)
    assert (clear.action, clear.id) == ("clear", before.id)
    # Cleared is forgotten: the next start has nothing to restore.
    async with watching(server.url, tmp_path) as run:
        await run.until_polling()
        await run.settle()
        assert run.reports == []


async def test_a_notice_that_ended_while_the_agent_was_down_is_cleared_under_its_id(
    server: SimServer, sim: GcpSimulator, tmp_path: Path
) -> None:
    drain = await notice_before_a_stop(server, sim, tmp_path, "MIGRATE")
    sim.withdraw("maintenance-event")
    async with watching(server.url, tmp_path) as run:
        [clear] = await run.count(1)
    assert (clear.action, clear.id, clear.reason) == ("clear", drain.id, "host-maintenance")


async def test_a_notice_changed_while_the_agent_was_down_keeps_its_id(
    server: SimServer, sim: GcpSimulator, tmp_path: Path
) -> None:
    migrate = await notice_before_a_stop(server, sim, tmp_path, "MIGRATE")
    sim.change_notice("maintenance-event", {"type": "TERMINATE"})
    async with watching(server.url, tmp_path) as run:
        [terminate] = await run.count(1)
    assert terminate.id == migrate.id
    assert terminate.detail == {"maintenance-event": TERMINATE} and terminate.deadline is not None


# Nested a few thousand deep: json.loads raises RecursionError, not ValueError, and the
# watcher crashed at every start.
@pytest.mark.parametrize("unreadable", ["{not json", "[" * 100_000 + "]" * 100_000])
async def test_an_unreadable_notice_file_is_ignored(
    server: SimServer, sim: GcpSimulator, tmp_path: Path, unreadable: str
) -> None:
    (tmp_path / ACTIVE_FILE).write_text(unreadable)
    drain = await notice_before_a_stop(server, sim, tmp_path, "TERMINATE")
    assert drain.action == "drain"
    assert json.loads((tmp_path / ACTIVE_FILE).read_text())["maintenance-event"]["id"] == drain.id


class _ChangeBetweenPolls(GcpSimulator):
    """Changes maintenance-event right after answering the watcher's first long-poll, so
    the change happens while the watcher holds no request open."""

    def __init__(self) -> None:
        super().__init__()
        self.long_polls: list[dict[str, list[str]]] = []
        self.changed_between = threading.Event()

    def handle(self, request: SimRequest) -> SimResponse:
        response = super().handle(request)
        if request.path.endswith("/instance/maintenance-event") and request.param(
            "wait_for_change"
        ):
            self.long_polls.append(request.query)
            if not self.changed_between.is_set():
                self.changed_between.set()
                self.set_value("instance/maintenance-event", TERMINATE)
        return response


async def test_a_change_between_two_long_polls_is_not_missed() -> None:
    sim = _ChangeBetweenPolls()
    with SimServer(sim) as server:
        # A watcher that dropped last_etag would sit out the 30 s timeout_sec.
        async with watching(server.url, timeout_sec=30) as run:
            [drain] = await run.count(1, timeout=5)
    assert drain.detail == {"maintenance-event": TERMINATE}
    first, second = sim.long_polls[:2]
    assert first["last_etag"] == ["0"]
    assert second["last_etag"] != ["0"]
    assert second["timeout_sec"] == ["30"] and second["wait_for_change"] == ["true"]


class _AnswersCounted(GcpSimulator):
    """Counts the long-polls of maintenance-event answered (the value rendered)."""

    def __init__(self) -> None:
        super().__init__()
        self.answered = 0

    def handle(self, request: SimRequest) -> SimResponse:
        response = super().handle(request)
        if request.path.endswith("/instance/maintenance-event") and request.param(
            "wait_for_change"
        ):
            with self.lock:
                self.answered += 1
        return response


async def test_a_flip_and_its_undo_between_two_long_polls_hold_no_later_change_back() -> None:
    # Found by bench/run.py gcp_detection at load 12: "watcher 200, agent 134". The agent
    # writes its state file after each notice; two flips of maintenance-event in that time
    # (TERMINATE, back to NONE) answered the next long-poll at once with a new ETag and the
    # value already held, which the watcher took for a server ignoring the wait, and slept
    # retry_delay before asking again: a TERMINATE made meanwhile was published that late
    # (seconds, as the same happened again after the sleep half the time).
    sim = _AnswersCounted()
    with SimServer(sim) as server:
        async with watching(server.url, timeout_sec=30, retry_delay=30) as run:
            await run.until_polling()
            answered = sim.answered
            with sim.changed:  # both flips before the waiting long-poll looks again
                sim.set_value("instance/maintenance-event", TERMINATE)
                sim.set_value("instance/maintenance-event", "NONE")
            await run.until(lambda: sim.answered > answered, 5, "the flip-and-undo answered")
            sim.set_value("instance/maintenance-event", TERMINATE)
            [drain] = await run.count(1, timeout=10)
    assert drain.action == "drain" and drain.detail == {"maintenance-event": TERMINATE}


async def test_upcoming_window_drains_and_clears(server: SimServer, sim: GcpSimulator) -> None:
    async with watching(server.url) as run:
        await run.until_polling()
        sim.raise_notice("upcoming", {"start_in": 7200, "window": 3600})
        [drain] = await run.count(1)
        assert sim.upcoming is not None
        start = sim.upcoming["window_start_time"]
        sim.withdraw("upcoming-maintenance")
        _, clear = await run.count(2)
    assert (drain.action, drain.reason) == ("drain", "scheduled-maintenance")
    assert drain.deadline is not None
    assert drain.deadline.strftime("%Y-%m-%dT%H:%M:%S") == start[:19]
    assert drain.detail["maintenance_status"] == "PENDING"
    assert (clear.action, clear.id) == ("clear", drain.id)


async def test_unscheduled_maintenance_without_a_window_start_drains_at_once(
    server: SimServer, sim: GcpSimulator
) -> None:
    """Maintenance begun at once (UNSCHEDULED, ONGOING) with no `window_start_time` was
    dropped as unparseable: no notice, while the host went down under the job."""
    document = {
        "type": "UNSCHEDULED",
        "maintenance_status": "ONGOING",
        "maintenance_reasons": ["FAILURE_GPU"],
        "can_reschedule": False,
    }
    async with watching(server.url) as run:
        await run.until_polling()
        sim.raise_notice("upcoming", {"document": document})
        [drain] = await run.count(1)
        sim.withdraw("upcoming-maintenance")
        _, clear = await run.count(2)
    assert (drain.action, drain.reason) == ("drain", "scheduled-maintenance")
    assert drain.detail == document
    assert drain.deadline is not None and _near(drain.deadline, utcnow())
    assert (clear.action, clear.id) == ("clear", drain.id)
    assert run.watcher.health.errors == 0


async def test_an_upcoming_window_of_a_live_migrating_vm_has_no_deadline() -> None:
    # A VM with host maintenance policy MIGRATE keeps running through the window: with the
    # window's start as deadline, the board would end the run there for nothing.
    sim = GcpSimulator(on_host_maintenance="MIGRATE")
    with SimServer(sim) as server:
        async with watching(server.url) as run:
            await run.until_polling()
            sim.raise_notice("upcoming", {"start_in": 7200, "window": 3600})
            [drain] = await run.count(1)
        async with watching(server.url, migrate="ignore") as run:
            await run.until_polling(4)
            await run.settle()
            assert run.reports == []
    assert (drain.action, drain.reason, drain.deadline) == ("drain", "scheduled-maintenance", None)
    assert drain.detail["window_start_time"] == sim.upcoming["window_start_time"]  # type: ignore[index]


async def test_the_scheduling_unavailable_at_start_is_read_again() -> None:
    # One 503 (the server's answer for under a second during host maintenance) at start
    # left the policy unknown for the agent's life: every window on this live-migrating VM
    # got a deadline and ended the run at its start. The 503 was not even counted.
    sim = GcpSimulator(on_host_maintenance="MIGRATE", preemption_notice_duration=120)
    sim.add_fault("status", path="/computeMetadata/v1/instance/scheduling/", status=503, count=2)
    with SimServer(sim) as server:
        async with watching(server.url, retry_delay=0.05) as run:
            await run.until_polling()
            sim.raise_notice("upcoming", {"start_in": 7200, "window": 3600})
            [drain] = await run.count(1)
    assert (drain.action, drain.deadline) == ("drain", None)
    assert run.watcher.preemption_notice_seconds() == 120
    assert run.watcher.health.errors >= 2


async def test_a_preemption_is_not_held_back_by_the_scheduling_read_tries() -> None:
    # The tries after a failed first read (retry_delay apart) must not delay the preemption
    # long-poll: a VM preempted as the agent starts has 30 s at most.
    sim = GcpSimulator(preemptible=True)
    sim.add_fault("status", path="/computeMetadata/v1/instance/scheduling/", status=503, count=2)
    sim.raise_notice("preempt", {})
    with SimServer(sim) as server:
        async with watching(server.url, retry_delay=30) as run:
            [terminate] = await run.count(1, timeout=10)
    assert (terminate.action, terminate.reason) == ("terminate", "preemption")


async def test_a_moved_window_keeps_its_id(server: SimServer, sim: GcpSimulator) -> None:
    async with watching(server.url) as run:
        await run.until_polling()
        sim.raise_notice("upcoming", {"start_in": 7200})
        await run.count(1)
        sim.change_notice("upcoming-maintenance", {"start_in": 3 * 86400})
        first, moved = await run.count(2)
    assert moved.id == first.id and moved.action == "drain"
    assert first.deadline is not None and moved.deadline is not None
    assert moved.deadline - first.deadline > timedelta(days=2)


@pytest.mark.parametrize("form", ["empty", "404", "none", "error", "503"])
async def test_every_nothing_scheduled_answer_clears_a_window(form: str) -> None:
    sim = GcpSimulator(upcoming_none=form)
    with SimServer(sim) as server:
        async with watching(server.url, retry_delay=0.05) as run:
            await run.until_polling()
            await run.settle(0.3)
            assert run.reports == []  # nothing scheduled from the start: nothing to say
            sim.raise_notice("upcoming", {})
            await run.count(1)
            sim.withdraw("upcoming-maintenance")
            drain, clear = await run.count(2)
    assert (clear.action, clear.id) == ("clear", drain.id)


async def test_a_vm_that_answers_503_for_nothing_scheduled_is_not_degraded() -> None:
    # 503 is one of the answers of a VM with nothing scheduled: each read counted three
    # errors, `forewarn status` showed gcp degraded for good, and the log said the error
    # and "polling recovered" (the long-polls' next answer) at every read.
    sim = GcpSimulator(upcoming_none="503")
    with SimServer(sim) as server:
        async with watching(server.url, retry_delay=0.01, upcoming_interval=0.05) as run:
            key = "GET /computeMetadata/v1/instance/upcoming-maintenance"
            await run.until(lambda: sim.requests[key] >= 9, 10, "three upcoming reads")
            health = run.watcher.health
            assert (health.errors, health.last_error) == (0, None), health.errors_by_kind
    assert run.reports == []


async def test_a_single_503_does_not_clear_a_window(server: SimServer, sim: GcpSimulator) -> None:
    async with watching(server.url, retry_delay=0.3, upcoming_interval=0.1) as run:
        await run.until_polling()
        sim.raise_notice("upcoming", {})
        await run.count(1)
        sim.add_fault("status", status=503, duration=0.4)
        await run.settle(1.0)
        assert [report.action for report in run.reports] == ["drain"]


@pytest.mark.parametrize(
    "fault",
    [{"kind": "status", "status": 500}, {"kind": "status", "status": 403}, {"kind": "malformed"}],
    ids=["500", "403", "malformed"],
)
async def test_an_answer_that_is_not_authoritative_keeps_a_window(
    server: SimServer, sim: GcpSimulator, fault: dict[str, object]
) -> None:
    path = "/computeMetadata/v1/instance/upcoming-maintenance"
    reads = f"GET {path}"
    async with watching(server.url, upcoming_interval=0.05) as run:
        await run.until_polling()
        sim.raise_notice("upcoming", {})
        [drain] = await run.count(1)
        before = sim.requests[reads]
        sim.add_fault(**{**fault, "path": path, "count": 3})  # type: ignore[arg-type]
        await run.until(lambda: sim.requests[reads] >= before + 5, 5.0, "reads past the fault")
        assert [report.action for report in run.reports] == ["drain"]
        assert run.watcher.health.errors >= 1  # counted, not silent
        sim.withdraw("upcoming-maintenance")  # a real "nothing scheduled" still clears
        _, clear = await run.count(2)
    assert (clear.action, clear.id) == ("clear", drain.id)


async def test_upcoming_polling_can_be_turned_off(server: SimServer, sim: GcpSimulator) -> None:
    async with watching(server.url, upcoming_interval=0) as run:
        sim.raise_notice("upcoming", {})
        await run.until_polling()
        await run.settle()
        assert run.reports == []
    assert sim.requests["GET /computeMetadata/v1/instance/upcoming-maintenance"] == 0


async def test_every_request_carries_the_flavor_header(
    server: SimServer, sim: GcpSimulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A proxy in the environment must not be used for the link-local metadata server.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    seen: list[str | None] = []
    original = sim.handle

    def spy(request: SimRequest) -> SimResponse:
        seen.append(request.header("Metadata-Flavor"))
        return original(request)

    sim.handle = spy  # type: ignore[method-assign]
    async with watching(server.url) as run:
        await run.until_polling(3)
        sim.raise_notice("preempt", {})
        await run.count(1)
        assert await run.watcher.detect()
    assert seen and all(value == "Google" for value in seen)
    assert run.watcher.health.errors == 0


# detect()


async def test_detect_true_on_the_simulator(server: SimServer) -> None:
    watcher = GcpWatcher(Settings(url=server.url))
    try:
        assert await watcher.detect() is True
    finally:
        await watcher.aclose()


class _NotGoogle(Simulator):
    def handle(self, request: SimRequest) -> SimResponse:
        return SimResponse(200, "hello")


@pytest.fixture
def hanging_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


async def test_detect_false_fast_elsewhere(hanging_port: int) -> None:
    with SimServer(_NotGoogle()) as other:
        targets = [
            other.url,
            f"http://127.0.0.1:{free_port()}",
            f"http://127.0.0.1:{hanging_port}",
        ]
        for url in targets:
            watcher = GcpWatcher(Settings(url=url))
            started = time.monotonic()
            try:
                assert await watcher.detect() is False, url
            finally:
                await watcher.aclose()
            assert time.monotonic() - started < 2.5, url  # 1 s, and slack for load


async def test_gce_metadata_host_is_honoured(server: SimServer, sim: GcpSimulator) -> None:
    host = server.url.removeprefix("http://")
    watcher = GcpWatcher(Settings(), environ={"GCE_METADATA_HOST": host})
    try:
        assert watcher.root == f"{server.url}/computeMetadata/v1"
        assert await watcher.detect()
    finally:
        await watcher.aclose()


async def test_answered_only_once_every_key_has_answered(
    server: SimServer, sim: GcpSimulator
) -> None:
    """The agent keeps the notices it had before a restart until the watcher has answered:
    `preempted` answering alone must not count while `maintenance-event` hangs."""
    fault = sim.add_fault("hang", path="/computeMetadata/v1/instance/maintenance-event")
    async with watching(server.url, upcoming_interval=0) as run:
        await run.until(lambda: run.watcher.tracks["preempted"].answered, what="preempted")
        assert not run.watcher.answered
        sim.remove_fault(fault)
        await run.until(lambda: run.watcher.answered, what="every key to answer")


# How a saved notice's boot is told: the kernel's boot id saved beside it, another boot's
# here; or, in a file written before the boot id was saved, its time before the machine's start.
_OTHER_BOOT = "0f2c4b1e-5d36-4a7e-9c1d-2b8e7f6a5d40"
BOOT_RECORDS = ["another boot id", "no boot id"]


def moved_before_this_boot(state_dir: Path, kind: str, boot: str = "another boot id") -> None:
    """Move the saved notice of `kind` to an hour before this machine started, as one saved
    before a VM stop and start (the state directory is on the boot disk: it stays), saved in
    another boot or, as an older agent wrote it, with no boot id."""
    path = state_dir / ACTIVE_FILE
    notices = json.loads(path.read_text())
    booted = utcnow() - timedelta(seconds=time.clock_gettime(time.CLOCK_BOOTTIME))
    back = utcnow() - booted + timedelta(hours=1)
    for field in ("noticed_at", "deadline"):
        moment = datetime.fromisoformat(notices[kind][field].replace("Z", "+00:00"))
        notices[kind][field] = format_time(moment - back)
    if boot == "no boot id":
        notices[kind].pop("boot_id", None)
    else:
        notices[kind]["boot_id"] = _OTHER_BOOT
    path.write_text(json.dumps(notices))


@pytest.mark.parametrize("boot", BOOT_RECORDS)
async def test_a_notice_saved_before_this_machine_started_is_not_this_boot_s(
    server: SimServer,
    sim: GcpSimulator,
    tmp_path: Path,
    boot: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # TERMINATE_ON_HOST_MAINTENANCE at the first answer after a stop and start is a new
    # event: the old notice's deadline, past, was reused (a terminate at once, and, retired
    # past its deadline, a clear and a raise again every grace period).
    before = await notice_before_a_stop(server, sim, tmp_path, "TERMINATE")
    moved_before_this_boot(tmp_path, "maintenance-event", boot)
    # The kernel's boot id of the boot after the stop and start, from which the new notice's
    # id is made (the test runs in one boot, where the same answer makes the same id).
    monkeypatch.setattr("forewarn.providers.gcp.watch.boot_id", lambda: _OTHER_BOOT)
    async with watching(server.url, tmp_path) as run:
        [after] = await run.count(1)
    assert after.action == "drain" and after.id != before.id
    assert after.deadline is not None and after.deadline > utcnow() + timedelta(minutes=30)
    assert after.noticed_at > utcnow() - timedelta(minutes=1)


@pytest.mark.parametrize("boot", BOOT_RECORDS)
async def test_a_notice_saved_before_this_machine_started_and_gone_raises_nothing(
    server: SimServer, sim: GcpSimulator, tmp_path: Path, boot: str
) -> None:
    await notice_before_a_stop(server, sim, tmp_path, "TERMINATE")
    moved_before_this_boot(tmp_path, "maintenance-event", boot)
    sim.withdraw("maintenance-event")
    async with watching(server.url, tmp_path) as run:
        await run.until_polling()
        await run.settle()
        assert run.reports == []


@pytest.mark.skipif(boot_id() is None, reason="the kernel gives no boot id here")
async def test_a_notice_of_this_boot_seen_before_the_clock_stepped_forward_keeps_its_id(
    server: SimServer, sim: GcpSimulator, tmp_path: Path
) -> None:
    """A VM whose clock was an hour behind at boot (a wrong RTC, NTP's first sync to come)
    sees a maintenance notice, the clock steps forward, and the agent restarts: by the clock
    the notice was seen before this machine started (now less the time since boot), and it
    was taken for an earlier boot's and raised again under a new id with a new deadline (a
    second drain to the job, and its terminate an hour late). The boot id saved beside it
    says it is this boot's, and the boot clock's reading saved with it keeps the stop where
    it was: the deadline follows the step."""
    before = await notice_before_a_stop(server, sim, tmp_path, "TERMINATE")
    moved_before_this_boot(tmp_path, "maintenance-event")
    path = tmp_path / ACTIVE_FILE
    notices = json.loads(path.read_text())
    notices["maintenance-event"]["boot_id"] = boot_id()
    path.write_text(json.dumps(notices))
    async with watching(server.url, tmp_path) as run:
        [after] = await run.count(1)
        await run.settle()
        assert run.reports == [after]
    assert (after.id, after.action) == (before.id, "drain")
    assert after.deadline is not None and before.deadline is not None
    assert abs(after.deadline - before.deadline) < timedelta(seconds=5)  # the boot clock's


async def test_a_stop_announced_keeps_its_hour_when_the_clock_is_stepped(
    server: SimServer, sim: GcpSimulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TERMINATE_ON_HOST_MAINTENANCE read while the VM's clock ran 30 min ahead, then NTP
    stepped it back (field test: a sitecustomize stepping the agent's clock). The drain kept
    the deadline of the clock that was wrong, an hour and a half away on the right one: the
    board escalated it to terminate half an hour after the stop, and the job's exit save was
    never made. The stop is an hour after the notice however the wall clock moves: the drain
    is re-sent (same id) with the deadline that hour gives on the clock as stepped."""
    from forewarn.providers.gcp import watch as gcp_watch

    ahead = {"by": timedelta(minutes=30)}
    monkeypatch.setattr(gcp_watch, "utcnow", lambda: utcnow() + ahead["by"])
    key = "instance/maintenance-event"
    async with watching(server.url, timeout_sec=1) as run:
        await run.until_polling()
        sim.set_value(key, TERMINATE)
        [drain] = await run.count(1)
        assert drain.deadline is not None
        ahead["by"] = timedelta(0)  # NTP's step back
        [_, moved] = await run.count(2)
    assert moved.id == drain.id and moved.action == "drain"
    assert moved.deadline is not None
    shift = (drain.deadline - moved.deadline).total_seconds()
    assert abs(shift - 1800) < 5, (drain.deadline, moved.deadline)


async def test_a_preemptions_deadline_follows_a_step_of_the_clock(
    server: SimServer, sim: GcpSimulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Spot VM's preemption: TRUE read while the clock ran 30 min ahead, then NTP stepped it
    back. The terminate kept a deadline half an hour further away on the right clock,
    and a job weighing whether to wait for a background save in flight took it for time it
    had. As for the maintenance stop, the deadline follows the step (same id)."""
    from forewarn.providers.gcp import watch as gcp_watch

    ahead = {"by": timedelta(minutes=30)}
    monkeypatch.setattr(gcp_watch, "utcnow", lambda: utcnow() + ahead["by"])
    async with watching(server.url, timeout_sec=1) as run:
        await run.until_polling()
        sim.raise_notice("preempt", {})
        [terminate] = await run.count(1)
        assert terminate.deadline is not None and terminate.action == "terminate"
        ahead["by"] = timedelta(0)
        [_, moved] = await run.count(2)
    assert moved.id == terminate.id and moved.action == "terminate"
    assert moved.deadline is not None
    shift = (terminate.deadline - moved.deadline).total_seconds()
    assert abs(shift - 1800) < 5, (terminate.deadline, moved.deadline)


@pytest.mark.skipif(boot_id() is None, reason="the kernel gives no boot id here")
@pytest.mark.parametrize(
    ("notice", "step"),
    [("maintenance", timedelta(minutes=-30)), ("preempt", timedelta(minutes=30))],
)
async def test_a_stop_restored_after_the_clock_was_stepped_follows_the_step(
    server: SimServer,
    sim: GcpSimulator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    notice: str,
    step: timedelta,
) -> None:
    """A stop read while the clock was off, NTP's step while the agent was down (a restart
    for an upgrade; the agent of a VM booting starts before chrony's first sync): the restored
    notice kept the deadline the wrong clock gave. Stepped back, the terminate came half an
    hour after the VM stopped and the exit save was never made; stepped forward, a preemption
    or a maintenance drain were escalated half an hour early. The stop's boot-clock reading is
    saved with it (this boot's only), and the restored deadline follows the step."""
    from forewarn.providers.gcp import watch as gcp_watch

    off = {"by": -step}
    monkeypatch.setattr(gcp_watch, "utcnow", lambda: utcnow() + off["by"])
    async with watching(server.url, tmp_path, timeout_sec=1) as run:
        await run.until_polling()
        sim.raise_notice(notice, {"type": "TERMINATE"} if notice == "maintenance" else {})
        [before] = await run.count(1)
    off["by"] = timedelta(0)  # NTP's step, the agent down
    async with watching(server.url, tmp_path, timeout_sec=1) as run:
        [after] = await run.count(1)
    assert (after.id, after.action) == (before.id, before.action)
    assert after.deadline is not None and before.deadline is not None
    shift = (after.deadline - before.deadline).total_seconds()
    assert abs(shift - step.total_seconds()) < 5, (before.deadline, after.deadline)


@pytest.mark.skipif(boot_id() is None, reason="the kernel gives no boot id here")
async def test_a_preemption_read_false_after_a_restart_follows_a_step_of_the_clock(
    server: SimServer, sim: GcpSimulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TRUE read while the clock ran 30 min ahead; the agent restarted after NTP's step back
    and the server answered FALSE (a reset state): the terminate standing from before the
    restart kept the deadline of the wrong clock, half an hour after the VM's end, as the
    answers that keep it standing never looked at the clock."""
    from forewarn.providers.gcp import watch as gcp_watch

    ahead = {"by": timedelta(minutes=30)}
    monkeypatch.setattr(gcp_watch, "utcnow", lambda: utcnow() + ahead["by"])
    async with watching(server.url, tmp_path, timeout_sec=1) as run:
        await run.until_polling()
        sim.raise_notice("preempt", {})
        [terminate] = await run.count(1)
    ahead["by"] = timedelta(0)
    sim.withdraw("preempted")
    async with watching(server.url, tmp_path, timeout_sec=1) as run:
        [kept] = await run.count(1)
    assert (kept.action, kept.id) == ("terminate", terminate.id)
    assert kept.deadline is not None and terminate.deadline is not None
    shift = (kept.deadline - terminate.deadline).total_seconds()
    assert abs(shift + 1800) < 5, (terminate.deadline, kept.deadline)


async def test_503s_of_the_key_alone_keep_a_window_on_a_vm_that_answers_otherwise_for_none(
    server: SimServer, sim: GcpSimulator
) -> None:
    """On a VM whose "nothing scheduled" is `{}` (seen before the window came), the
    upcoming-maintenance key alone answering 503 through the three tries and the confirming
    read, the server answering the other keys, cleared the window (the 503 form of a VM that
    answers so for nothing) and raised it again under a new id at the next good read: the job
    saved twice, and had the 503s lasted past the start, no terminate. Only a parsable 200
    says what is scheduled (contracts 2.5): the window stands, counted as an error."""
    path = "/computeMetadata/v1/instance/upcoming-maintenance"
    reads = f"GET {path}"
    async with watching(server.url, retry_delay=0.02, upcoming_interval=0.05) as run:
        await run.until_polling()
        await run.until(lambda: sim.requests[reads] >= 2, 5.0, "a read of nothing scheduled")
        sim.raise_notice("upcoming", {"start_in": 3600})
        [drain] = await run.count(1)
        before = sim.requests[reads]
        sim.add_fault("status", status=503, path=path, count=8)
        await run.until(lambda: sim.requests[reads] >= before + 12, 5.0, "reads past the 503s")
        assert [report.action for report in run.reports] == ["drain"], run.reports
        assert run.watcher.health.errors >= 1  # counted, not silent
        sim.withdraw("upcoming-maintenance")  # a real "nothing scheduled" still clears
        _, clear = await run.count(2)
    assert (clear.action, clear.id) == ("clear", drain.id)


@pytest.mark.parametrize("none_form", ["empty", "503"])
async def test_how_the_vm_says_nothing_scheduled_is_kept_with_its_window_across_a_restart(
    server: SimServer, sim: GcpSimulator, tmp_path: Path, none_form: str
) -> None:
    """The form of "nothing scheduled" this VM used before its window is saved with the
    window: a watcher restarted while the window stood took the key's 503s for "nothing" on
    a VM that says it with `{}` (a clear, the window again under a new id at the next good
    read), having not heard the VM say "nothing" since it started. On a VM that says it with
    503s, they still clear the window after the restart."""
    sim.upcoming_none = none_form
    path = "/computeMetadata/v1/instance/upcoming-maintenance"
    reads = f"GET {path}"
    fast = {"retry_delay": 0.02, "upcoming_interval": 0.05}
    async with watching(server.url, tmp_path, **fast) as run:
        await run.until_polling()
        await run.until(lambda: sim.requests[reads] >= 4, 5.0, "reads of nothing scheduled")
        sim.raise_notice("upcoming", {"start_in": 3600})
        [drain] = await run.count(1)
    async with watching(server.url, tmp_path, **fast) as run:
        before = sim.requests[reads]
        if none_form == "503":
            sim.withdraw("upcoming-maintenance")
            [clear] = await run.count(1)
            assert (clear.action, clear.id) == ("clear", drain.id)
            return
        sim.add_fault("status", status=503, path=path, count=8)
        await run.until(lambda: sim.requests[reads] >= before + 12, 5.0, "reads past the 503s")
        assert [r.action for r in run.reports if r.action != "drain"] == [], run.reports
        assert {r.id for r in run.reports} <= {drain.id}, run.reports


@pytest.mark.parametrize(
    ("field", "value"),
    [("maintenance_status", "RESCHEDULED"), ("type", "EMERGENCY")],
    ids=["status", "type"],
)
async def test_an_upcoming_status_or_type_the_agent_does_not_know_is_named_in_a_warning(
    server: SimServer,
    sim: GcpSimulator,
    caplog: pytest.LogCaptureFixture,
    field: str,
    value: str,
) -> None:
    """A `maintenance_status` or `type` Google adds later: still a drain toward the window's
    start (the safe side), and a warning that names the value, once, as for a
    maintenance-event value not known. It was drained silently: nothing told the operator
    the agent guessed."""
    async with watching(server.url) as run:
        await run.until_polling()
        sim.raise_notice("upcoming", {"start_in": 7200, field: value})
        [drain] = await run.count(1)
        # More reads of the same answer: one warning, not one per read.
        health = run.watcher.health
        await run.until_polling(health.polls - health.errors + 4)
    assert (drain.action, drain.reason) == ("drain", "scheduled-maintenance")
    assert drain.deadline is not None and drain.detail[field] == value
    warnings = [r.getMessage() for r in caplog.records if value in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "does not know" in warnings[0]
