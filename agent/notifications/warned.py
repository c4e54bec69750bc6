"""The file that keeps, across a restart of the agent, the notices whose Warning Event stands
on the Node (a drain or terminate Event made, its clear's not yet).

The state drops a notice as its clear goes out; the clear's Event is made after, by the
Kubernetes notifier's task. A stop while the API server held that Event (or a SIGKILL before
it) left the drain's Warning as the Node's last word on the notice, and the restarted agent,
which restored nothing of it, never ended it: `kubectl describe node` showed a reclaim in
force. The restarted agent makes the Clear Event of each notice named here that it restored
nothing of (see `KubernetesNotifier.on_restore_done`).
"""

from __future__ import annotations

import json
import logging
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


def encode_warned(notices: list[Notice]) -> bytes:
    items = ",\n".join(notice.model_dump_json() for notice in notices)
    return f'{{"version": {WARNED_VERSION}, "warned": [\n{items}\n]}}\n'.encode()


def decode_warned(data: bytes) -> list[Notice]:
    """The notices the bytes keep; ValueError when they are not such a file. One notice that
    cannot be read is left out, never the rest."""
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"not JSON: {error}") from None
    items = raw.get("warned") if isinstance(raw, dict) else None
    if not isinstance(items, list):
        raise ValueError('no "warned" list')
    notices = []
    for item in items:
        try:
            notices.append(saved_notice(item))
        except ValidationError:
            log.error("kubernetes events file: a notice that cannot be read; left out")
    return notices[-MAX_WARNED:]


def load_warned(path: Path) -> list[Notice] | None:
    """The notices the last agent left with a Warning Event standing; None without a file (no
    agent kept one here: which Events were made is not known). A file that cannot be read is
    moved aside and reported, never a reason not to start."""
    try:
        return decode_warned(read_small(path, MAX_WARNED_BYTES))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        set_aside(path, "kubernetes events file", str(error))
        return None


__all__ = ["MAX_WARNED", "WARNED_FILE", "decode_warned", "encode_warned", "load_warned"]
