"""A user's own test suite for their training loop's handler, written only with the forewarn
pytest plugin (its fixtures come from the `pytest11` entry point, not from an import here)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

# Where tests/testing/test_user_suite.py wants to know what ran, to check the teardown after.
RECORD = os.environ.get("USER_SUITE_RECORD")


@pytest.fixture(autouse=True)
def _record(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    agent = request.node.funcargs.get("forewarn_agent")
    if RECORD and agent is not None:
        entry = {
            "root": str(agent.root),
            "pid": agent.pid,
            "sim": agent.simulator.url if agent.simulator else None,
            "sim_pid": agent.simulator.proc.pid if agent.simulator else None,
            "dovecot": str(agent.dovecot.root) if agent.dovecot else None,
            "dovecot_pid": agent.dovecot.pid if agent.dovecot else None,
            "dovecot_ports": (
                [agent.dovecot.imaps_port, agent.dovecot.imap_port] if agent.dovecot else []
            ),
        }
        with open(RECORD, "a") as out:
            out.write(json.dumps(entry) + "\n")
