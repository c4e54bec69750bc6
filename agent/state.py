"""The agent's small state file: manual notices and the message counter, kept across restarts.

Written atomically (a temporary file, fsync, rename, fsync of the directory), so a crash at
any moment leaves either the old state or the new one, never a torn file.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from forewarn.providers.persist import write_atomically
from pydantic import ValidationError

from .protocol import Notice

log = logging.getLogger("forewarn.agent")

STATE_VERSION = 1


def write_atomic(path: Path, data: bytes, mode: int = 0o640) -> None:
    """Replace `path` with `data` so that readers see the old or the new content, never a mix."""
    write_atomically(path, data, mode=mode)


@dataclass
class AgentState:
    seq: int = 0
    manual: list[Notice] = field(default_factory=list)
    # Ids of manual notices some client saved for: a restarted agent still says so.
    acked: list[str] = field(default_factory=list)


def load_state(path: Path) -> AgentState:
    """The saved state, or an empty one. A damaged file is reported and set aside, not fatal."""
    try:
        raw = json.loads(path.read_bytes())
        manual = [Notice.model_validate(item) for item in raw.get("manual", [])]
        acked = [item for item in raw.get("acked", []) if isinstance(item, str)]
        return AgentState(seq=int(raw.get("seq", 0)), manual=manual, acked=acked)
    except FileNotFoundError:
        return AgentState()
    except (ValueError, TypeError, AttributeError, ValidationError) as error:
        broken = path.with_name(path.name + ".broken")
        os.replace(path, broken)
        log.error("state file %s is damaged (%s); moved to %s", path, error, broken)
        return AgentState()


def save_state(path: Path, state: AgentState) -> None:
    payload = {
        "version": STATE_VERSION,
        "seq": state.seq,
        "manual": [json.loads(notice.model_dump_json()) for notice in state.manual],
        "acked": list(state.acked),
    }
    write_atomic(path, json.dumps(payload, indent=1).encode())


__all__ = ["AgentState", "load_state", "save_state", "write_atomic"]
