"""Which scheduled events rebooted or stopped the instance before this boot (`aws-boot.json`).

IMDS lists a scheduled reboot or stop `active` for a while after it happened: there is
latency between the event being completed and its state flipping (aws-node-termination-handler
#75, which ignores the event after a reboot for that reason). Read afresh after the reboot,
it was an event past its NotBefore: a terminate, and the job resumed after the reboot exited
at once, at each restart, until IMDS marked it completed or its window ended.

So the watcher keeps, in the state directory, the boot it runs in and the boot-ending events
(`BOOT_ENDING_CODES`) it published in it, each with the NotBefore IMDS listed. In the first
answer after the instance booted again, such an event of the boot before, still listed with
that NotBefore and due before this boot began, is the one that ended that boot: it is not
published while it stays listed unchanged. One due after this boot began (the instance
restarted for another cause before the event) or rescheduled since is published as usual, as
is every event the watcher had not published before the reboot. Where the boot id cannot be
read (a container without /proc/sys/kernel/random/boot_id), the boot time from the clock
since boot tells the boots apart; without either, or a state directory, nothing is held back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from forewarn.providers.report import Report

from ..bootfile import BootFile, BootLists
from ..health import PollHealth

log = logging.getLogger("forewarn.providers.aws")

BOOT_FILE = "aws-boot.json"
# Codes whose event reboots or stops the instance (a retirement stops an EBS-backed one):
# after it, the instance runs in a new boot. A system-maintenance leaves it running.
BOOT_ENDING_CODES = frozenset(
    {"instance-reboot", "system-reboot", "instance-stop", "instance-retirement"}
)
# IMDS lists a handful of events; anything past this is not a list of ours.
MAX_EVENTS = 64


def _events(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    pairs = [(k, v) for k, v in value.items() if isinstance(k, str) and isinstance(v, str)]
    return dict(pairs[:MAX_EVENTS])


def _not_before(report: Report) -> str | None:
    value = report.detail.get("NotBefore")
    return value if isinstance(value, str) else None


def _boot_ending(report: Report) -> bool:
    return report.action != "clear" and report.detail.get("Code") in BOOT_ENDING_CODES


class RebootRecord(BootLists[dict[str, str]]):
    """The boot-ending scheduled events published in this boot, and those that ended the boot
    before, each by notice id with the NotBefore IMDS listed."""

    def __init__(
        self,
        path: Path | None,
        boot_id: str | None,
        booted: datetime | None,
        health: PollHealth | None = None,
    ) -> None:
        # Without a boot id the boot time tells the boots apart (`boot.same_boot`).
        super().__init__(BootFile(path, "aws", boot_id, booted, health), dict)
        self.booted = booted
        # Published in the boot before this one, until the first answer of this boot says
        # which of them ended it.
        self.before: dict[str, str] = {}
        saved = self._read_lists(_events)
        if saved is None:
            return
        seen, ended, same, _payload = saved
        if same:
            self.seen, self.ended = seen, ended
        elif same is not None and booted is not None:
            self.before = {**seen, **ended}

    def held_back(self, reports: list[Report]) -> list[Report]:
        """`reports` (what IMDS lists now) without the events that ended an earlier boot."""
        listed = {report.id: report for report in reports if _boot_ending(report)}
        before, self.before = self.before, {}
        for notice_id, not_before in before.items():
            report = listed.get(notice_id)
            if report is None or _not_before(report) != not_before:
                continue  # gone, or rescheduled since: a reboot still to come
            deadline, booted = report.deadline, self.booted
            if isinstance(deadline, datetime) and booted is not None and deadline <= booted:
                self.ended[notice_id] = not_before
                log.warning(
                    "aws: scheduled event %s (%s) was due before this boot began and was "
                    "published in the boot before: it is what ended that boot; not published "
                    "while IMDS lists it unchanged",
                    report.detail.get("EventId", notice_id),
                    report.detail.get("Code"),
                )
        still = {
            notice_id: not_before
            for notice_id, not_before in self.ended.items()
            if notice_id in listed and _not_before(listed[notice_id]) == not_before
        }
        if still != self.ended or before:
            self._unsaved = True
        self.ended = still
        return [report for report in reports if report.id not in still]

    def published(self, reports: Iterable[Report]) -> None:
        """The scheduled events published now: the boot-ending ones are what the next boot
        checks."""
        seen = {
            report.id: not_before
            for report in reports
            if _boot_ending(report) and (not_before := _not_before(report)) is not None
        }
        self._published(seen)

    def _save(self) -> None:
        self._unsaved = not self.file.write(
            dict(list(self.seen.items())[:MAX_EVENTS]), dict(list(self.ended.items())[:MAX_EVENTS])
        )


__all__ = ["BOOT_ENDING_CODES", "BOOT_FILE", "RebootRecord"]
