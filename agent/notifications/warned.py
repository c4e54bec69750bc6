"""The file that keeps, across a restart of the agent, the notices whose Warning Event stands
on the Node (a drain or terminate Event made, its clear's not yet), and the notices whose
Events were owed (queued, or under way) when the agent stopped.

The state drops a notice as its clear goes out; the clear's Event is made after, by the
Kubernetes notifier's task. A stop while the API server held that Event (or a SIGKILL before
it) left the drain's Warning as the Node's last word on the notice, and the restarted agent,
which restored nothing of it, never ended it: `kubectl describe node` showed a reclaim in
force. The restarted agent makes the Clear Event of each notice named here that it restored
nothing of (see `KubernetesNotifier.on_restore_done`).

A drain and its clear both still queued at a stop (the API server holding the first) were
neither in the state nor named here: the restart made neither, and the cluster's history had
nothing of a reclaim the job was told of. The notices owed are kept here (`owed`, oldest
first; written as each is queued, not only at a stop, which a SIGKILL skips), and the
restarted agent makes their Events first, in order. An Event's name comes
from its notice (see `event_name`), so one made just before the stop is a 409 on the second
POST, not a second Event. An older agent reads the file and leaves `owed` alone.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ..protocol import Notice
from ..state import read_small, saved_notice, set_aside

log = logging.getLogger("forewarn.kubernetes")

WARNED_FILE = "kubernetes-events.json"
WARNED_VERSION = 1
# The notices kept, newest kept: those with a Warning in force, which are few. Past it, the
# oldest is forgotten (its Clear Event, if a stop cuts it off, is then not made again).
MAX_WARNED = 4096
# Larger files are not ours: MAX_WARNED notices of a few hundred bytes each.
MAX_WARNED_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class EventsFile:
    """What the file keeps: the notices with a Warning standing, and those whose Events were
    owed at the stop, oldest first."""

    warned: list[Notice]
    owed: list[Notice] = field(default_factory=list)


def _items(notices: list[Notice]) -> str:
    return ",\n".join(notice.model_dump_json() for notice in notices)


def encode_warned(notices: list[Notice], owed: list[Notice] | None = None) -> bytes:
    return (
        f'{{"version": {WARNED_VERSION}, "warned": [\n{_items(notices)}\n], '
        f'"owed": [\n{_items(owed or [])}\n]}}\n'
    ).encode()


def _notices(items: list[object]) -> list[Notice]:
    notices = []
    for item in items:
        try:
            notices.append(saved_notice(item))
        except ValidationError:
            log.error("kubernetes events file: a notice that cannot be read; left out")
    return notices[-MAX_WARNED:]


def decode_events(data: bytes) -> EventsFile:
    """What the bytes keep; ValueError when they are not such a file. One notice that cannot
    be read is left out, never the rest; a file without `owed` (an older agent's) owes none."""
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"not JSON: {error}") from None
    items = raw.get("warned") if isinstance(raw, dict) else None
    if not isinstance(items, list):
        raise ValueError('no "warned" list')
    owed = raw.get("owed")
    return EventsFile(_notices(items), _notices(owed) if isinstance(owed, list) else [])


def decode_warned(data: bytes) -> list[Notice]:
    """The notices with a Warning standing that the bytes keep (see `decode_events`)."""
    return decode_events(data).warned


def load_warned(path: Path) -> EventsFile | None:
    """What the last agent left: the notices with a Warning Event standing and the Events it
    owed; None without a file (no agent kept one here: which Events were made is not known).
    A file that cannot be read is moved aside and reported, never a reason not to start."""
    try:
        return decode_events(read_small(path, MAX_WARNED_BYTES))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        set_aside(path, "kubernetes events file", str(error))
        return None


__all__ = [
    "MAX_WARNED",
    "WARNED_FILE",
    "EventsFile",
    "decode_events",
    "decode_warned",
    "encode_warned",
    "load_warned",
]
