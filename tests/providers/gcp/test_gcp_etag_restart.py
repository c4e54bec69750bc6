"""The metadata server restarts (or another replica answers) and forgets its ETags: a
long-poll's `last_etag` is unknown to it, so it answers at once. The watcher must take the
new ETag and wait again (no request a millisecond, no core spent), raise nothing anew,
clear nothing, and still see the next change at once."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from forewarn.providers.gcp.active import ACTIVE_FILE
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.simulator import SimServer
from gcp_support import watching

TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"
LONG_POLL = "GET /computeMetadata/v1/instance/maintenance-event"
PREEMPTED_POLL = "GET /computeMetadata/v1/instance/preempted"
# Long enough that a watcher waiting as it should sends no request of its own in the test's
# windows; a spinning one sends hundreds.
TIMEOUT_SEC = 30


async def test_a_restart_that_forgets_the_etags_keeps_the_drain_and_the_long_poll_waiting(
    server: SimServer, sim: GcpSimulator
) -> None:
    async with watching(server.url, timeout_sec=TIMEOUT_SEC, upcoming_interval=0) as run:
        await run.until_polling()
        sim.raise_notice("maintenance", {"type": TERMINATE})
        [drain] = await run.count(1)
        await run.settle()  # the next long-poll waits with the ETag of TERMINATE
        before = sim.etag("instance/maintenance-event")
        asked = sim.requests[LONG_POLL], sim.requests[PREEMPTED_POLL]
        sim.restart()
        assert sim.etag("instance/maintenance-event") != before  # its ETag went back
        # The waiting long-poll answers at once (its ETag unknown now) and the next waits.
        await run.until(
            lambda: sim.requests[LONG_POLL] > asked[0], 5, "the long-poll answered the restart"
        )
        await run.settle(1.0)
        # One request after the answer at once, maybe a second (a value under a new ETag is
        # asked again once before pacing): not a loop. `preempted` never changed: its ETag
        # is the same after the restart, and its long-poll goes on waiting.
        assert sim.requests[LONG_POLL] - asked[0] <= 2, sim.requests
        assert sim.requests[PREEMPTED_POLL] == asked[1], sim.requests
        assert run.reports == [drain]  # nothing cleared, nothing raised again
        assert run.watcher.tracks["maintenance-event"].active == drain
        # The next change is seen at once, not after a timeout_sec of 30 s.
        sim.withdraw("maintenance-event")
        _, clear = await run.count(2, timeout=5)
    assert (clear.action, clear.id) == ("clear", drain.id)


async def test_etags_going_back_to_ones_given_before_lose_no_change(
    server: SimServer, sim: GcpSimulator
) -> None:
    """Each change comes with a restart, so the server's ETag is the boot one of the value:
    TERMINATE's and MIGRATE's come back every other change, ETags the watcher held before.
    Every change is published (same notice), and no loop follows."""
    async with watching(server.url, timeout_sec=TIMEOUT_SEC, upcoming_interval=0) as run:
        await run.until_polling()
        sim.raise_notice("maintenance", {"type": TERMINATE})
        await run.count(1)
        etags = {sim.etag("instance/maintenance-event")}
        for change in range(1, 11):
            value = "TERMINATE" if change % 2 == 0 else "MIGRATE"
            with sim.changed:  # the change and the restart before any long-poll looks
                sim.raise_notice("maintenance", {"type": value})
                sim.restart()
                etags.add(sim.etag("instance/maintenance-event"))
            await run.count(1 + change, timeout=5)
        asked = sim.requests[LONG_POLL]
        await run.settle(1.0)
        assert sim.requests[LONG_POLL] - asked <= 1, sim.requests
    assert len(etags) == 3  # TERMINATE's first one, then the two boot ones again and again
    values = [report.detail["maintenance-event"] for report in run.reports]
    assert values == [TERMINATE, *(["MIGRATE_ON_HOST_MAINTENANCE", TERMINATE] * 5)]
    assert {report.id for report in run.reports} == {run.reports[0].id}
    assert {report.action for report in run.reports} == {"drain"}


class _StaleEtag(GcpSimulator):
    """After `collide()`, answers maintenance-event under the ETag the watcher holds whatever
    the value: a restarted server whose counters came back to the same number for another
    value. Its waits then end only at timeout_sec."""

    def __init__(self) -> None:
        super().__init__()
        self.pinned: str | None = None

    def collide(self) -> None:
        with self.lock:
            self.pinned = self.etag("instance/maintenance-event")

    def etag(self, path: str) -> str:
        with self.lock:
            if self.pinned is not None and path.strip("/") == "instance/maintenance-event":
                return self.pinned
            return super().etag(path)


async def test_a_change_under_an_etag_the_watcher_holds_is_seen_within_one_long_poll() -> None:
    """The worst a forgotten ETag can do: the server's ETag for a new value is the one the
    watcher holds, so its wait does not end on the change. A long-poll still answers the
    current value at timeout_sec, and the watcher reads the value, not only the ETag: the
    clear comes within one long-poll."""
    sim = _StaleEtag()
    with SimServer(sim) as server:
        async with watching(server.url, timeout_sec=2, upcoming_interval=0) as run:
            await run.until_polling()
            sim.raise_notice("maintenance", {"type": TERMINATE})
            [drain] = await run.count(1)
            await run.settle()
            sim.collide()
            sim.withdraw("maintenance-event")
            async with httpx.AsyncClient(trust_env=False) as client:
                answer = await client.get(
                    server.url + "/computeMetadata/v1/instance/maintenance-event",
                    headers={"Metadata-Flavor": "Google"},
                )
            assert answer.text == "NONE" and answer.headers["ETag"] == sim.pinned
            _, clear = await run.count(2, timeout=2 + 2 + 5)
    assert (clear.action, clear.id) == ("clear", drain.id)


@pytest.mark.parametrize("kind", ["TERMINATE", "MIGRATE"])
async def test_a_notice_kept_across_an_agent_and_a_metadata_server_restart_stands_as_saved(
    server: SimServer, sim: GcpSimulator, tmp_path: Path, kind: str
) -> None:
    """Both restart (a host event): the notice saved with its ETag is shown under another
    (the server's boot one). Taken for an event ended and come again while the agent was
    down, a TERMINATE's stop would be counted again from the restart, an hour on; it keeps
    its id, first-seen time and deadline."""
    async with watching(server.url, tmp_path) as run:
        await run.until_polling()
        sim.raise_notice("maintenance", {"type": kind})
        [before] = await run.count(1)
    saved = json.loads((tmp_path / ACTIVE_FILE).read_text())
    sim.restart()
    await asyncio.sleep(1.1)  # a restart later: a new notice would get a later deadline
    async with watching(server.url, tmp_path) as run:
        [after] = await run.count(1)
        await run.until_polling()
        await run.settle()
        assert run.reports == [after]
    assert json.dumps(saved).find(sim.etag("instance/maintenance-event")) == -1  # not the same
    assert (after.id, after.action, after.detail) == (before.id, "drain", before.detail)
    # Saved with milliseconds, as the wire keeps them.
    assert abs(after.noticed_at - before.noticed_at) < timedelta(milliseconds=1)
    if kind == "TERMINATE":
        assert after.deadline is not None and before.deadline is not None
        assert abs(after.deadline - before.deadline) < timedelta(milliseconds=1)
    else:
        assert after.deadline is None
