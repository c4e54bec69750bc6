"""An exit's wait for the background upload already in flight follows the terminate's
deadline as it stands, not the time left taken once when `final()` began: the real agent
subprocess on a provider's simulator (AWS: the spot `time` rewritten; Azure: a Preempt's
NotBefore moved), a torch loop whose guard saves in the background to the moto server
behind a slow link on loopback (the walk: exit_wait_walk.py).

Taken once, a deadline moved later gave the upload up at the old deadline although minutes
remained (its work lost for nothing); one moved earlier kept waiting past the new deadline,
the exit's own save left to the SIGKILL with no line saying so."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from exit_wait_walk import CRAWL, RATE, Interruption, Walk, exit_lines, wait_ends, walk
from forewarn.clients.checkpoint import background
from forewarn.protocol.timefmt import utcnow
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.azure.simulate import AzureSimulator
from slow_link import SlowLink, small_send_buffers
from support import requires

pytestmark = [requires("torch"), pytest.mark.usefixtures("forked_agents")]

PREEMPT = "C7061BAC-AFDC-4513-B24B-AA5F13A16123"


def _spot() -> Interruption:
    """AWS: the spot instance-action, its `time` rewritten."""
    sim = ImdsSimulator()

    def move(at: datetime) -> None:
        fields = {"action": "terminate", "time": at.replace(microsecond=0).isoformat()}
        if sim.spot is None:
            sim.raise_notice("spot", fields)
        else:
            sim.change_notice("spot", fields)

    return Interruption("aws", sim, "FOREWARN_AWS_URL", move, {"FOREWARN_AWS_SPOT_INTERVAL": "0.2"})


def _preempt() -> Interruption:
    """Azure: a Preempt naming this VM, its NotBefore (RFC 1123, whole seconds) moved; the
    document's DocumentIncarnation is bumped at each move as Azure does. The event stays
    listed as Started a minute after NotBefore, so no `clear` ends the walk early."""
    # Polled four times a second; with the approval POST once the exit acks that brushes
    # IMDS's five a second (the real limit has tests of its own).
    sim = AzureSimulator(removal_after=60, rate_limit=10)

    def move(at: datetime) -> None:
        fields = {"not_before_seconds": max(0.0, (at - sim.now()).total_seconds() - 0.5)}
        if PREEMPT not in sim.events:
            sim.raise_notice("Preempt", {"event_id": PREEMPT, **fields})
        else:
            sim.change_notice(PREEMPT, fields)

    return Interruption(
        "azure", sim, "FOREWARN_AZURE_URL", move, {"FOREWARN_AZURE_INTERVAL": "0.25"}
    )


@pytest.fixture(params=["aws", "azure"])
def interruption(request: pytest.FixtureRequest) -> Interruption:
    return _spot() if request.param == "aws" else _preempt()


@pytest.fixture
def link(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowLink]:
    small_send_buffers(monkeypatch)
    with SlowLink(moto_endpoint, rate=RATE) as proxy:
        yield proxy
        proxy.rate = None


def test_an_upload_in_flight_is_waited_for_to_a_deadline_moved_later(
    tmp_path: Path,
    interruption: Interruption,
    link: SlowLink,
    bucket: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The exit finds step 2 uploading with 15 s left: it and the exit's save (~4 s) fit, so
    the exit waits. The link then crawls and the deadline moves 2 min out: step 2 now needs
    ~25 s more, past the old deadline but well within the new one. Bounded by the old
    deadline, it was cancelled ~10 s in and step 2's upload lost while minutes remained."""

    def later(walked: Walk) -> None:
        link.rate = CRAWL
        walked.terminate(utcnow() + timedelta(minutes=2))
        # The exit's own save of step 3 need not crawl too once the wait ends.
        wait_ends(walked)

    with caplog.at_level(logging.WARNING, logger="forewarn.clients"):
        walked, store, raised = walk(
            tmp_path, interruption, link, bucket, timedelta(seconds=15), later
        )
    assert raised is None, raised
    lines = exit_lines(caplog)
    chose = [line for _at, line in lines if "writing it now" in line]
    assert chose and "cancelled" not in chose[0], lines
    assert "deadline moved later" in chose[0], chose
    assert [g.step for g in store.generations()] == [1, 2, 3], lines
    assert walked.guard.exit_code == 143
    store.close()


def test_the_wait_for_an_upload_in_flight_stops_for_a_deadline_moved_earlier(
    tmp_path: Path,
    interruption: Interruption,
    link: SlowLink,
    bucket: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The exit finds step 2 uploading with 2 min left and waits. The link crawls (step 2
    needs ~25 s more) and the deadline moves 8 s out: the exit's save (~4 s by its
    estimate) has to start by ~3 s from then. Bounded by the old deadline, the wait
    went on until step 2 committed, past the new deadline, where the SIGKILL would have cut
    the exit's save off with no line saying so."""
    moved: list[float] = []
    monkeypatch.setattr(background, "PROGRESS_LOG_SECONDS", 0.5)

    def earlier(walked: Walk) -> None:
        link.rate = CRAWL
        walked.terminate(utcnow() + timedelta(seconds=8))
        moved.append(time.time())  # heard by the guard
        # The link fast again once the wait ends (step 2 cancelled, or committed): the
        # exit's own save is what the deadline was left for.
        wait_ends(walked)

    with caplog.at_level(logging.WARNING, logger="forewarn.clients"):
        walked, store, raised = walk(
            tmp_path, interruption, link, bucket, timedelta(minutes=2), earlier
        )
    assert raised is None, raised
    lines = exit_lines(caplog)
    chose = [(at, line) for at, line in lines if "writing it now" in line]
    assert chose and moved, lines
    at, line = chose[0]
    # Stopped by the new deadline less the exit's save's estimate (8 - 4 - 1 s, give or
    # take the second the deadline is rounded to and the watcher's poll), not step 2's end.
    assert at - moved[0] < 7.0, (at - moved[0], lines)
    assert "cancelled" in line and "deadline moved earlier" in line, line
    # What it says while it waits is the time left to the deadline as it stands.
    news = [n for t, n in lines if "still waiting" in n and t > moved[0]]
    said = [re.search(r"(\d+\.\d) s to the deadline\)", n) for n in news]
    assert all(s is not None and float(s.group(1)) < 8 for s in said), news
    assert [g.step for g in store.generations()][-1] == 3, lines
    assert walked.guard.exit_code == 143
    store.close()
