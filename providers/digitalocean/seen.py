"""Which mails of the mailbox were already handled, kept across agent restarts.

IMAP gives each message a UID that only grows within one UIDVALIDITY of a mailbox, so the
highest UID handled is enough to know what is new. The file also keeps the ids of the
reports raised, so a mailbox whose UIDVALIDITY changed (rebuilt by the server) does not
raise the same reclaim again. It is written atomically (temporary file, fsync, rename), so a
crash leaves the old state or the new one, never half of either. A write that fails (a full
disk, a read-only state directory) is reported in the watcher's health and tried again at
the next write: the watcher goes on reading mail and publishing reclaims without its files.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from forewarn.providers.report import Report, saved_report
from pydantic import ValidationError

from ..boot import boot_id
from ..health import PollHealth
from ..persist import read_small, write_or_report
from .clock import standing

log = logging.getLogger("forewarn.providers.digitalocean")

STATE_FILE = "digitalocean-mailbox.json"
ACTIVE_FILE = "digitalocean-active.json"
KEEP_RAISED = 200
# Seconds a mail that raised nothing may wait to be written with the next: written after each
# (two fsyncs), a first start on a folder of thousands of mails spent most of its time in
# fsync before it reached the newest, the reclaim. A crash meanwhile reads those mails again,
# and they raise nothing again.
SAVE_EVERY = 1.0
# The most each file is read of. The mailbox file holds KEEP_RAISED ids of ~35 characters,
# each at most once more in `ahead` and in `replaced` (written only for ids in `raised`):
# under 30 KB at its largest. The reclaims file holds whole notices, whose subject and
# Message-ID come from a mail of up to FETCH_LIMIT bytes (six each once JSON-escaped): the
# agent's own bound for its state file, which saves the same notices.
MAX_MAILBOX_BYTES = 64 * 1024
MAX_ACTIVE_BYTES = 4 * 1024 * 1024


@dataclass
class SeenMail:
    path: Path
    mailbox: str  # a hash naming server, user and folder; another mailbox starts afresh
    uidvalidity: int | None = None
    last_uid: int = 0
    raised: list[str] = field(default_factory=list)
    # Reclaims raised ahead of the pass (read while it went over older mail), by report id:
    # the UID of their mail, above last_uid. An older cancellation read after them, in its
    # place in the pass, does not withdraw them. Kept in the file: a crash mid-pass reads
    # that cancellation again.
    ahead: dict[str, int] = field(default_factory=dict)
    # Cancellations and new times applied ahead of the pass, by the id they were applied as:
    # the UID of their mail, above last_uid. Each takes the place of every notice in older
    # mail, so a mail of the pass older than one of them raises and withdraws nothing when
    # its place comes. Kept in the file: a crash mid-pass reads that older mail again.
    replaced: dict[str, int] = field(default_factory=dict)
    health: PollHealth | None = field(default=None, repr=False, compare=False)
    unsaved: bool = False
    _saved_at: float = field(default=-SAVE_EVERY, repr=False, compare=False)  # time.monotonic()

    @classmethod
    def load(cls, path: Path, mailbox: str, health: PollHealth | None = None) -> SeenMail:
        state = cls(path, mailbox, health=health)
        try:
            payload = json.loads(read_small(path, MAX_MAILBOX_BYTES))
        except FileNotFoundError:
            return state
        # RecursionError: nested a few thousand deep; escaping, it crashed every start.
        except (OSError, ValueError, RecursionError) as error:
            log.warning("digitalocean: ignoring unreadable %s (%s); starting afresh", path, error)
            return state
        if not isinstance(payload, dict):
            log.warning("digitalocean: ignoring %s: not a JSON object", path)
            return state
        raised = payload.get("raised")
        if isinstance(raised, list):
            state.raised = [item for item in raised if isinstance(item, str)][-KEEP_RAISED:]
        if payload.get("mailbox") == mailbox:
            validity, last = payload.get("uidvalidity"), payload.get("last_uid")
            if isinstance(validity, int) and isinstance(last, int) and last >= 0:
                state.uidvalidity, state.last_uid = validity, last
                state.ahead = _after(payload.get("ahead"), last, state.raised)
                state.replaced = _after(payload.get("replaced"), last, state.raised)
        return state

    def begin(self, uidvalidity: int, uidnext: int | None = None) -> int:
        """Start reading a mailbox with this UIDVALIDITY (and, when the server said it, the
        UID of its next mail); returns the last UID handled."""
        if uidvalidity == self.uidvalidity and uidnext is not None and uidnext <= self.last_uid:
            # A mailbox restored from a backup, or a UID list rebuilt keeping UIDVALIDITY:
            # new mail got UIDs at or below the last handled, and was skipped without a word.
            # The notice ids kept stop what was raised from being raised again.
            log.warning(
                "digitalocean: the mailbox's UIDs went back (next UID %d, last handled %d) "
                "without a new UIDVALIDITY; reading it afresh",
                uidnext,
                self.last_uid,
            )
            self.last_uid = 0
            self.save()
        if uidvalidity != self.uidvalidity:
            if self.uidvalidity is not None:
                log.info(
                    "digitalocean: mailbox UIDVALIDITY changed (%s -> %s); reading it afresh",
                    self.uidvalidity,
                    uidvalidity,
                )
            self.uidvalidity, self.last_uid = uidvalidity, 0
            self.ahead, self.replaced = {}, {}
            self.save()
        return self.last_uid

    def was_raised(self, report_id: str) -> bool:
        return report_id in self.raised

    def raised_after(self, report_id: str, uid: int) -> bool:
        """True when this reclaim was raised ahead of the pass from a mail newer than `uid`."""
        return self.ahead.get(report_id, 0) > uid

    def raised_ahead(self, uid: int, report_id: str) -> None:
        """A reclaim raised from mail UID `uid`, newer than the pass still going: recorded
        (and written at once) without moving last_uid, so that no mail of the pass is
        skipped, and so that reading that mail in its place raises nothing again."""
        if report_id not in self.raised:
            self.raised = [*self.raised, report_id][-KEEP_RAISED:]
        self.ahead[report_id] = uid
        self.save()

    def replaced_ahead(self, uid: int, applied: str) -> None:
        """A cancellation or new time applied (as `applied`) from mail UID `uid`, newer than
        the pass still going: recorded and written at once, as `raised_ahead`."""
        if applied not in self.raised:
            self.raised = [*self.raised, applied][-KEEP_RAISED:]
        self.replaced[applied] = uid
        self.save()

    def superseded(self, uid: int) -> int | None:
        """The UID of the newest cancellation or new time applied ahead of the pass from mail
        newer than `uid`, which takes the place of what mail `uid` says; else None."""
        newer = [at for at in self.replaced.values() if at > uid]
        return max(newer) if newer else None

    def handled(self, uid: int, raised: str | None = None) -> None:
        self.last_uid = max(self.last_uid, uid)
        if self.ahead:
            self.ahead = {key: at for key, at in self.ahead.items() if at > self.last_uid}
        if self.replaced:
            self.replaced = {key: at for key, at in self.replaced.items() if at > self.last_uid}
        if raised is not None and raised not in self.raised:
            self.raised = [*self.raised, raised][-KEEP_RAISED:]
        # A notice or a cancellation applied is written at once: read again, it is raised
        # again (or withdraws a later reclaim). Others wait: see SAVE_EVERY.
        if raised is not None or time.monotonic() - self._saved_at >= SAVE_EVERY:
            self.save()
        else:
            self.unsaved = True

    def as_json(self) -> dict[str, Any]:
        raised = set(self.raised)
        return {
            "mailbox": self.mailbox,
            "uidvalidity": self.uidvalidity,
            "last_uid": self.last_uid,
            "raised": self.raised,
            # As `load` reads them back (`_after`): an id no longer in `raised` is dropped
            # there, and written it would only grow the file past MAX_MAILBOX_BYTES.
            "ahead": {key: uid for key, uid in self.ahead.items() if key in raised},
            "replaced": {key: uid for key, uid in self.replaced.items() if key in raised},
        }

    def save(self) -> None:
        text = json.dumps(self.as_json(), indent=1) + "\n"
        self.unsaved = not write_or_report(self.path, text, self.health)
        if not self.unsaved:
            self._saved_at = time.monotonic()


def _after(value: object, last_uid: int, raised: list[str]) -> dict[str, int]:
    """An "ahead" or "replaced" map read from the file: the entries of ids raised whose UID
    is still above the last handled; anything else in it is dropped."""
    if not isinstance(value, dict):
        return {}
    return {
        key: uid
        for key, uid in value.items()
        if isinstance(uid, int) and not isinstance(uid, bool) and uid > last_uid and key in raised
    }


class ActiveReclaims:
    """The reclaim notices raised and not yet past their deadline, kept across agent restarts.

    A mail is handled once, so after a restart nothing would raise its notice again: the
    watcher re-emits these at start instead (the agent's board then escalates or not as the
    deadline says), and a client that joins after the restart still hears of the reclaim.

    Each is saved with the kernel's boot id and the droplet's id. A droplet made from a
    snapshot of a reclaimed one carries its state directory: one saved in another boot
    stands again only for the droplet it was raised for (`of_another_boot`), as after a
    reboot of that droplet, once `droplet_id` is known. An older agent's file has neither
    key, and drops them from a newer one's (`saved_report`).
    """

    def __init__(self, path: Path, health: PollHealth | None = None) -> None:
        self.path = path
        self.health = health
        self.unsaved: dict[str, Report] = {}  # added, not yet written
        self.removed: set[str] = set()  # withdrawn, not yet written
        self.boot_id = boot_id()
        # This droplet's id once known (`identified`; None when metadata does not say):
        # reclaims saved for another droplet are not this one's.
        self.identified = False
        self.droplet_id: str | None = None

    def _read(self) -> list[tuple[Report, dict[str, Any]]]:
        """Each report in the file, with the item it was read from."""
        try:
            payload = json.loads(read_small(self.path, MAX_ACTIVE_BYTES))
        except FileNotFoundError:
            return []
        except (OSError, ValueError, RecursionError) as error:  # as SeenMail.load
            log.warning("digitalocean: ignoring unreadable %s (%s)", self.path, error)
            return []
        if not isinstance(payload, list):
            log.warning("digitalocean: ignoring %s: not a JSON list", self.path)
            return []
        reports = []
        for item in payload:
            # One report that cannot be read costs only itself: the others' mails are marked
            # handled, and nothing would raise their reclaims again.
            try:
                reports.append((saved_report(item), item if isinstance(item, dict) else {}))
            except ValidationError as error:
                log.warning(
                    "digitalocean: ignoring a reclaim in %s (%s)",
                    self.path,
                    error.errors()[0]["msg"],
                )
        return reports

    def _another_droplet_s(self, item: dict[str, Any]) -> bool:
        saved_for = item.get("droplet")
        return (
            self.droplet_id is not None
            and isinstance(saved_for, str)
            and saved_for != self.droplet_id
        )

    def _unconfirmed(self, item: dict[str, Any]) -> bool:
        """Saved in another boot for a droplet named, while this droplet is not known yet."""
        saved_in = item.get("boot_id")
        return (
            not self.identified
            and isinstance(item.get("droplet"), str)
            and isinstance(saved_in, str)
            and self.boot_id is not None
            and saved_in != self.boot_id
        )

    def load(self, now: datetime) -> list[Report]:
        """The reclaims saved that stand for this droplet: not past their deadline, and not
        saved for another droplet. Before this droplet is known, not those of another boot
        saved for a droplet named (see `of_another_boot`)."""
        return [
            r
            for r, item in self._read()
            if standing(r, now)
            and not self._another_droplet_s(item)
            and not self._unconfirmed(item)
        ]

    def of_another_boot(self, now: datetime) -> list[tuple[Report, str]]:
        """The reclaims saved in another boot for a droplet named, with that droplet's id:
        each stands again once this droplet is known to be that one (a droplet made from a
        snapshot carries the state directory of the reclaimed one)."""
        return [
            (r, item["droplet"])
            for r, item in self._read()
            if standing(r, now) and self._unconfirmed(item)
        ]

    def current(self, now: datetime) -> list[Report]:
        """The reclaims that stand: written or not, not withdrawn, not past their deadline
        (`standing`)."""
        written = [r for r in self.load(now) if r.id not in self.unsaved]
        kept = written + list(self.unsaved.values())
        return [r for r in kept if r.id not in self.removed and standing(r, now)]

    def remove(self, report_ids: list[str], now: datetime) -> None:
        for report_id in report_ids:
            self.unsaved.pop(report_id, None)
            self.removed.add(report_id)
        self.save(now)

    def add(self, report: Report, now: datetime) -> None:
        self.unsaved[report.id] = report
        self.save(now)

    def save(self, now: datetime) -> None:
        """Write the reclaims added and not yet written, if any; a failure is reported and
        the next call tries again."""
        if not self.unsaved and not self.removed:
            return
        # Every reclaim standing is this droplet's, in this boot.
        mine = {"boot_id": self.boot_id, "droplet": self.droplet_id}
        payload = [{**json.loads(r.model_dump_json()), **mine} for r in self.current(now)]
        if write_or_report(self.path, json.dumps(payload, indent=1) + "\n", self.health):
            self.unsaved.clear()
            self.removed.clear()


__all__ = [
    "ACTIVE_FILE",
    "MAX_ACTIVE_BYTES",
    "MAX_MAILBOX_BYTES",
    "STATE_FILE",
    "ActiveReclaims",
    "SeenMail",
]
