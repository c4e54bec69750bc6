"""A received text field made safe to print on one log line.

A notice's `id`, `action`, `reason`, `provider` and times are any JSON string to a
subscriber: the agent sends plain ones, but a publisher that is not the agent (a test rig, a
bridge, a bug) may put a newline or a terminal's escape sequence in one, which split the
line a job or `forewarn watch` logged, or acted on the operator's terminal. Standard library
only: the client library imports it.
"""

from __future__ import annotations

import reprlib
from typing import Any

# Far above any field the agent sends (an id of a flag file's path is under 300): a line
# stays a line a person reads, whatever a peer sends.
FIELD_CHARS = 300


def one_line(text: str, limit: int = FIELD_CHARS) -> str:
    """`text` with each character that is not printable (line breaks, tabs, escapes, U+007F,
    bidi controls) written as `\\uXXXX`, cut to `limit` characters with "..." at the end."""
    shown = "".join(char if char.isprintable() else f"\\u{ord(char):04x}" for char in text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


# What a refusal quotes of the value it names (`got ...`): enough to recognise it.
QUOTED_CHARS = 120
_QUOTE = reprlib.Repr()
_QUOTE.maxstring = _QUOTE.maxother = 60
_QUOTE.maxlist = _QUOTE.maxdict = 4
_QUOTE.maxlevel = 2


def quoted(value: Any, limit: int = QUOTED_CHARS) -> str:
    """`value`'s repr as a refusal quotes it: the start of a long string, list or object
    (reprlib, so a megabyte value is never written out whole), unprintable characters
    escaped, at most `limit` characters. The whole repr (`got {value!r}`) made a provider's
    1 MiB field a 1 MiB warning at every poll."""
    return one_line(_QUOTE.repr(value), limit)


__all__ = ["FIELD_CHARS", "QUOTED_CHARS", "one_line", "quoted"]
