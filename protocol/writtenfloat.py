"""Numbers read from a document (TOML, JSON) that keep their text when they overflow.

`1e400` is a valid float in TOML and JSON, and both readers make it infinity: a refusal of it
then said "got inf", naming no value anyone wrote. Read through `written_float`, such a number
is still infinity to every comparison, but its repr is the text as written.
"""

from __future__ import annotations

import math

# How TOML and JSON write infinity and not-a-number themselves: those are what was written.
_NON_FINITE_WORDS = frozenset({"inf", "nan", "infinity"})


class WrittenFloat(float):
    """A float that overflowed as it was read (`1e400`): infinity, shown as written."""

    written: str

    def __new__(cls, text: str) -> WrittenFloat:
        number = super().__new__(cls, text)
        number.written = text
        return number

    def __repr__(self) -> str:
        return self.written

    __str__ = __repr__


def written_float(text: str) -> float:
    """`float(text)`, as `parse_float` of tomllib and json: a `WrittenFloat` when a number
    written in digits overflowed, a plain float otherwise (`inf` and `nan` themselves too)."""
    number = float(text)
    if math.isfinite(number) or text.strip().lstrip("+-").lower() in _NON_FINITE_WORDS:
        return number
    return WrittenFloat(text)


__all__ = ["WrittenFloat", "written_float"]
