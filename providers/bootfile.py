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
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Generic, TypeVar

from forewarn.protocol.timefmt import format_time

from .boot import same_boot
from .health import PollHealth
from .persist import read_state_object, write_or_report

# What a provider's lists hold: ids or types (a set), or ids with their times (a dict).
Lists = TypeVar("Lists", set[str], dict[str, str])


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


class BootLists(ABC, Generic[Lists]):
    """The two lists every boot record keeps in its `BootFile`, `seen` (published in this
    boot) and `ended` (held back as the end of the boot before), and the way each record
    reads them and ends a poll with them. What the lists hold, and what else a record keeps,
    is the provider's: a record says how to save itself (`_save`)."""

    def __init__(self, file: BootFile, empty: Callable[[], Lists]) -> None:
        self.file = file
        self.seen: Lists = empty()  # published in this boot
        self.ended: Lists = empty()  # ended an earlier boot: held back while listed
        self._unsaved = False

    def _read_lists(
        self, parse: Callable[[object], Lists]
    ) -> tuple[Lists, Lists, bool | None, dict[str, object]] | None:
        """The saved `seen` and `ended` (each through `parse`), whether they were written in
        this boot (None: cannot tell) and the whole record; None when there is none."""
        record = self.file.read()
        if record is None:
            return None
        payload, same = record
        return parse(payload.get("seen")), parse(payload.get("ended")), same, payload

    def _published(self, seen: Lists) -> None:
        """What the current poll published that ends a boot (`seen`): saved when it or
        anything else the record keeps changed, or when the last save failed."""
        if seen != self.seen:
            self.seen = seen
            self._unsaved = True
        if self._unsaved:
            self._save()

    @abstractmethod
    def _save(self) -> None:
        """Write the record (each provider's own file shape)."""


__all__ = ["BootFile", "BootLists"]
