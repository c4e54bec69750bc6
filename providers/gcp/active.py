"""The GCP notices in force, kept across agent restarts.

The metadata server gives a notice no id and no start time, so after a restart the watcher
could not tell a notice still in force from a new one: it would mint a new id (clients flush
once more) and a new first-seen time (a maintenance deadline an hour after the restart
instead of the notice). With this file a notice still in force after a restart keeps its id,
first-seen time and deadline; one that ended meanwhile is cleared under its old id.

The file only helps across restarts: a notice is published whether or not it can be written.
Each notice is saved with the kernel's boot id: one saved in another boot (a VM stopped and
started keeps its boot disk) is not restored. A file of an agent that saved no boot id is
judged by the clock instead: a notice seen before now less the time since boot.

A stop (a preemption, TERMINATE_ON_HOST_MAINTENANCE) is saved with its deadline on the boot
clock too (`stopclock.py`): a wall clock stepped while the agent was down (NTP's first sync
after the VM booted) moves the restored deadline with it, as it does one held in memory.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from forewarn.providers.report import Report, saved_report
from pydantic import ValidationError

from ..boot import boot_id, machine_started
from ..health import PollHealth
from ..persist import read_state_object, write_or_report

log = logging.getLogger("forewarn.providers.gcp")

ACTIVE_FILE = "gcp-notices.json"
# The key of a saved stop's deadline as `since_boot()` reads it; this boot's only.
BOOT_DEADLINE_KEY = "deadline_since_boot"


class ActiveNotices:
    """Kind (`preempted`, `maintenance-event`, `upcoming-maintenance`) → the notice in force."""

    def __init__(self, path: Path | None, health: PollHealth | None = None) -> None:
        self.path = path
        self.health = health
        # Kind → the deadline of its stop on the boot clock (`StopClock.at`), when known.
        self.boot_deadlines: dict[str, float] = {}
        self.notices = self._load()
        self.unsaved = False

    def _load(self) -> dict[str, Report]:
        if self.path is None:
            return {}
        # Read as the other watchers read their files: a FIFO in its place hung the start,
        # and a file of any size was read whole.
        payload = read_state_object(self.path, "gcp")
        if payload is None:
            return {}
        notices = {}
        booted = machine_started()
        this_boot = boot_id()
        for kind, item in payload.items():
            # One that cannot be read costs only itself: the others keep their ids.
            try:
                notice = saved_report(item)
            except ValidationError as error:
                log.warning(
                    "gcp: ignoring the %s notice in %s (%s)",
                    kind,
                    self.path,
                    error.errors()[0]["msg"],
                )
                continue
            saved_in = item.get("boot_id") if isinstance(item, dict) else None
            if isinstance(saved_in, str) and this_boot is not None:
                # The clock cannot say: one stepped forward since the notice was seen (NTP's
                # first sync on a VM whose RTC was behind) put it before the start that the
                # clock gives, and this boot's notice was raised again under a new id.
                earlier_boot = saved_in != this_boot
            else:  # saved by an agent that kept no boot id, or no boot id here
                earlier_boot = booted is not None and notice.noticed_at < booted
            if earlier_boot:
                # Saved before a VM stop and start (the state directory is on the boot
                # disk): TERMINATE_ON_HOST_MAINTENANCE at the first answer is a new event,
                # yet it took the old notice's id and past deadline, a terminate at once.
                # The agent does not restore such notices either (agent/state.py boot_id).
                log.info(
                    "gcp: the %s notice in %s is from before this machine started; not restored",
                    kind,
                    self.path,
                )
                continue
            notices[kind] = notice
            at = _reading(item.get(BOOT_DEADLINE_KEY)) if isinstance(item, dict) else None
            # Only a reading of this boot's clock: another boot's (or none known) says nothing.
            if this_boot is not None and saved_in == this_boot and at is not None:
                self.boot_deadlines[kind] = at
        return notices

    def get(self, kind: str) -> Report | None:
        return self.notices.get(kind)

    def keep(self, kind: str, report: Report | None) -> None:
        """Record the notice of `kind` in force (None: none is); `save` writes it."""
        if report is None:
            self.boot_deadlines.pop(kind, None)
            if self.notices.pop(kind, None) is None:
                return
        else:
            self.notices[kind] = report
        self.unsaved = self.path is not None

    def keep_boot_deadline(self, kind: str, at: float | None) -> None:
        """Record the boot clock's reading of the deadline of the stop of `kind` in force
        (None: not known); `save` writes it with the notice."""
        if at is None:
            changed = self.boot_deadlines.pop(kind, None) is not None
        else:
            changed = self.boot_deadlines.get(kind) != at
            self.boot_deadlines[kind] = at
        if changed and kind in self.notices:
            self.unsaved = self.path is not None

    def save(self) -> None:
        """Write what `keep` recorded, if anything is unwritten. A failed write is reported,
        not raised (the watcher goes on publishing), and the next call tries again."""
        if not self.unsaved or self.path is None:
            return
        # Every notice held is this boot's (those of another were not restored). An agent
        # without the key drops it (`saved_report`): a rollback keeps the notices.
        this_boot = boot_id()
        payload = {
            name: {**json.loads(item.model_dump_json()), "boot_id": this_boot}
            for name, item in self.notices.items()
        }
        for name, at in self.boot_deadlines.items():
            if name in payload:
                payload[name][BOOT_DEADLINE_KEY] = at
        if write_or_report(self.path, json.dumps(payload, indent=1) + "\n", self.health):
            self.unsaved = False


def _reading(value: object) -> float | None:
    """A boot clock's reading as JSON holds it (a finite number, not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


__all__ = ["ACTIVE_FILE", "BOOT_DEADLINE_KEY", "ActiveNotices"]
