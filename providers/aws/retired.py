"""The spot interruptions retired as stale (their time already past when first seen), kept in
the state directory across agent restarts (`aws-retired.json`).

A restarted agent that forgot them saw such an interruption for the first time again and
raised it once more: a terminate, past its deadline, that stopped every job started since.
The ids hash the interruption's action and time, so one that changes is a new id and is
raised; the newest few are kept, a list IMDS never needs more of (it shows one at a time).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..health import PollHealth
from ..persist import write_or_report

log = logging.getLogger("forewarn.providers.aws")

RETIRED_FILE = "aws-retired.json"
KEEP_RETIRED = 32
# Larger is not ours: KEEP_RETIRED ids of a few dozen characters fit in a few kilobytes.
MAX_RETIRED_BYTES = 64 * 1024


def load_retired(path: Path) -> list[str]:
    """The ids saved in `path`, oldest first; none from a missing or unreadable file (a stale
    interruption raised once more is the harm, a smaller one than refusing to start)."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_RETIRED_BYTES + 1)
        if len(data) > MAX_RETIRED_BYTES:
            raise ValueError(f"larger than {MAX_RETIRED_BYTES} bytes")
        payload = json.loads(data)
    except FileNotFoundError:
        return []
    except (OSError, ValueError, RecursionError) as error:
        log.warning("aws: ignoring unreadable %s (%s)", path, error)
        return []
    retired = payload.get("retired") if isinstance(payload, dict) else None
    if not isinstance(retired, list):
        log.warning("aws: ignoring %s: no retired list", path)
        return []
    ids = [item for item in retired if isinstance(item, str)]
    return list(dict.fromkeys(ids))[-KEEP_RETIRED:]


def save_retired(path: Path, ids: list[str], health: PollHealth | None) -> bool:
    """Write the newest `KEEP_RETIRED` of `ids`; True when written (a failure is reported in
    `health`, and the caller tries again)."""
    text = json.dumps({"retired": ids[-KEEP_RETIRED:]}, indent=1) + "\n"
    return write_or_report(path, text, health)


__all__ = ["KEEP_RETIRED", "RETIRED_FILE", "load_retired", "save_retired"]
