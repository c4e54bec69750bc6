"""The GCP notices in force, kept across agent restarts.

The metadata server gives a notice no id and no start time, so after a restart the watcher
could not tell a notice still in force from a new one: it would mint a new id (clients flush
once more) and a new first-seen time (a maintenance deadline an hour after the restart
instead of the notice). With this file a notice still in force after a restart keeps its id,
first-seen time and deadline; one that ended meanwhile is cleared under its old id.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from forewarn.providers.report import Report

from ..persist import write_atomically

log = logging.getLogger("forewarn.providers.gcp")

ACTIVE_FILE = "gcp-notices.json"


class ActiveNotices:
    """Kind (`preempted`, `maintenance-event`, `upcoming-maintenance`) → the notice in force."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.notices = self._load()

    def _load(self) -> dict[str, Report]:
        if self.path is None:
            return {}
        try:
            payload = json.loads(self.path.read_text())
            return {str(kind): Report.model_validate(item) for kind, item in payload.items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError, AttributeError) as error:
            log.warning("gcp: ignoring unreadable %s (%s)", self.path, error)
            return {}

    def get(self, kind: str) -> Report | None:
        return self.notices.get(kind)

    def keep(self, kind: str, report: Report | None) -> None:
        """Record the notice of `kind` in force (None: none is)."""
        if report is None:
            if self.notices.pop(kind, None) is None:
                return
        else:
            self.notices[kind] = report
        if self.path is not None:
            payload = {
                name: json.loads(item.model_dump_json()) for name, item in self.notices.items()
            }
            write_atomically(self.path, json.dumps(payload, indent=1) + "\n")


__all__ = ["ACTIVE_FILE", "ActiveNotices"]
