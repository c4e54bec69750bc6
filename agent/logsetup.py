"""Logging: stdlib logging, one line per event, as text for people or JSON for machines."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from datetime import datetime, timezone

from forewarn.protocol.timefmt import format_time

# Attributes every LogRecord has; anything else on a record came from `extra=` and is kept.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
# An extra field whose name says it holds a secret is never written out, whoever passed it.
_SECRET = re.compile(r"token|secret|passw|credential|authorization|api_?key|cookie", re.I)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": format_time(datetime.fromtimestamp(record.created, timezone.utc)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = "[redacted]" if _SECRET.search(key) else value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        text = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        # UTC, as the deadlines on the same lines, `status` and the JSON form: local time
        # without a zone put a machine's lines hours away from the times they mention.
        text.converter = time.gmtime
        handler.setFormatter(text)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request at INFO: at a poll every half second that is noise.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)


__all__ = ["JsonFormatter", "setup_logging"]
