"""Wire JSON read one way by every reader: an object that names a key twice is refused.

JSON leaves duplicated keys undefined: Python's `json` keeps the last, the C subscriber's
scanner (like many others) the first, so `{"action": "clear", ..., "action": "terminate"}`
was a clear to one subscriber and a terminate to the next. Standard library only.
"""

from __future__ import annotations

import json
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


def loads(payload: str | bytes) -> Any:
    """`json.loads`, refusing an object with a duplicated key (DuplicateKeyError, a
    ValueError). Other errors are json.loads's own."""
    return json.loads(payload, object_pairs_hook=unique_keys)


__all__ = ["DuplicateKeyError", "loads", "unique_keys"]
