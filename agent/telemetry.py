"""Telemetry: one JSON line per notice, escalation, hold, ack and resume, for `forewarn plan`.

The file is `<state_dir>/telemetry.jsonl`. Each line is written by a single `write(2)` on a
descriptor opened with O_APPEND, so a reader (or a second writer) never sees a torn line.
When the file would grow past `max_bytes` it is renamed to `telemetry.jsonl.1` (older ones
shift up to `.3`, the oldest is dropped) and a fresh file is started.

Each line holds `v` (1), `at` (RFC 3339, when the agent wrote it) and `kind`:

- `start` / `stop`: the agent began or ended serving (`providers`, `pid`); they bound the
  observed span.
- `notice` / `escalation`: a published notice (`id`, `seq`, `action`, `reason`, `provider`,
  `deadline`, `noticed_at`, `sent_at`); `escalation` is a drain sent as terminate (its
  deadline within the exit margin); `clients`, the acking clients subscribed then (0: no
  job held it, as on a machine between jobs).
- `hold`: a client that is no subscriber (`forewarn wait --client ID`) held a notice
  (`notice_id`, `client`): a job had it, whatever the notice's `clients` said.
- `ack`: a client flushed (`notice_id`, `client`, `step`, `flush_seconds`, `outcome`; from a
  background save also `stall_seconds` and `durable_seconds`, and for a final save that found
  one in flight `choice` and `note`).
- `resume`: a client restarted from a checkpoint (`notice_id`, `client`, `step`,
  `restore_seconds`, `steps_lost`).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import logging
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from forewarn.protocol.errors import ForewarnError
from forewarn.protocol.timefmt import format_time, parse_time, utcnow

from .observer import Observer
from .protocol import AckRequest, Notice

FILE_NAME = "telemetry.jsonl"
KEEP = 3
FORMAT_VERSION = 1

log = logging.getLogger("forewarn.agent.telemetry")


def telemetry_path(state_dir: Path) -> Path:
    return state_dir / FILE_NAME


def rotated_paths(path: Path, keep: int = KEEP) -> list[Path]:
    """The telemetry files, oldest first: `.3`, `.2`, `.1`, then the live file."""
    return [path.with_name(f"{path.name}.{index}") for index in range(keep, 0, -1)] + [path]


class TelemetryWriter:
    """Appends records as JSON lines, rotating by size. Never raises: a full disk or a
    read-only state directory costs telemetry, not the agent (one log line per failure kind)."""

    def __init__(self, path: Path, max_bytes: int, keep: int = KEEP) -> None:
        if max_bytes <= 0:
            raise ValueError(f"telemetry_max_bytes must be positive (got {max_bytes})")
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self._failed: set[str] = set()
        # Why the last write failed, until one succeeds: a standing condition in status.
        self.problem: str | None = None

    def write(self, kind: str, fields: dict[str, Any]) -> None:
        # JSON has no Infinity or NaN: a non-finite figure is recorded as unknown (null).
        finite = {key: _finite_or_none(value) for key, value in fields.items()}
        record = {"v": FORMAT_VERSION, "at": format_time(utcnow()), "kind": kind, **finite}
        line = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._rotate_if_full(len(line))
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o640)
            try:
                # A write cut short (a full disk, a writer killed) left a line without its
                # end: glued to it, this record would be unreadable too, and so the file.
                # Locked, so that another writer's line in progress is not taken for one.
                with contextlib.suppress(OSError):  # no locks (some NFS): write unlocked
                    fcntl.flock(fd, fcntl.LOCK_EX)
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line
                written = os.write(fd, line)
            finally:
                os.close(fd)
            if written != len(line):
                raise OSError(f"short write ({written} of {len(line)} bytes)")
        except OSError as error:
            self._report(type(error).__name__, error)
            self.problem = f"cannot write {self.path} ({type(error).__name__}: {error})"
            return
        if self.problem is not None:
            log.warning("telemetry: writing %s again", self.path)
            self.problem = None
            self._failed.clear()  # a later failure is news again

    def _rotate_if_full(self, incoming: int) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size == 0 or size + incoming <= self.max_bytes:
            return
        paths = rotated_paths(self.path, self.keep)
        # Oldest first (.2 → .3, .1 → .2, live → .1) so no rename overwrites a kept file.
        for older, newer in itertools.pairwise(paths):
            if newer.exists():
                os.replace(newer, older)

    def _report(self, kind: str, error: OSError) -> None:
        if kind not in self._failed:
            self._failed.add(kind)
            log.warning("telemetry: cannot write %s: %s", self.path, error)


def _finite_or_none(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _notice_fields(notice: Notice) -> dict[str, Any]:
    return notice.model_dump(
        mode="json",
        include={"id", "seq", "action", "reason", "provider", "deadline", "noticed_at", "sent_at"},
    )


class TelemetryObserver(Observer):
    """Feeds the agent's events to a `TelemetryWriter`."""

    def __init__(self, writer: TelemetryWriter) -> None:
        self.writer = writer
        # Acking clients subscribed now: a notice reaching none (a machine between jobs)
        # is not one a job failed to save on, and `forewarn plan` must tell the two apart.
        self.clients = 0

    def on_start(self, providers: list[str]) -> None:
        self.writer.write("start", {"providers": providers, "pid": os.getpid()})

    def on_notice(self, notice: Notice, *, escalated: bool) -> None:
        fields = _notice_fields(notice)
        fields["clients"] = self.clients
        self.writer.write("escalation" if escalated else "notice", fields)

    def on_subscribers(self, count: int) -> None:
        self.clients = count

    def on_hold(self, notice_id: str, client: str) -> None:
        # A shell job holds the notice after its publication (whose `clients` was 0 then):
        # without this record, the plan took a held notice the job never saved on (killed
        # before its ack) for one that reached no job, not one that came too late.
        self.writer.write("hold", {"notice_id": notice_id, "client": client})

    def on_ack(self, ack: AckRequest, notice: Notice | None) -> None:
        if ack.outcome == "resumed":
            self.writer.write(
                "resume",
                {
                    "notice_id": ack.notice_id,
                    "client": ack.client,
                    "step": ack.step,
                    "restore_seconds": ack.restore_seconds,
                    "steps_lost": ack.steps_lost,
                },
            )
            return
        fields: dict[str, Any] = {
            "notice_id": ack.notice_id,
            "client": ack.client,
            "step": ack.step,
            "flush_seconds": ack.flush_seconds,
            "outcome": ack.outcome,
        }
        # Only background saves report these (see AckRequest): `forewarn plan` takes the stall
        # as the tax and the durable time for whether a notice's lead covers the flush.
        for name in ("stall_seconds", "durable_seconds", "choice", "note"):
            value = getattr(ack, name)
            if value is not None:
                fields[name] = value
        self.writer.write("ack", fields)

    def on_stop(self) -> None:
        self.writer.write("stop", {"pid": os.getpid()})

    def conditions(self) -> dict[str, str]:
        problem = self.writer.problem
        return {} if problem is None else {"telemetry": problem}


class TelemetryFormatError(ForewarnError, ValueError):
    """A telemetry file that cannot be read; the text names the file and line."""


class _NonFinite(ForewarnError):
    """Python's json reads Infinity, -Infinity and NaN, which no figure may be."""


def _refuse_constant(name: str) -> Any:
    raise _NonFinite(name)


_TIMES = ("at", "sent_at", "noticed_at", "deadline")
_FIGURES = (
    "flush_seconds",
    "stall_seconds",
    "durable_seconds",
    "restore_seconds",
    "steps_lost",
    "clients",
)


def _bad_field(record: dict[str, Any]) -> str | None:
    """What is wrong with the figures `forewarn plan` reads, or None. The agent writes them
    validated (AckRequest); anything else was edited or written by something else, and read
    as it stands it crashed the plan or was blamed on a flag nobody gave."""
    for name in _TIMES:
        value = record.get(name)
        if value is None and name != "at":
            continue
        try:
            parse_time(value if isinstance(value, str) else "")
        except ValueError:
            return f"{name} is not an RFC 3339 time (got {_shown(value)})"
    for name in _FIGURES:
        value = record.get(name)
        if value is None:
            continue
        # bool is an int to Python, and a huge JSON integer has no float.
        good = isinstance(value, (int, float)) and not isinstance(value, bool)
        try:
            good = good and math.isfinite(float(value)) and value >= 0
        except OverflowError:
            good = False
        if not good:
            return f"{name} is not a number zero or more (got {_shown(value)})"
    return None


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def read_records(
    path: Path, keep: int = KEEP, skipped: list[str] | None = None
) -> Iterator[dict[str, Any]]:
    """Every record of `path` and its rotated predecessors, oldest first.

    A line that is not a JSON object, holds Infinity or NaN, or has a time that is not RFC 3339
    or a figure (seconds, steps lost) that is not a number zero or more raises
    TelemetryFormatError naming file, line and field. An unfinished line (a write cut short by
    a full disk or a killed writer: it does not end its object; or the NUL bytes a machine
    lost mid-append leaves), and an unreadable last line, are skipped: each is named in
    `skipped`, else logged as a warning.
    """
    for file in rotated_paths(path, keep):
        if not file.is_file():
            continue
        with file.open("rb") as handle:
            yield from _file_records(file, handle, skipped)


def _file_records(
    file: Path, handle: BinaryIO, skipped: list[str] | None
) -> Iterator[dict[str, Any]]:
    # Line by line: a whole file read and split at once took ten times its size in memory.
    for number, line in enumerate(handle, start=1):
        last = not line.endswith(b"\n")  # only the end of the file has none
        raw = line.removesuffix(b"\n")
        if not raw.strip():
            continue
        try:
            record = json.loads(raw, parse_constant=_refuse_constant)
        except _NonFinite as constant:
            raise TelemetryFormatError(
                f"{file}:{number}: {constant} is not a finite number"
            ) from None
        except ValueError:
            # The writer's lines are whole objects: one that begins but does not end
            # is what a write cut short leaves. So are NUL bytes, which JSON text never
            # holds: a machine lost mid-append can leave the file's new size without its
            # data (XFS, ext4 with delayed allocation), and the next agent writes after them.
            torn = (raw.lstrip().startswith(b"{") and not raw.rstrip().endswith(b"}")) or (
                b"\0" in raw
            )
            if last or torn:
                why = f"{file}:{number}: an unfinished line (a write cut short) was skipped"
                if skipped is None:
                    log.warning("telemetry: %s", why)
                else:
                    skipped.append(why)
                continue
            raise TelemetryFormatError(f"{file}:{number}: not a JSON line") from None
        if not isinstance(record, dict) or "kind" not in record or "at" not in record:
            raise TelemetryFormatError(f"{file}:{number}: not a telemetry record")
        wrong = _bad_field(record)
        if wrong is not None:
            raise TelemetryFormatError(f"{file}:{number}: {wrong}")
        yield record


__all__ = [
    "FILE_NAME",
    "TelemetryFormatError",
    "TelemetryObserver",
    "TelemetryWriter",
    "read_records",
    "rotated_paths",
    "telemetry_path",
]
