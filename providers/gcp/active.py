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

The state file is written after the publish (a slow or hung state disk must never hold a 30 s
preemption notice back), so an agent SIGKILLed in between lost when the notice was first seen:
the restarted agent counted a stop's deadline again from its own first answer, up to the time
it was down later than the one jobs had planned their save against. So the same notices are
written first to `gcp-notices.pending.json` in the runtime directory (a tmpfs, no fsync: a
killed process loses nothing it wrote, and the reboot that would clear it makes them another
boot's anyway), before the publish, and that file is removed once the state file is written.
Found at a start, it is newer than the state file, and wins.

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
from ..persist import read_state_object, write_atomically, write_or_report

log = logging.getLogger("forewarn.providers.gcp")

ACTIVE_FILE = "gcp-notices.json"
# In the runtime directory: the notices published and not yet written to ACTIVE_FILE.
PENDING_FILE = "gcp-notices.pending.json"
# The key of a saved stop's deadline as `since_boot()` reads it; this boot's only.
BOOT_DEADLINE_KEY = "deadline_since_boot"
# The key of the ETag of the answer that showed a saved notice; this boot's only.
ETAG_KEY = "etag"
# The key of how the VM said "nothing scheduled" before a saved upcoming window: true for a
# run of 503s, false for another form (`{}`, 404, NONE, an error document).
NONE_BY_503_KEY = "nothing_scheduled_by_503"


class ActiveNotices:
    """Kind (`preempted`, `maintenance-event`, `upcoming-maintenance`) → the notice in force."""

    def __init__(
        self, path: Path | None, health: PollHealth | None = None, pending: Path | None = None
    ) -> None:
        self.path = path
        self.health = health
        # PENDING_FILE: written before each publish (`save_pending`), removed after `save`.
        self.pending = pending if path is not None else None
        # Kind → the deadline of its stop on the boot clock (`StopClock.at`), when known.
        self.boot_deadlines: dict[str, float] = {}
        # Kind → the ETag of the answer that showed its notice (as it last changed), if any.
        self.etags: dict[str, str] = {}
        # Kind → how the VM said "nothing scheduled" before its notice (`NONE_BY_503_KEY`).
        self.none_by_503: dict[str, bool] = {}
        self.notices = self._load()
        self.unsaved = False
        self._pending_unsaved = False
        self._pending_failed = False  # a failure of PENDING_FILE was logged (once)

    def _load(self) -> dict[str, Report]:
        if self.path is None:
            return {}
        # Read as the other watchers read their files: a FIFO in its place hung the start,
        # and a file of any size was read whole. The pending file, when there is one, holds
        # what was published after the state file was last written: an agent killed between
        # its publish and that write (which comes after it) saved no notice there.
        payload = None
        if self.pending is not None:
            payload = read_state_object(self.pending, "gcp")
            if payload is not None:
                log.info(
                    "gcp: restoring the notices published before the restart from %s", self.pending
                )
        if payload is None:
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
            etag = item.get(ETAG_KEY) if isinstance(item, dict) else None
            if this_boot is not None and saved_in == this_boot and isinstance(etag, str):
                self.etags[kind] = etag
            by_503 = item.get(NONE_BY_503_KEY) if isinstance(item, dict) else None
            if isinstance(by_503, bool):
                self.none_by_503[kind] = by_503
        return notices

    def get(self, kind: str) -> Report | None:
        return self.notices.get(kind)

    def keep(self, kind: str, report: Report | None, etag: str | None = None) -> None:
        """Record the notice of `kind` in force (None: none is), with the ETag of the answer
        that showed it (None: the one recorded stands); `save` writes it."""
        if report is None:
            self.boot_deadlines.pop(kind, None)
            self.etags.pop(kind, None)
            self.none_by_503.pop(kind, None)
            if self.notices.pop(kind, None) is None:
                return
        else:
            self.notices[kind] = report
            if etag is not None:
                self.etags[kind] = etag
        self.unsaved = self._pending_unsaved = self.path is not None

    def keep_boot_deadline(self, kind: str, at: float | None) -> None:
        """Record the boot clock's reading of the deadline of the stop of `kind` in force
        (None: not known); `save` writes it with the notice."""
        if at is None:
            changed = self.boot_deadlines.pop(kind, None) is not None
        else:
            changed = self.boot_deadlines.get(kind) != at
            self.boot_deadlines[kind] = at
        if changed and kind in self.notices:
            self.unsaved = self._pending_unsaved = self.path is not None

    def keep_none_form(self, kind: str, by_503: bool | None) -> None:
        """Record how the VM said "nothing scheduled" before the notice of `kind` in force
        (None: not known); `save` writes it with the notice."""
        if kind not in self.notices or self.none_by_503.get(kind) == by_503:
            return
        if by_503 is None:
            self.none_by_503.pop(kind, None)
        else:
            self.none_by_503[kind] = by_503
        self.unsaved = self._pending_unsaved = self.path is not None

    def save_pending(self) -> None:
        """Before a publish: write what `keep` recorded to the pending file in the runtime
        directory, so that an agent killed before `save` comes back with the notice as it
        went out (its first-seen time and deadline). No fsync: only the process may die in
        between, and a tmpfs has nothing to sync. Best effort: a failure is logged once and
        the file removed (a stale one must not win over the state file at the next start)."""
        if not self._pending_unsaved or self.pending is None:
            return
        self._pending_unsaved = False
        try:
            write_atomically(self.pending, self._payload(), sync=False)
        except OSError as error:
            if not self._pending_failed:
                self._pending_failed = True
                log.warning(
                    "gcp: cannot write %s (%s: %s); a notice published before a kill of the "
                    "agent is restored from %s only once that is written",
                    self.pending,
                    type(error).__name__,
                    error,
                    self.path,
                )
            self._drop_pending()

    def _drop_pending(self) -> None:
        if self.pending is None:
            return
        try:
            self.pending.unlink(missing_ok=True)
        except OSError as error:
            log.warning("gcp: cannot remove %s: %s", self.pending, error)

    def _payload(self) -> str:
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
        for name, etag in self.etags.items():
            if name in payload:
                payload[name][ETAG_KEY] = etag
        for name, by_503 in self.none_by_503.items():
            if name in payload:
                payload[name][NONE_BY_503_KEY] = by_503
        return json.dumps(payload, indent=1) + "\n"

    def save(self) -> None:
        """Write what `keep` recorded, if anything is unwritten. A failed write is reported,
        not raised (the watcher goes on publishing), and the next call tries again. Once it
        is written, the pending file (`save_pending`) says nothing newer, and goes."""
        if not self.unsaved or self.path is None:
            return
        if write_or_report(self.path, self._payload(), self.health):
            self.unsaved = False
            self._drop_pending()


def _reading(value: object) -> float | None:
    """A boot clock's reading as JSON holds it (a finite number, not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        reading = float(value)
    except OverflowError:  # a whole number past a float (10**400): no reading
        return None
    return reading if math.isfinite(reading) else None


__all__ = [
    "ACTIVE_FILE",
    "BOOT_DEADLINE_KEY",
    "ETAG_KEY",
    "NONE_BY_503_KEY",
    "PENDING_FILE",
    "ActiveNotices",
]
