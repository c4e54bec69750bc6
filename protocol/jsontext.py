"""Wire JSON read one way by every reader: an object that names a key twice is refused.

JSON leaves duplicated keys undefined: Python's `json` keeps the last, the C subscriber's
scanner (like many others) the first, so `{"action": "clear", ..., "action": "terminate"}`
was a clear to one subscriber and a terminate to the next. Standard library only.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .errors import ForewarnError


class DuplicateKeyError(ForewarnError, ValueError):
    """A JSON object names one key twice; the text names the key."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`json.loads`'s object_pairs_hook: the object, or DuplicateKeyError naming the key."""
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(f"the key {key!r:.60} appears twice in one object")
            seen.add(key)
    return found


class LongNumberError(ForewarnError, ValueError):
    """A whole number with more digits than Python converts; the text says how many."""


def whole(text: str) -> int:
    """`json.loads`'s parse_int: Python's own refusal of a number past its digit limit said
    "Exceeds the limit (4300 digits) for integer string conversion ...; use
    sys.set_int_max_str_digits() to increase the limit", advice for the agent's process
    given to whoever sent the request, under "request is not JSON" of valid JSON."""
    # Python before 3.10.7 has no limit: any length converts there (0 is no limit).
    limit: int = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    digits = len(text) - text.startswith("-")
    if limit and digits > limit:
        raise LongNumberError(f"a whole number of {digits} digits, more than the {limit} read")
    return int(text)


def loads(payload: str | bytes) -> Any:
    """`json.loads`, refusing an object with a duplicated key (DuplicateKeyError) and a
    whole number past Python's digit limit (LongNumberError), both ValueErrors naming what
    was wrong. Other errors are json.loads's own."""
    return json.loads(payload, object_pairs_hook=unique_keys, parse_int=whole)


__all__ = ["DuplicateKeyError", "LongNumberError", "loads", "unique_keys", "whole"]
