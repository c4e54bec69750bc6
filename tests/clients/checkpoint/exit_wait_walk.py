"""The walk of tests/clients/checkpoint/test_s3_exit_wait_deadline_moved.py, shared by the
providers it is walked on: the real agent subprocess on a provider's simulator, a torch loop
whose guard saves in the background to the moto server behind a slow link on loopback, and
the terminate's deadline moved while the exit's save waits for the upload in flight."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from forewarn.clients import CheckpointGuard, Notices
from forewarn.clients.checkpoint import CheckpointStore, S3Options
from forewarn.clients.checkpoint.s3 import MIN_PART
from forewarn.protocol.timefmt import utcnow
from forewarn.providers.simulator import SimServer, Simulator
from slow_link import SlowLink
from support import AgentProcess, LazyModule, agent_env, eventually

torch = LazyModule("torch")

# The model's state: a part and a half, two parts uploaded side by side.
FLOATS = (MIN_PART + MIN_PART // 2) // 4
# The link as the periodic saves find it: the larger part takes 3 s (the saves' estimate).
RATE = MIN_PART / 3
# The link once the exit waits: step 2, about a third sent, needs ~25 s more.
CRAWL = RATE / 12


@dataclass
class Interruption:
    """One provider's terminate as its simulator serves it: `move(at)` raises it, or moves
    it, to `at`; `env` points the agent at the simulator (`url_env` set to its URL)."""

    provider: str
    simulator: Simulator
    url_env: str
    move: Callable[[datetime], None]
    env: dict[str, str] = field(default_factory=dict)


class Walk:
    """The agent on the simulator, the guard and its store, and the exit's log lines."""

    def __init__(self, interruption: Interruption, link: SlowLink, guard: CheckpointGuard):
        self.interruption, self.link, self.guard = interruption, link, guard

    def terminate(self, at: datetime) -> None:
        """Move (or raise) the interruption to `at`, and wait for the guard to hear it."""
        self.interruption.move(at)
        target = (at - utcnow()).total_seconds()
        eventually(
            lambda: abs((self.guard._seconds_left(passed=True) or -99) - target) < 3,
            10,
            f"the guard to hear the deadline {target:.0f} s out",
        )


def walk(
    tmp_path: Path,
    interruption: Interruption,
    link: SlowLink,
    bucket: str,
    first: timedelta,
    while_waiting: Callable[[Walk], None],
) -> tuple[Walk, CheckpointStore, Exception | None]:
    """Step 1 saved in the background (timed: the estimate), step 2's upload in flight when
    an interruption `first` out arrives at step 3; `while_waiting` runs once the exit's
    save waits for step 2. The walk, its store, and what the exit's save raised."""
    with SimServer(interruption.simulator) as server:
        env = agent_env(tmp_path, **{interruption.url_env: server.url}, **interruption.env)
        store = CheckpointStore(
            f"s3://{bucket}/run", s3=S3Options(endpoint_url=link.url, part_size=MIN_PART)
        )
        with AgentProcess(tmp_path, providers=(interruption.provider,), env=env) as agent:
            notices = Notices(agent.events, agent.control_endpoint)
            guard = CheckpointGuard(
                notices=notices, flag_file=None, handle_signals=False, store=store, background=True
            )
            walked = Walk(interruption, link, guard)
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
                walked.terminate(utcnow() + first)
                assert guard.due(3) and guard.should_exit

                def waiting() -> None:
                    eventually(lambda: saver.in_final, 30, "the exit's save")
                    while_waiting(walked)

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
        return walked, store, raised


def wait_ends(walked: Walk) -> None:
    """Wait for the exit's wait for step 2 to end (committed, or cancelled), then let the
    link carry the exit's own save at full speed."""
    saver = walked.guard.saver
    assert saver is not None
    eventually(lambda: saver.in_flight is None, 40, "the wait's end")
    walked.link.rate = None


def exit_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[float, str]]:
    return [(r.created, r.getMessage()) for r in caplog.records if "final checkpoint" in r.msg]
