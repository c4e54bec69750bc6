"""A `sitecustomize` for an agent subprocess whose state disk is slow while a trigger file
exists: each write of `state.json` then takes SLOW_WRITE seconds more (a disk busy with a
checkpoint: one write took 0.45 s on the development machine, agent/statewriter.py). What a
crash in that time leaves on disk is what the agent wrote before it published."""

from __future__ import annotations

import os
from pathlib import Path

# The scenario's slow write, in seconds.
SLOW_WRITE = 0.5

SITECUSTOMIZE = """\
import pathlib
import time

import forewarn.agent.statewriter as statewriter

_write = statewriter.write_atomically
_trigger = pathlib.Path({trigger!r})


def _slow_while_triggered(path, data, **kwargs):
    if path.name == "state.json" and _trigger.exists():
        time.sleep({seconds!r})  # the scenario: a state disk busy with a checkpoint
    return _write(path, data, **kwargs)


statewriter.write_atomically = _slow_while_triggered
"""


def slow_state_disk(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The environment variables that make an agent's state disk slow while the returned
    trigger file exists (it does not yet)."""
    site = tmp_path / "site"
    site.mkdir()
    trigger = tmp_path / "slow-disk"
    (site / "sitecustomize.py").write_text(
        SITECUSTOMIZE.format(trigger=str(trigger), seconds=SLOW_WRITE)
    )
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path}, trigger
