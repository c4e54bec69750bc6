"""Which of this VM's events ended the machine's previous boot (`azure-boot.json`).

Azure lists an event as `Started` for about ten minutes after it started, while its impact
lasts seconds: a `Reboot` or `Redeploy` that restarted the VM is still listed, Started, when
the VM is back. Read afresh after the reboot, it was a new event started *now*: the job resumed
after the reboot got a terminate and exited, again at each restart until Azure removed it.

So the watcher keeps, in the state directory, the boot it runs in and the events that end a
boot (`BOOT_ENDING`) that it published in it. In the first document after the machine
booted again, such an event of the boot before that is `Started` is the one that ended that
boot: it is not published while it stays listed. One that is still `Scheduled` is this boot's
event (the VM restarted for another cause) and is published as usual, as is every event the
watcher had not published before the reboot. Where the boot id cannot be read (a container
without /proc/sys/kernel/random/boot_id), the boot time from the clock since boot tells the
boots apart (as for AWS, `aws/boots.py`); without either, or a state directory, nothing is
held back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from ..bootfile import BootFile, BootLists
from ..health import PollHealth
from .events import ScheduledEvent

log = logging.getLogger("forewarn.providers.azure")

BOOT_FILE = "azure-boot.json"
# Events whose impact ends the boot: a Freeze pauses the VM and keeps it running.
BOOT_ENDING = frozenset({"Reboot", "Redeploy", "Preempt", "Terminate"})
# A document lists a handful of events; anything past this is not a list of ours.
MAX_IDS = 256


def _ids(value: object) -> set[str]:
    if not isinstance(value, list):
        return set()
    return {item for item in value[:MAX_IDS] if isinstance(item, str) and item}


class BootRecord(BootLists[set[str]]):
    """The boot-ending events published in this boot, and those that ended the boot before."""

    def __init__(
        self,
        path: Path | None,
        boot_id: str | None,
        health: PollHealth | None = None,
        *,
        booted: datetime | None = None,
    ) -> None:
        # Without a boot id the boot time tells the boots apart (`boot.same_boot`).
        super().__init__(BootFile(path, "azure", boot_id, booted, health), set)
        # Published in the boot before this one, until the first document of this boot says
        # whether each one ended it (Started) or is still to come (Scheduled).
        self.before: set[str] = set()
        # Started events the agent retired in this boot while still listed (see above).
        self.retired: set[str] = set()
        self._absent: dict[str, int] = {}  # retired ones missing from the last documents
        saved = self._read_lists(_ids)
        if saved is None:
            return
        seen, ended, same, payload = saved
        if same:
            self.seen, self.ended = seen, ended
            self.retired = _ids(payload.get("retired"))
        elif same is not None:
            self.before = seen | ended

    def held_back(self, events: Iterable[ScheduledEvent]) -> set[str]:
        """The EventIds of `events` (a document's) that ended an earlier boot. The first
        document after a reboot decides which those are; later ones only drop the ones no
        longer listed Started."""
        listed = {event.event_id: event for event in events}
        before, self.before = self.before, set()
        for event_id in before:
            event = listed.get(event_id)
            if event is not None and event.status == "Started":
                self.ended.add(event_id)
                log.warning(
                    "azure: event %s (%s) was Started before this boot began: it is what ended "
                    "the last one, not published while it stays listed",
                    event_id,
                    event.event_type,
                )
        still = {
            event_id
            for event_id in self.ended
            if event_id in listed and listed[event_id].status == "Started"
        }
        changed = still != self.ended or bool(before)
        self.ended = still
        if changed:
            self._unsaved = True
        return set(self.ended)

    def retire(self, event_id: str) -> None:
        """The agent retired `event_id`, listed Started: not raised again, by a restarted agent
        either, while it stays listed Started."""
        if event_id not in self.retired:
            self.retired.add(event_id)
            self._save()

    def retired_listed(self, events: Iterable[ScheduledEvent], absent_after: int = 2) -> set[str]:
        """The EventIds of `events` (a document's) retired while Started and still listed
        Started. A retired event is forgotten once `absent_after` documents in a row lack it
        (one may be a stray answer, as for a clear), or once it is listed otherwise."""
        listed = {event.event_id: event for event in events}
        kept = set()
        for event_id in self.retired:
            event = listed.get(event_id)
            if event is not None:
                self._absent.pop(event_id, None)
                if event.status == "Started":
                    kept.add(event_id)
                continue
            absent = self._absent.get(event_id, 0) + 1
            if absent < absent_after:
                self._absent[event_id] = absent
                kept.add(event_id)
            else:
                self._absent.pop(event_id, None)
        if kept != self.retired:
            self.retired = kept
            self._unsaved = True
        return {event_id for event_id in kept if event_id in listed}

    def published(self, events: Iterable[ScheduledEvent]) -> None:
        """This VM's events published from the current document: the boot-ending ones are
        what the next boot checks."""
        seen = {event.event_id for event in events if event.event_type in BOOT_ENDING}
        # A retired one is not published while listed, but may yet end this boot (Azure: a
        # Started event can bring a further impact until it is removed).
        seen |= self.retired
        self._published(seen)

    def _save(self) -> None:
        self._unsaved = not self.file.write(
            sorted(self.seen)[:MAX_IDS],
            sorted(self.ended)[:MAX_IDS],
            retired=sorted(self.retired)[:MAX_IDS],
        )


__all__ = ["BOOT_ENDING", "BOOT_FILE", "BootRecord"]
