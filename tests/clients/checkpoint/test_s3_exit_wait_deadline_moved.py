"""An exit's wait for the background upload already in flight follows the terminate's
deadline as it stands, not the time left taken once when `final()` began: the real agent
subprocess on the IMDS simulator (the spot `time` rewritten), a torch loop whose guard saves
in the background to the moto server behind a slow link on loopback.

Taken once, a deadline moved later gave the upload up at the old deadline although minutes
remained (its work lost for nothing); one moved earlier kept waiting past the new deadline,
the exit's own save left to the SIGKILL with no line saying so."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from forewarn.clients import CheckpointGuard, Notices
from forewarn.clients.checkpoint import CheckpointStore, S3Options, background
from forewarn.clients.checkpoint.s3 import MIN_PART
from forewarn.protocol.timefmt import utcnow
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.simulator import SimServer
from slow_link import SlowLink, small_send_buffers
from support import AgentProcess, LazyModule, agent_env, eventually, requires

pytestmark = [requires("torch"), pytest.mark.usefixtures("forked_agents")]
torch = LazyModule("torch")

# The model's state: a part and a half, two parts uploaded side by side.
FLOATS = (MIN_PART + MIN_PART // 2) // 4
# The link as the periodic saves find it: the larger part takes 3 s (the saves' estimate).
RATE = MIN_PART / 3
# The link once the exit waits: step 2, about a third sent, needs ~25 s more.
CRAWL = RATE / 12


@pytest.fixture
def link(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowLink]:
    small_send_buffers(monkeypatch)
    with SlowLink(moto_endpoint, rate=RATE) as proxy:
        yield proxy
        proxy.rate = None


class Walk:
    """The agent on the simulator, the guard and its store, and the exit's log lines."""

    def __init__(self, sim: ImdsSimulator, link: SlowLink, guard: CheckpointGuard):
        self.sim, self.link, self.guard = sim, link, guard

    def spot(self, at: datetime) -> None:
        """Move (or raise) the spot interruption to `at`, and wait for the guard to hear it."""
        fields = {"action": "terminate", "time": at.replace(microsecond=0).isoformat()}
        if self.sim.spot is None:
            self.sim.raise_notice("spot", fields)
        else:
            self.sim.change_notice("spot", fields)
        target = (at - utcnow()).total_seconds()
        eventually(
            lambda: abs((self.guard._seconds_left(passed=True) or -99) - target) < 3,
            10,
            f"the guard to hear the deadline {target:.0f} s out",
        )


def _walk(
    tmp_path: Path,
    link: SlowLink,
    bucket: str,
    first: timedelta,
    while_waiting: Callable[[Walk], None],
) -> tuple[Walk, CheckpointStore, Exception | None]:
    """Step 1 saved in the background (timed: the estimate), step 2's upload in flight when
    a spot interruption `first` out arrives at step 3; `while_waiting` runs once the exit's
    save waits for step 2. The walk, its store, and what the exit's save raised."""
    sim = ImdsSimulator()
    with SimServer(sim) as server:
        env = agent_env(tmp_path, FOREWARN_AWS_URL=server.url, FOREWARN_AWS_SPOT_INTERVAL="0.2")
        store = CheckpointStore(
            f"s3://{bucket}/run", s3=S3Options(endpoint_url=link.url, part_size=MIN_PART)
        )
        with AgentProcess(tmp_path, providers=("aws",), env=env) as agent:
            notices = Notices(agent.events, agent.control_endpoint)
            guard = CheckpointGuard(
                notices=notices, flag_file=None, handle_signals=False, store=store, background=True
            )
            walk = Walk(sim, link, guard)
            model = torch.nn.Linear(1, FLOATS, bias=False)
            raised: Exception | None = None
            try:
                eventually(lambda: notices.alive, 10, "the first heartbeat")
                saver = guard.saver
                assert saver is not None
                guard.save_state(1, model.state_dict())
                eventually(lambda: guard.durable_step == 1, 30, "step 1 durable")
                model.weight.data.add_(1.0)
                guard.save_state(2, model.state_dict())
                eventually(lambda: link.busy(256 << 10) >= 1, what="step 2's bytes moving")
                walk.spot(utcnow() + first)
                assert guard.due(3) and guard.should_exit

                def waiting() -> None:
                    eventually(lambda: saver.in_final, 30, "the exit's save")
                    while_waiting(walk)

                helper = threading.Thread(target=waiting, daemon=True)
                helper.start()
                model.weight.data.add_(1.0)
                try:
                    guard.save_state(3, model.state_dict())
                except Exception as error:  # what a deadline missed gives: said, not hidden
                    raised = error
                helper.join(30)
            finally:
                link.rate = None
                guard.close()
                notices.close()
        return walk, store, raised


def _wait_ends(walk: Walk) -> None:
    """Wait for the exit's wait for step 2 to end (committed, or cancelled), then let the
    link carry the exit's own save at full speed."""
    saver = walk.guard.saver
    assert saver is not None
    eventually(lambda: saver.in_flight is None, 40, "the wait's end")
    walk.link.rate = None


def _exit_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[float, str]]:
    return [(r.created, r.getMessage()) for r in caplog.records if "final checkpoint" in r.msg]


def test_an_upload_in_flight_is_waited_for_to_a_deadline_moved_later(
    tmp_path: Path, link: SlowLink, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The exit finds step 2 uploading with 15 s left: it and the exit's save (~4 s) fit, so
    the exit waits. The link then crawls and the spot time moves 2 min out: step 2 now needs
    ~25 s more, past the old deadline but well within the new one. Bounded by the old
    deadline, it was cancelled ~10 s in and step 2's upload lost while minutes remained."""

    def later(walk: Walk) -> None:
        link.rate = CRAWL
        walk.spot(utcnow() + timedelta(minutes=2))
        # The exit's own save of step 3 need not crawl too once the wait ends.
        _wait_ends(walk)

    with caplog.at_level(logging.WARNING, logger="forewarn.clients"):
        walk, store, raised = _walk(tmp_path, link, bucket, timedelta(seconds=15), later)
    assert raised is None, raised
    lines = _exit_lines(caplog)
    chose = [line for _at, line in lines if "writing it now" in line]
    assert chose and "cancelled" not in chose[0], lines
    assert "deadline moved later" in chose[0], chose
    assert [g.step for g in store.generations()] == [1, 2, 3], lines
    assert walk.guard.exit_code == 143
    store.close()


def test_the_wait_for_an_upload_in_flight_stops_for_a_deadline_moved_earlier(
    tmp_path: Path,
    link: SlowLink,
    bucket: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The exit finds step 2 uploading with 2 min left and waits. The link crawls (step 2
    needs ~25 s more) and the spot time moves 8 s out: the exit's save (~4 s by its
    estimate) has to start by ~3 s from then. Bounded by the old deadline, the wait
    went on until step 2 committed, past the new deadline, where the SIGKILL would have cut
    the exit's save off with no line saying so."""
    moved: list[float] = []
    monkeypatch.setattr(background, "PROGRESS_LOG_SECONDS", 0.5)

    def earlier(walk: Walk) -> None:
        link.rate = CRAWL
        walk.spot(utcnow() + timedelta(seconds=8))
        moved.append(time.time())  # heard by the guard
        # The link fast again once the wait ends (step 2 cancelled, or committed): the
        # exit's own save is what the deadline was left for.
        _wait_ends(walk)

    with caplog.at_level(logging.WARNING, logger="forewarn.clients"):
        walk, store, raised = _walk(tmp_path, link, bucket, timedelta(minutes=2), earlier)
    assert raised is None, raised
    lines = _exit_lines(caplog)
    chose = [(at, line) for at, line in lines if "writing it now" in line]
    assert chose and moved, lines
    at, line = chose[0]
    # Stopped by the new deadline less the exit's save's estimate (8 - 4 - 1 s, give or
    # take the second the spot time is rounded to and the watcher's poll), not step 2's end.
    assert at - moved[0] < 7.0, (at - moved[0], lines)
    assert "cancelled" in line and "deadline moved earlier" in line, line
    # What it says while it waits is the time left to the deadline as it stands.
    news = [n for t, n in lines if "still waiting" in n and t > moved[0]]
    said = [re.search(r"(\d+\.\d) s to the deadline\)", n) for n in news]
    assert all(s is not None and float(s.group(1)) < 8 for s in said), news
    assert [g.step for g in store.generations()][-1] == 3, lines
    assert walk.guard.exit_code == 143
    store.close()
