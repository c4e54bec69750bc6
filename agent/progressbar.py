"""A one-line progress bar for commands that move data: drawn on a terminal, silent otherwise
(a pipe, a file, a CI log get nothing, so scripts read only the command's own output)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

_WIDTH = 24
_REDRAW_SECONDS = 0.1


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


class ProgressBar:
    """`update(done)` as bytes move, `close()` at the end; draws on `stream` only when it is
    a terminal, at most ten times a second."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self.label = label
        self.total = max(total, 0)
        self._drawn = 0.0
        self._visible = False

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._drawn < _REDRAW_SECONDS and done < self.total:
            return
        self._drawn = now
        share = min(done / self.total, 1.0) if self.total else 1.0
        filled = round(share * _WIDTH)
        bar = "#" * filled + "-" * (_WIDTH - filled)
        self.stream.write(f"\r{self.label} [{bar}] {share:4.0%} {_mib(done)} of {_mib(self.total)}")
        self.stream.flush()
        self._visible = True

    def close(self) -> None:
        if self._visible:
            self.stream.write("\n")
            self.stream.flush()
            self._visible = False
