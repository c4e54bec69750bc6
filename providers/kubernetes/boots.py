"""Which AKS VM event ended this node's previous boot (`kubernetes-boot.json`).

AKS's node-problem-detector copies the VM's Scheduled Event into the Node's
`VMEventScheduled` condition, and Azure lists an event as `Started` for about ten minutes
after it started while its impact lasts seconds: a `Reboot` or `Redeploy` that restarted the
node is still shown, Started, when the node is back. Read afresh after the reboot, it was an
event under way *now*: a terminate, and the job resumed after the reboot exited, again at each
restart while the condition showed it.

So the watcher keeps, in the state directory, the boot it runs in and the boot-ending event
types (`BOOT_ENDING`) it published in it. At the first Node read after the node booted again,
such a type of the boot before that is shown `Started` is the event that ended that boot: it
is not published while it stays shown Started. One shown `Scheduled` is this boot's event (the
node restarted for another cause) and is published as usual, as is every type the watcher had
not published before the reboot. The condition names no EventId, so the event type stands for
it (one condition shows one event at a time). Without this host's boot (the agent not on the
node: `kubernetes.boot_id_file`) or a state directory, nothing is held back.

It also keeps the Started events the agent retired in this boot (past their deadline plus the
grace, while the Node still showed them, `retired`): a running watcher does not raise such an
event again, and an agent restarted in the same boot raised it anew, with the moment of its
first read for a deadline (a terminate to the job resumed since). Held back while the Node
shows it Started; forgotten once it does not.
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path

from ..bootfile import BootFile, BootLists
from ..health import PollHealth
from .nodes import VmEvent

log = logging.getLogger("forewarn.providers.kubernetes")

BOOT_FILE = "kubernetes-boot.json"
# Events whose impact ends the boot: a Freeze pauses the VM and keeps it running. Azure's
# event types (the condition copies the VM's Scheduled Event), the same set as
# azure/boots.py's, kept here on purpose: no provider imports another (tests/test_import_graph).
BOOT_ENDING = frozenset({"Reboot", "Redeploy", "Preempt", "Terminate"})
# A file lists a few types; anything past this is not a list of ours.
MAX_TYPES = 16


def _types(value: object) -> set[str]:
    if not isinstance(value, list):
        return set()
    return {item for item in value[:MAX_TYPES] if isinstance(item, str) and item in BOOT_ENDING}


class VmEventBoots(BootLists[set[str]]):
    """The boot-ending event types published in this boot, and the one that ended the boot
    before while it is still shown."""

    def __init__(
        self,
        path: Path | None,
        boot_id: str | None,
        booted: datetime | None,
        health: PollHealth | None = None,
    ) -> None:
        super().__init__(BootFile(path, "kubernetes", boot_id, booted, health), set)
        # Published in the boot before this one, until the first Node read of this boot says
        # whether it ended it (Started) or is still to come (Scheduled).
        self.before: set[str] | None = None
        # Started events the agent retired in this boot while still shown (see above).
        self.retired: set[str] = set()
        saved = self._read_lists(_types)
        if saved is None:
            return
        seen, ended, same, payload = saved
        if same:
            self.seen, self.ended = seen, ended
            self.retired = _types(payload.get("retired"))
        elif same is not None:
            self.before = seen | ended

    def held_back(self, event: VmEvent | None) -> bool:
        """Whether `event` (the one the Node shows now) ended an earlier boot. The first read
        after a reboot decides; later ones only let it go once it is no longer shown Started."""
        before, self.before = self.before, None
        shown = event.type if event is not None and event.status == "Started" else None
        if before is not None and shown in before:
            log.warning(
                "kubernetes: the node's %s event was Started before this boot began: it is "
                "what ended the last one, not published while it stays shown",
                shown,
            )
            ended = {shown}
        else:
            ended = self.ended & ({shown} if shown else set())
        if ended != self.ended or before:
            self._unsaved = True
        self.ended = ended
        return shown is not None and shown in self.ended

    def retire(self, event_type: str) -> None:
        """The agent retired the Started event of `event_type` while the Node shows it: not
        raised again, by a restarted agent either, while it stays shown Started."""
        if event_type in BOOT_ENDING and event_type not in self.retired:
            self.retired.add(event_type)
            self._save()

    def retired_shown(self, event: VmEvent | None) -> bool:
        """Whether `event` (the one the Node shows now) is a Started event retired in this
        boot; a retired type no longer shown Started is forgotten."""
        shown = event.type if event is not None and event.status == "Started" else None
        kept = self.retired & ({shown} if shown else set())
        if kept != self.retired:
            self.retired = kept
            self._unsaved = True
        return shown is not None and shown in self.retired

    def published(self, event: VmEvent | None) -> None:
        """The event published from the current Node read (None: none): a boot-ending one is
        what the next boot checks."""
        seen = {event.type} if event is not None and event.type in BOOT_ENDING else set()
        self._published(seen)

    def _save(self) -> None:
        self._unsaved = not self.file.write(
            sorted(self.seen), sorted(self.ended), retired=sorted(self.retired)
        )


__all__ = ["BOOT_ENDING", "BOOT_FILE", "VmEventBoots"]
