"""A watcher's file of what it published in this boot (`aws-boot.json`, `azure-boot.json`,
`kubernetes-boot.json`).

A provider lists an event that restarted the machine for minutes after it (AWS keeps a
`system-reboot` listed, Azure a `Started` Reboot): read afresh after the reboot it is a notice
under way now, and the job resumed after the reboot exits on it. Each of those watchers keeps,
in the state directory, the boot it runs in with the boot-ending events it published (`seen`)
and those it holds back as the end of the boot before (`ended`); what the two lists hold is the
provider's (ids, types, ids with their times). One shape for the file, so that every record
tells this boot from another the same way (`boot.same_boot`) and writes the same way.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from forewarn.protocol.timefmt import format_time

from .boot import same_boot
from .health import PollHealth
from .persist import read_state_object, write_or_report


class BootFile:
    """Where a watcher's boot record lives, and which boot this is. Without a boot id or a boot
    time nothing tells the boots apart, and nothing is read or kept."""

    def __init__(
        self,
        path: Path | None,
        provider: str,
        boot_id: str | None,
        booted: datetime | None,
        health: PollHealth | None = None,
    ) -> None:
        self.path = path if boot_id is not None or booted is not None else None
        self.provider = provider
        self.boot_id = boot_id
        self.booted = booted
        self.health = health

    def read(self) -> tuple[dict[str, object], bool | None] | None:
        """The saved record with whether it was written in this boot (None: cannot tell);
        None when there is no record (or none is kept)."""
        if self.path is None:
            return None
        payload = read_state_object(self.path, self.provider)
        if payload is None:
            return None
        return payload, same_boot(payload, self.boot_id, self.booted)

    def write(self, seen: object, ended: object, **more: object) -> bool:
        """Save this boot's lists (JSON values; `more`: a provider's own, such as the
        Kubernetes watcher's `retired`): True once written, or when none is kept; a failure
        is the health's to report (`persist.write_or_report`) and the caller's to retry at its
        next write."""
        if self.path is None:
            return True
        payload = {
            "boot_id": self.boot_id,
            "booted": format_time(self.booted) if self.booted is not None else None,
            "seen": seen,
            "ended": ended,
            **more,
        }
        return write_or_report(self.path, json.dumps(payload, indent=1) + "\n", self.health)


__all__ = ["BootFile"]
