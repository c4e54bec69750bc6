"""What the spot tracker must remember of interruptions across agent restarts, kept in the
state directory (`aws-spot.json`):

- `retired`: those retired as stale (their time already past when first seen). A restarted
  agent that forgot them saw one for the first time again and raised it once more: a
  terminate, past its deadline, that stopped every job started since.
- `in_time`: those first seen before their time. A restarted agent seeing one first with its
  time past took it for stale and let it go after one retirement, where without the restart
  it is raised again at each grace while IMDS shows it.

The ids hash the interruption's action and time, so one that changes is a new id; the newest
few of each are kept, more than IMDS (one interruption at a time) ever needs.

Both hold for the boot they were written in (`boot_id`). In a new boot they are `before`:
interruptions of a boot that ended (a stop, started again by EC2), which the watcher does not
raise again while IMDS still lists one unchanged, its time before this boot began. Taken as
seen in time, one was a terminate at every grace, each stopping the job resumed since.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..health import PollHealth
from ..persist import read_state_object, write_or_report

SPOT_FILE = "aws-spot.json"
KEEP_IDS = 32


@dataclass
class SpotMemory:
    retired: list[str] = field(default_factory=list)
    in_time: list[str] = field(default_factory=list)
    # Those seen in an earlier boot (see the module's docstring).
    before: list[str] = field(default_factory=list)
    boot_id: str | None = None

    def add(self, key: str, notice_id: str) -> bool:
        """Remember `notice_id` under `key` (`retired` or `in_time`); True if it is new."""
        ids: list[str] = getattr(self, key)
        if notice_id in ids:
            return False
        setattr(self, key, [*ids, notice_id][-KEEP_IDS:])
        return True


def load_spot_memory(path: Path, boot_id: str | None = None) -> SpotMemory:
    """What `path` holds for the boot `boot_id`; nothing from a missing or unreadable file (an
    interruption raised once more or once less is the harm, a smaller one than refusing to
    start). Written in another boot, its interruptions are all `before`."""
    payload = read_state_object(path, "aws")
    if payload is None:
        return SpotMemory(boot_id=boot_id)
    retired, in_time = _ids(payload.get("retired")), _ids(payload.get("in_time"))
    before = _ids(payload.get("before"))
    saved_in = payload.get("boot_id")
    if isinstance(saved_in, str) and boot_id is not None and saved_in != boot_id:
        return SpotMemory(before=_ids([*before, *retired, *in_time]), boot_id=boot_id)
    return SpotMemory(retired, in_time, before, boot_id)


def _ids(raw: object) -> list[str]:
    ids = [item for item in raw if isinstance(item, str)] if isinstance(raw, list) else []
    return list(dict.fromkeys(ids))[-KEEP_IDS:]


def save_spot_memory(path: Path, memory: SpotMemory, health: PollHealth | None) -> bool:
    """Write `memory`; True when written (a failure is reported in `health`, and the caller
    tries again)."""
    payload = {
        "boot_id": memory.boot_id,
        "retired": memory.retired[-KEEP_IDS:],
        "in_time": memory.in_time[-KEEP_IDS:],
        "before": memory.before[-KEEP_IDS:],
    }
    return write_or_report(path, json.dumps(payload, indent=1) + "\n", health)


__all__ = ["KEEP_IDS", "SPOT_FILE", "SpotMemory", "load_spot_memory", "save_spot_memory"]
