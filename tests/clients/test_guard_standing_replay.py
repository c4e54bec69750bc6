"""A guard that starts under standing notices, read from the agent's replay on subscribe: it
acts once on the whole replay (one save answers a drain and a terminate)."""

from __future__ import annotations

import time

import pytest
from forewarn.clients import CheckpointGuard
from forewarn.testing import RunningAgent

# The terminate's lead: far past the test.
LEAD = "20m"

# Tries, each with a new pair of notices and a new guard: the replay's drain is read a moment
# before its terminate, and a step seldom falls between them every time.
TRIES = 6


@pytest.mark.timeout(120)
def test_the_first_due_under_a_standing_drain_and_terminate_answers_both() -> None:
    """In-process, a loop of quick steps from the guard's first moment (a real agent, two
    manual notices in force before the guard): the replay's drain is read first, then the
    terminate, which the heartbeat before them says nobody acted on. Before the fix a `due`
    between the two saved for the drain alone (3 of 8 tries), and the terminate's exit took
    a second save a step later."""
    with RunningAgent("local", set_env=True) as agent:
        for _ in range(TRIES):
            agent.clear()
            drain = agent.notify("drain", reason="manual")
            terminate = agent.notify("terminate", LEAD, reason="manual")
            guard = CheckpointGuard(handle_signals=False, flag_file=None)
            try:
                step, results = 0, []
                while not (results and results[-1].exit) and step < 200_000:
                    step += 1
                    if guard.due(step):
                        results.append(guard.saved(step, 0.0))
                    time.sleep(0.0005)  # a step of training
            finally:
                guard.close()
            saves = [(r.step, r.reasons, r.notices) for r in results]
            assert len(results) == 1, saves
            assert results[0].exit and set(results[0].notices) == {drain, terminate}, saves
