"""The ranges of `forewarn drill local`'s numbers, refused as the flag is read.

Each was taken unbounded: `--steps 100000000000000000000` put the drain at step 2e19, and the
drill ran on at 50 steps a second; `--lead 1e300` a notice deadline past what a date holds. A
drill rehearses one reclaim in minutes: each bound is far past any real rehearsal (a million
steps is 5.6 h at the default step time; the longest lead, 2 h, DigitalOcean's reclaim mail)
and short of what hangs or overflows.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from forewarn.protocol.timefmt import typed_duration
from forewarn.protocol.wholenumber import whole_number

MAX_STEPS = 1_000_000
MAX_STEP_TIME = 10.0
MAX_UPLOAD_DELAY = 3600.0
MAX_DEADLINE = 3600.0
MAX_LEAD = 7200.0
# A seed is a 64-bit number: -5 seeded the same moments as 5 (`random.Random` takes |seed|).
MAX_SEED = 2**63 - 1

__all__ = [
    "MAX_DEADLINE",
    "MAX_LEAD",
    "MAX_SEED",
    "MAX_STEPS",
    "MAX_STEP_TIME",
    "MAX_UPLOAD_DELAY",
    "count_within",
    "seconds_within",
    "written_bound",
]


def written_bound(seconds: float) -> str:
    """A bound as a user writes it: `1h`, `2h`, `10s` (never 3.6e+03)."""
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:g}s"


def count_within(minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse `type=` for a whole number from `minimum` to `maximum`, both named when
    refused."""
    said = "must be from {minimum} to {maximum}, got {value}"
    return whole_number(minimum=minimum, maximum=maximum, below=said, above=said)


def seconds_within(most: float, *, zero: bool) -> Callable[[str], float]:
    """An argparse `type=` for a duration up to `most`: from 0 when `zero`, else more than
    0. The refusal names the range and the value as written."""
    if zero:
        said = f"must be from 0s to {written_bound(most)}"
    else:
        said = f"must be more than 0s and at most {written_bound(most)}"

    def parse(text: str) -> float:
        try:
            seconds = typed_duration(text)
        except ValueError as error:
            # Digits past what a float holds (`1e400`) are past the range too.
            raise argparse.ArgumentTypeError(str(error)) from None
        if seconds > most or (not zero and seconds <= 0):
            raise argparse.ArgumentTypeError(f"{said}, got {text.strip()!r}")
        return seconds

    return parse
