"""A real idle agent wakes on one grid (providers/ticks.py): its heartbeats come at the
documented interval, at the multiples of it on the loop's clock, and its event loop's thread
wakes no more often than the docs say (5.0 a second: the flag file's looks every 0.25 s, with
the heartbeat, the watchdog's report and the control probe falling due in the same turns).

The loop's clock is CLOCK_MONOTONIC, which every process on the machine reads alike, so this
test's `time.monotonic()` at a heartbeat's receipt is the agent's tick plus the delivery.
Only test_ticks.py held the helper to it; an agent part that went back to sleeping its
interval from when it ran (its own phase: 7.4 wake-ups a second before the grid) failed no
test."""

from __future__ import annotations

import itertools
import statistics
import time
from pathlib import Path

from support import AgentProcess, Subscriber

# README.md's `--heartbeat-interval` default.
HEARTBEAT_INTERVAL = 1.0
# docs/gcp.md ("5.0 wake-ups a second"), README.md ("5 a second now").
DOCUMENTED_WAKEUPS = 5.0
# The window measured: long enough that one late or extra wake-up moves the rate little.
WINDOW = 10.0
# Voluntary switches, not schedstat's timeslices: being preempted on a loaded machine raises
# those (6.2-6.6 a second at load 13 for 4.1-4.2 voluntary). Measured at load 10-14: 4.1-4.7
# on the grid; 6.0 and 6.4 with the parts sleeping their interval from when they ran (each on
# a phase of its own), which this bound fails.
WAKEUP_SLACK = 1.1
# A heartbeat is sent at its tick and received here after the delivery: on the grid, within
# this of the tick (a loaded machine delays some; the median is asked).
DELIVERY = 0.15


def _voluntary_switches(pid: int) -> int:
    """The voluntary context switches of `pid`'s main thread (the agent's event loop): one per
    time it blocked, so one per wake-up."""
    status = Path(f"/proc/{pid}/task/{pid}/status").read_text()
    for line in status.splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError(f"no voluntary_ctxt_switches in /proc/{pid}/task/{pid}/status")


def test_an_idle_agent_beats_on_its_grid_and_wakes_no_more_than_documented(
    tmp_path: Path,
) -> None:
    agent = AgentProcess(tmp_path).start()
    try:
        assert agent.proc is not None
        pid = agent.proc.pid
        with Subscriber(agent.events, topics=("heartbeat",)) as subscriber:
            subscriber.ready()  # past the start and this subscription's replay
            beats: list[float] = []
            switches = _voluntary_switches(pid)
            started = time.monotonic()
            while (left := started + WINDOW - time.monotonic()) > 0:
                try:
                    topic, message = subscriber.recv(left)
                except TimeoutError:
                    break
                if topic == "heartbeat" and not message.get("replay_for"):
                    beats.append(time.monotonic())
            window = time.monotonic() - started
            woken = (_voluntary_switches(pid) - switches) / window
    finally:
        agent.stop()

    assert woken <= DOCUMENTED_WAKEUPS * WAKEUP_SLACK, f"{woken:.2f} wake-ups a second"
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    # At the documented interval: one per interval over the window (a late one is not
    # followed by a second: the next sleeps to the next multiple, not an interval on).
    assert WINDOW / HEARTBEAT_INTERVAL - 2 <= len(beats) <= WINDOW / HEARTBEAT_INTERVAL + 1, gaps
    assert abs(statistics.median(gaps) - HEARTBEAT_INTERVAL) < DELIVERY, gaps
    # On the grid: received just after a multiple of the interval of the monotonic clock.
    phases = [beat % HEARTBEAT_INTERVAL for beat in beats]
    assert statistics.median(phases) < DELIVERY, phases
