"""A one-line progress bar for commands that move data: drawn on a terminal, silent otherwise
(a pipe, a file, a CI log get nothing, so scripts read only the command's own output)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import TextIO

_WIDTH = 24
_REDRAW_SECONDS = 0.1
# The bar whose line each stream's cursor is on (drawn, not yet ended), by stream: a line said
# meanwhile (`say_line`) ends it first. One lock for drawing and saying: a request watch says
# its line from its own thread while the download's threads draw.
_LOCK = threading.Lock()
_SHOWN: dict[int, ProgressBar] = {}


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
        self._text = ""  # the bar as last drawn, drawn again below a line said under it

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._drawn < _REDRAW_SECONDS and done < self.total:
            return
        share = min(done / self.total, 1.0) if self.total else 1.0
        filled = round(share * _WIDTH)
        bar = "#" * filled + "-" * (_WIDTH - filled)
        with _LOCK:
            self._drawn = now
            self._text = f"\r{self.label} [{bar}] {share:4.0%} {_mib(done)} of {_mib(self.total)}"
            self.stream.write(self._text)
            self.stream.flush()
            self._visible = True
            _SHOWN[id(self.stream)] = self

    def close(self) -> None:
        with _LOCK:
            if self._visible:
                self.stream.write("\n")
                self.stream.flush()
                self._visible = False
            if _SHOWN.get(id(self.stream)) is self:
                del _SHOWN[id(self.stream)]


def say_line(line: str, stream: TextIO | None = None) -> None:
    """Write `line` to `stream` (stderr) on a line of its own: a bar drawn there ends its
    line first, and is drawn again below it at once (a copy stalled on a request that does
    not answer moves no bytes, so its next update may be minutes away). Written after the
    bar, a wait line ran into it (`... 1.0 MiB of 4.0 MiBforewarn: checkpoint: waiting ...`)."""
    stream = stream if stream is not None else sys.stderr
    with _LOCK:
        bar = _SHOWN.get(id(stream))
        shown = bar is not None and bar._visible
        if shown:
            stream.write("\n")
        stream.write(line + "\n")
        if bar is not None and shown:
            stream.write(bar._text)
        stream.flush()


class LineHandler(logging.Handler):
    """Log records as `say_line` lines on stderr (as read when each is written, as logging's
    last-resort handler does): a command's WARNING from the store while a bar is drawn ran
    on after the bar's unended line (`... 1.0 MiB of 2.0 MiBforewarn: checkpoint: ...`)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            say_line(self.format(record))
        except Exception:
            self.handleError(record)
