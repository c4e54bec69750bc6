"""Local triggers a person can pull: a flag file that raises a drain.

The file (default `checkpoint-now` in the runtime directory) raises a drain notice when it
appears. It is removed once handled, that is once every client that received the notice has
acked its flush; until then the notice stays active, so a client that joins late still gets
it. Manual notices from the control socket are the agent's own (`forewarn notify`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import ClassVar

from forewarn.protocol.timefmt import format_time, parse_deadline, utcnow
from forewarn.providers.report import Report

from ..base import Emit, WatcherContext
from .settings import Settings

log = logging.getLogger("forewarn.providers.local")

FLAG_NAME = "checkpoint-now"


def flag_report(path: Path, content: str, mtime_ns: int) -> Report:
    """The drain a flag file stands for. Its content may hold a deadline (RFC 3339 or a
    duration such as `15m`); anything else is kept as a note."""
    text = content.strip()
    deadline = None
    if text:
        try:
            deadline = parse_deadline(text.splitlines()[0])
        except ValueError:
            deadline = None
    # The file's mtime is when someone raised the notice: as `notice_time` it lets the
    # metrics measure how long the agent took to see it.
    created = datetime.fromtimestamp(mtime_ns / 1e9, timezone.utc)
    detail: dict[str, object] = {"path": str(path), "notice_time": format_time(created)}
    if text:
        detail["content"] = text[:500]
    return Report(
        id=f"local/flag/{mtime_ns:x}",
        action="drain",
        reason="manual",
        provider="local",
        deadline=deadline,
        noticed_at=utcnow(),
        detail=detail,
    )


class LocalWatcher:
    name: ClassVar[str] = "local"

    def __init__(self, flag_file: Path, interval: float, context: WatcherContext) -> None:
        self.flag_file = flag_file
        self.interval = interval
        self.context = context
        self.current: Report | None = None
        self._emit: Emit | None = None

    async def detect(self) -> bool:
        return True

    async def watch(self, emit: Emit) -> None:
        self._emit = emit
        while True:
            self.poll_once(emit)
            await asyncio.sleep(self.interval)

    def poll_once(self, emit: Emit) -> None:
        try:
            stat = os.stat(self.flag_file)
        except FileNotFoundError:
            if self.current is not None:
                # Removed by hand before anyone flushed: withdraw the notice.
                emit(self.current.model_copy(update={"action": "clear"}))
                self.current = None
            self.context.health.success()
            return
        except OSError as error:
            self.context.health.error("stat", f"{self.flag_file}: {error}")
            return
        if self.current is None or self.current.id != f"local/flag/{stat.st_mtime_ns:x}":
            try:
                content = self.flag_file.read_text(errors="replace")[:4096]
            except OSError:
                content = ""
            self.current = flag_report(self.flag_file, content, stat.st_mtime_ns)
            log.info("flag file %s found: drain %s", self.flag_file, self.current.id)
            emit(self.current)
        self.context.health.success()

    def forget(self, notice_id: str) -> None:
        """The agent retired the flag's notice (past its end): if the file is still there the
        next look raises it again, with a fresh lifetime."""
        if self.current is not None and notice_id == self.current.id:
            self.current = None

    def flushed(self, notice_id: str) -> None:
        """Every client flushed for the flag's notice: the flag is handled, remove it."""
        if self.current is None or notice_id != self.current.id:
            return
        try:
            self.flag_file.unlink()
        except FileNotFoundError:
            pass
        except OSError as error:
            log.error("cannot remove flag file %s: %s", self.flag_file, error)
            return
        log.info("flag file %s handled and removed", self.flag_file)
        if self._emit is not None:
            self._emit(self.current.model_copy(update={"action": "clear"}))
        self.current = None


def build(settings: Settings, context: WatcherContext) -> LocalWatcher:
    flag = settings.flag_file or context.runtime_dir / FLAG_NAME
    return LocalWatcher(Path(flag), settings.flag_interval, context)


__all__ = ["FLAG_NAME", "LocalWatcher", "build", "flag_report"]
