"""An event raised on the simulator without a NotBefore of its own gets the minimum notice
Microsoft's table gives its type, read by the real watcher over HTTP on loopback: a drill
that raises a Preempt sees the 30 s a Spot eviction gives, not a Reboot's quarter hour."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from azure_harness import running
from forewarn.protocol.timefmt import utcnow
from forewarn.providers.azure.events import parse_not_before
from support import eventually_async

# Microsoft's minimum notice per EventType (Scheduled Events, "minimum notice"), written out
# here rather than read from the simulator; Terminate is the scale set's configurable
# 5-15 min, at its 5 min default.
MINIMUM_NOTICE = {
    "Freeze": 15 * 60,
    "Reboot": 15 * 60,
    "Redeploy": 10 * 60,
    "Preempt": 30,
    "Terminate": 5 * 60,
}


@pytest.mark.parametrize(("kind", "lead"), MINIMUM_NOTICE.items())
async def test_an_event_raised_without_a_not_before_has_its_types_minimum_notice(
    kind: str, lead: int
) -> None:
    async with running(freeze=True) as h:
        before = utcnow()
        # Through the control API, as `forewarn simulate azure` users raise one.
        with httpx.Client(base_url=h.server.url, trust_env=False) as client:
            answer = client.post("/_sim/notices", json={"kind": kind})
        assert answer.status_code < 300, answer.text
        (report,) = await eventually_async(lambda: h.reports, what=f"the {kind}")
        assert report.detail["EventType"] == kind
        assert report.detail["EventStatus"] == "Scheduled"
        not_before = parse_not_before(report.detail["NotBefore"])
        assert not_before is not None
        # NotBefore has whole seconds, rounded up so that the notice is never shorter.
        assert timedelta(seconds=lead) <= not_before - before <= timedelta(seconds=lead + 3)
        # A Freeze is a pause with no deadline; every other type is due at NotBefore.
        assert report.deadline == (None if kind == "Freeze" else not_before)
