"""The walk a user takes with `forewarn simulate gcp` and a maintenance window an hour out:
the simulator as its own process (`--upcoming-after 0 --upcoming-in 1h`), the agent as a real
subprocess. A window is published as soon as it is read, however far ahead it starts: a
drain now with the window's start as its deadline (no lead time to set); a reschedule moves
it (same id), `{ }` withdraws it."""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.providers.gcp import simulate
from support import AgentProcess, SimControl, agent_env, forewarn_cmd

FAST = {"FOREWARN_GCP_UPCOMING_INTERVAL": "0.5", "FOREWARN_GCP_RETRY_DELAY": "0.2"}


@contextmanager
def _simulator(tmp_path: Path, *flags: str) -> Iterator[str]:
    proc = subprocess.Popen(
        forewarn_cmd("simulate", "gcp", "--port", "0", *flags),
        env=agent_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()  # the URL, once listening
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_a_window_an_hour_out_is_a_drain_at_once_moved_by_a_reschedule_and_cleared(
    tmp_path: Path,
) -> None:
    with _simulator(tmp_path, "--upcoming-after", "0", "--upcoming-in", "1h") as url:
        env = agent_env(tmp_path, FOREWARN_GCP_URL=url, **FAST)
        agent = AgentProcess(tmp_path, providers=("gcp",), env=env)
        with agent, agent.subscriber() as sub:
            drain = sub.notice(timeout=15)
            assert (drain["action"], drain["reason"]) == ("drain", "scheduled-maintenance")
            left = parse_time(drain["deadline"]) - utcnow()
            assert timedelta(minutes=59) < left <= timedelta(hours=1), drain
            SimControl(url).change("upcoming-maintenance", start_in=7200)
            moved = sub.notice(timeout=10)
            assert (moved["id"], moved["action"]) == (drain["id"], "drain"), moved
            left = parse_time(moved["deadline"]) - utcnow()
            assert timedelta(minutes=119) < left <= timedelta(hours=2), moved
            SimControl(url).change("upcoming-maintenance", document={})
            cleared = sub.notice(timeout=10)
            assert (cleared["id"], cleared["action"]) == (drain["id"], "clear"), cleared


def test_the_flag_help_says_when_the_window_appears_and_when_it_starts() -> None:
    """`--upcoming-after S` read as "a window S out" (its help said "schedules a window after
    S") raised nothing for S: the window appears S after the start, and starts 7 days later."""
    parser = argparse.ArgumentParser()
    simulate.add_arguments(parser)
    text = " ".join(parser.format_help().split())
    assert "--upcoming-after 0 --upcoming-in 1h" in text, text
