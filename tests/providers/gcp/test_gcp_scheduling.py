"""What the watcher makes of each `instance/maintenance-event` value, and of an upcoming
window, on each kind of VM `instance/scheduling/` describes (contracts 2.4-2.6, docs/gcp.md):
a standard GPU VM (TERMINATE, an hour), a Spot GPU VM (TERMINATE, preempted on maintenance:
the hour stands as a drain, the preemption is its own terminate), a VM that live-migrates
(MIGRATE), a Spot VM without GPUs. The real watcher against the simulator over HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.simulator import SimServer
from gcp_support import watching

TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"
MIGRATE = "MIGRATE_ON_HOST_MAINTENANCE"
HOUR, MINUTE = 3600.0, 60.0
LONG_POLL = "GET /computeMetadata/v1/instance/maintenance-event"
UPCOMING = "GET /computeMetadata/v1/instance/upcoming-maintenance"

# name: (simulator options, TERMINATE's deadline in seconds, the window has a deadline)
VMS: dict[str, tuple[dict[str, Any], float, bool]] = {
    "standard GPU VM": ({"machine_type": "a2-highgpu-1g"}, HOUR, True),
    "Spot GPU VM": ({"machine_type": "a3-highgpu-8g", "preemptible": True}, HOUR, True),
    "live-migrating VM": (
        {"machine_type": "n2-standard-8", "on_host_maintenance": "MIGRATE"},
        MINUTE,
        False,
    ),
    "Spot VM without GPUs": ({"machine_type": "n2-standard-8", "preemptible": True}, MINUTE, True),
}


def _near(actual: Any, seconds: float) -> bool:
    return actual is not None and abs((actual - utcnow()).total_seconds() - seconds) < 10


@pytest.mark.parametrize("vm", list(VMS))
async def test_each_maintenance_value_on_each_kind_of_vm(vm: str) -> None:
    options, terminate_seconds, window_deadline = VMS[vm]
    sim = GcpSimulator(**options)
    with SimServer(sim) as server:
        async with watching(server.url) as run:
            await run.until_polling(3)
            assert run.reports == []  # NONE, FALSE, nothing scheduled: no notice
            assert run.watcher.on_host_maintenance == options.get(
                "on_host_maintenance", "TERMINATE"
            )
            sim.raise_notice("maintenance", {"type": "TERMINATE"})
            [stop] = await run.count(1)
            sim.withdraw("maintenance-event")
            await run.count(2)
            sim.raise_notice("maintenance", {"type": "MIGRATE"})
            await run.count(3)
            sim.withdraw("maintenance-event")
            await run.count(4)
            sim.raise_notice("upcoming", {"start_in": 2 * HOUR})
            await run.count(5)
            # Preempted after all (the Spot VMs' way to stop for maintenance): its terminate.
            sim.raise_notice("preempt", {})
            await run.count(6)
    _, stop_ended, migrate, migrate_ended, window, preemption = run.reports
    assert (stop.action, stop.reason, stop.detail) == (
        "drain",
        "host-maintenance",
        {"maintenance-event": TERMINATE},
    )
    assert _near(stop.deadline, terminate_seconds), (vm, stop.deadline)
    assert (migrate.action, migrate.deadline, migrate.detail) == (
        "drain",
        None,
        {"maintenance-event": MIGRATE},
    )
    assert [stop_ended.action, migrate_ended.action] == ["clear", "clear"]
    assert (window.action, window.reason) == ("drain", "scheduled-maintenance")
    if window_deadline:
        assert window.deadline == parse_time(window.detail["window_start_time"])
    else:  # the VM keeps running through the window
        assert window.deadline is None
    assert (preemption.action, preemption.reason) == ("terminate", "preemption")
    assert _near(preemption.deadline, 30)


async def test_migrate_is_nothing_on_any_vm_with_migrate_ignore() -> None:
    sim = GcpSimulator(machine_type="n2-standard-8", on_host_maintenance="MIGRATE")
    with SimServer(sim) as server:
        async with watching(server.url, migrate="ignore") as run:
            await run.until_polling(3)
            # Each read by the watcher before the next: the long-poll waiting answers it (the
            # next long-poll follows); of the window, a read begun after it was raised.
            for kind, fields, key, after in (
                ("maintenance", {"type": "MIGRATE"}, LONG_POLL, 0),
                ("upcoming", {"start_in": 2 * HOUR}, UPCOMING, 1),
            ):
                asked = sim.requests[key]
                sim.raise_notice(kind, fields)
                await run.until(lambda key=key, n=asked + after: sim.requests[key] > n, what=kind)
            sim.raise_notice("maintenance", {"type": "TERMINATE"})
            [stop] = await run.count(1)
            await run.settle()
            assert run.reports == [stop]
    assert stop.detail == {"maintenance-event": TERMINATE} and _near(stop.deadline, MINUTE)
