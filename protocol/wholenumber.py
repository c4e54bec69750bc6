"""The one argparse `type=` for a whole-number flag (a count, a step, a process or droplet id),
in `protocol` so that the agent's commands and the providers' simulators share it: four copies
of it said the same refusals in four ways.

Standard library only, as the rest of the package."""

from __future__ import annotations

import argparse
import re
import string
import sys
from collections.abc import Callable

from .writtenfloat import written_float

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["number_hint", "toml_number", "whole_number"]

# The shapes of a TOML number (decimal with `_`, a sign, a fraction and an exponent; 0x, 0o,
# 0b; inf and nan): only text of these goes to tomllib, which says whether it is one.
_TOML_NUMBER = re.compile(
    r"[+-]?(?:[0-9][0-9_]*(?:\.[0-9_]+)?(?:[eE][+-]?[0-9_]+)?|inf|nan)|0x[0-9A-Fa-f_]+|0o[0-7_]+|0b[01_]+"
)
# Longer than any number a key takes: tomllib's `int` of thousands of digits is slow.
_LONGEST_NUMBER = 100


def toml_number(text: str) -> int | float | None:
    """The number `text` writes as TOML writes one (`1_000`, `1e7`, `+5`, `0x10`, `inf`),
    without the space around it; None when it is no TOML number. The configuration reads a
    bare number so from every source, the environment and `--set` as the file: a variable's
    `1_000` was refused where the file's was read, and the file's `1e7` read where the
    variable's was refused. A float that overflows (`1e400`) keeps its text
    (`written_float`), as the file's does."""
    written = text.strip(string.whitespace)
    if len(written) > _LONGEST_NUMBER or not _TOML_NUMBER.fullmatch(written):
        return None
    try:
        number = tomllib.loads(f"n = {written}", parse_float=written_float)["n"]
    except tomllib.TOMLDecodeError:
        return None
    return number if isinstance(number, (int, float)) else None


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
                not_whole.format(text=_cut(text), minimum=minimum, maximum=maximum)
                + number_hint(written)
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


def number_hint(written: str) -> str:
    """What to write instead, where the text is a number written another way."""
    if re.fullmatch(r"[+-]?\d+", written) and not written.isascii():
        return " (write it in the digits 0-9)"
    if re.fullmatch(r"[+-]?[0-9]{1,3}(,[0-9]{3})+", written):
        return " (write it without the commas)"
    if re.fullmatch(r"[+-]?[0-9.]+[eE][+-]?[0-9]+|[+-]?[0-9]+\.[0-9]*", written):
        return " (a whole number in digits, such as 1000)"
    return ""
