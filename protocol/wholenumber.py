"""The one argparse `type=` for a whole-number flag (a count, a step, a process or droplet id),
in `protocol` so that the agent's commands and the providers' simulators share it: four copies
of it said the same refusals in four ways.

Standard library only, as the rest of the package."""

from __future__ import annotations

import argparse
import re
import string
from collections.abc import Callable

__all__ = ["whole_number"]

# ASCII digits with a sign, and `_` between digits as Python writes them (`int` took them):
# `int` also read Arabic-Indic `١٢` as 12 and full-width digits, which nobody types meaning 12.
_WHOLE = re.compile(r"[+-]?[0-9](?:_?[0-9])*")

# More digits than any whole number a flag takes (2**63 has 19): `int` of a longer one is slow
# and past 4300 digits a ValueError of its own, and a message quoting it is no one line.
_MOST_DIGITS = 40
_QUOTED = 40


def whole_number(
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    not_whole: str = "not a whole number: {text!r}",
    below: str = "must be {minimum} or more, got {value}",
    above: str = "must be at most {maximum}, got {value}",
) -> Callable[[str], int]:
    """An argparse `type=` for a whole number from `minimum` to `maximum` (either may be None).
    Each refusal is one of the templates, formatted with `text` (as written, cut to a length
    a line can hold), `value`, `minimum` and `maximum`."""

    def parse(text: str) -> int:
        written = text.strip(string.whitespace)
        if not _WHOLE.fullmatch(written):
            raise argparse.ArgumentTypeError(
                not_whole.format(text=_cut(text), minimum=minimum, maximum=maximum) + _hint(written)
            )
        if len(written) > _MOST_DIGITS:
            # Past any bound a flag has, in either direction: said as that bound, the value
            # cut (`int` of hundreds of digits is slow, and past 4300 a ValueError).
            refusal = below if written.startswith("-") else above
            bound = minimum if written.startswith("-") else maximum
            if bound is None:
                raise argparse.ArgumentTypeError(
                    not_whole.format(text=_cut(text), minimum=minimum, maximum=maximum)
                    + " (too many digits)"
                )
            raise argparse.ArgumentTypeError(
                refusal.format(
                    text=_cut(text), value=_cut(written), minimum=minimum, maximum=maximum
                )
            )
        value = int(written)
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(
                below.format(text=_cut(text), value=value, minimum=minimum, maximum=maximum)
            )
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(
                above.format(text=_cut(text), value=value, minimum=minimum, maximum=maximum)
            )
        return value

    return parse


def _cut(text: str) -> str:
    return text if len(text) <= _QUOTED else text[:_QUOTED] + "..."


def _hint(written: str) -> str:
    """What to write instead, where the text is a number written another way."""
    if re.fullmatch(r"[+-]?\d+", written) and not written.isascii():
        return " (write it in the digits 0-9)"
    if re.fullmatch(r"[+-]?[0-9]{1,3}(,[0-9]{3})+", written):
        return " (write it without the commas)"
    if re.fullmatch(r"[+-]?[0-9.]+[eE][+-]?[0-9]+|[+-]?[0-9]+\.[0-9]*", written):
        return " (a whole number in digits, such as 1000)"
    return ""
