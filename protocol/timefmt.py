"""Time on the wire: RFC 3339 in UTC, and the durations people type (`90s`, `15m`, `1h30m`).

Standard library only, so the in-process client can use it without pydantic.
"""

from __future__ import annotations

import itertools
import math
import re
from datetime import datetime, timedelta, timezone

from .errors import UsageError
from .oneline import quoted
from .wholenumber import toml_number
from .writtenfloat import WrittenFloat


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with a `Z`, milliseconds only when they are not zero.

    Written out, not with strftime: glibc's `%Y` gives year 1 as `1`, not `0001`, and a
    provider's zero time (Go's 0001-01-01T00:00:00Z) went out as a time no client parses."""
    moment = moment.astimezone(timezone.utc)
    text = (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
        f"T{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
    )
    # The whole milliseconds decide, not the microseconds: 40.000345 went out as ".000Z" and,
    # read back from the agent's state after a restart, as "Z", so the same notice's body
    # differed before and after.
    if millis := moment.microsecond // 1000:
        return f"{text}.{millis:03d}Z"
    return f"{text}Z"


# ASCII digits only, as durations and whole numbers read them: `\d` took Arabic-Indic and
# full-width ones, so a flag file's or a control request's deadline in them was read as a time
# while a duration in the same digits was refused; and the C subscriber (as RFC 3339) reads
# none of them.
_RFC3339 = re.compile(
    r"^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?"
    r"([Zz]|[+-][0-9]{2}:?[0-9]{2})\Z"
)


def parse_time(text: str) -> datetime:
    """Parse RFC 3339 (with `Z` or an offset) on every Python from 3.10.

    `datetime.fromisoformat` accepts a trailing `Z` only from 3.11, so it cannot be used.
    Raises ValueError naming the text when it is not a time.
    """
    match = _RFC3339.match(text.strip())
    if not match and _odd_digits(text):
        raise ValueError(
            f"not an RFC 3339 time: {quoted(text)} has digits other than 0-9; "
            "write it in the digits 0-9"
        )
    if not match:
        raise ValueError(f"not an RFC 3339 time: {quoted(text)}")
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    fraction = match.group(7)
    micro = int((fraction[1:] + "000000")[:6]) if fraction else 0
    zone = match.group(8)
    try:
        if zone in ("Z", "z"):
            tz = timezone.utc
        else:
            sign = 1 if zone[0] == "+" else -1
            digits = zone[1:].replace(":", "")
            hours, minutes = int(digits[:2]), int(digits[2:])
            # RFC 3339's offset is hours 00-23 and minutes 00-59: `+01:75` was read as
            # +02:15, a deadline 75 minutes off what anyone could have meant, and `+25:00`
            # was refused in timedelta's repr.
            if hours > 23 or minutes > 59:
                raise ValueError(f"its UTC offset {zone} is not one: hours 00-23, minutes 00-59")
            tz = timezone(sign * timedelta(hours=hours, minutes=minutes))
        return civil_time(year, month, day, hour, minute, second, micro, tz).astimezone(
            timezone.utc
        )
    except (ValueError, OverflowError) as error:
        # OverflowError: a valid date whose UTC form falls outside year 1..9999.
        raise ValueError(f"not an RFC 3339 time: {quoted(text)} ({error})") from None


def civil_time(
    year: int,
    month: int,
    day: int,
    hour: int,
    minute: int,
    second: int,
    micro: int,
    tz: timezone,
) -> datetime:
    """The time these fields name, a leap second (second 60) included: `datetime` has no
    second 60, so `23:59:60` was refused by every reader and an AWS spot notice at one went
    out without a deadline. It is read as the last instant `datetime` holds before it (its
    fraction dropped): never later than the real moment, so no job is told it has more time
    than it has. ValueError for any other field out of range."""
    if second == 60:
        return datetime(year, month, day, hour, minute, 59, 999999, tzinfo=tz)
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)


# Up to this many seconds a time left or ago is shown in seconds: a deadline near enough to act
# on is read to the second. Past it, seconds alone (`in 25939800s`) were read by no one.
NEAR_SECONDS = 600.0
# A year here is 365 days: the absolute time is shown beside the span wherever it matters.
_SPAN_UNITS = (("y", 365 * 86400), ("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def span_text(seconds: float) -> str:
    """`seconds` (0 or more) as an operator reads a time left or ago: whole seconds below
    NEAR_SECONDS (`42s`, rounded, as before), past that its largest unit and the next one
    (`10m`, `59m 59s`, `3h 12m`, `300d 5h`, `3y 25d`), each rounded down, so that a deadline is
    never shown further than it is; a next unit of 0 is left out (`2h`)."""
    if not math.isfinite(seconds) or seconds < NEAR_SECONDS:
        return f"{seconds:.0f}s"
    whole = math.floor(seconds)
    for (name, size), (smaller, smaller_size) in itertools.pairwise(_SPAN_UNITS):
        if whole >= size:
            rest = whole % size // smaller_size
            return f"{whole // size}{name}" + (f" {rest}{smaller}" if rest else "")
    return f"{whole}s"  # not reached: NEAR_SECONDS is past a minute


# `.5` and `5.` as well as `0.5`: the configuration once read plain seconds with float(),
# which takes both, so a flag refused what the same key took in TOML or the environment.
# ASCII digits only: `\d` took Arabic-Indic and full-width ones, `--timeout ١٢` waiting 12 s.
_NUMBER = r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_PART = re.compile(r"\s*" + _NUMBER + r"\s*([A-Za-z]*)\s*")
# The same with `_` between digits, as TOML and Python group them (`1_000ms`): how a person
# types a duration (`typed_duration`, a config key), not how a peer sends one.
_DIGITS = r"[0-9](?:_?[0-9])*"
_GROUPED = rf"({_DIGITS}(?:\.(?:{_DIGITS})?)?|\.{_DIGITS})"
_GROUPED_PART = re.compile(r"\s*" + _GROUPED + r"\s*([A-Za-z]*)\s*")
_UNITS: dict[str, tuple[str, float]] = {
    "ms": ("ms", 0.001),
    **dict.fromkeys(["s", "sec", "secs", "second", "seconds"], ("s", 1.0)),
    **dict.fromkeys(["m", "min", "mins", "minute", "minutes"], ("m", 60.0)),
    **dict.fromkeys(["h", "hr", "hrs", "hour", "hours"], ("h", 3600.0)),
    **dict.fromkeys(["d", "day", "days"], ("d", 86400.0)),
    # A week is always 7 days (`--mtbi 1w`, an interruption a week, was refused); a month
    # (28 to 31 days) and a year (365 or 366) are no unit.
    **dict.fromkeys(["w", "wk", "wks", "week", "weeks"], ("w", 604800.0)),
}
_ORDER = ["w", "d", "h", "m", "s", "ms"]
_EXAMPLES = "use e.g. 90s, 15m, 2h, 1h30m"


def time_or_none(value: object) -> datetime | None:
    """`value` read as an RFC 3339 time, or None when it is not one: a field a peer may send
    in any shape (a heartbeat's `sent_at`), where no time is an answer, not an error."""
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def parse_duration(text: str, *, grouped: bool = False) -> float:
    """Seconds in `90`, `1.5`, `.5`, `90s`, `15m`, `2h`, `1d`, `1w`, `250ms`, the unit words
    (`10sec`, `10 min`, `2 hours`, `1 day`, `2 weeks`) in any case (`2 Hours`, `90S`; a capital
    `M` alone, a month elsewhere, is refused) and compounds of them from the largest unit down
    (`1h30m`, `2h 30m`, `1m30s`); ValueError naming what is wrong otherwise (a sign, an
    exponent, `inf` or `nan` included, and a number of seconds too large for a float:
    `TooLargeError`). With `grouped`, a number takes `_` between digits (`1_000ms`), as a
    person may type it (`typed_duration`)."""
    seconds = _duration_seconds(text, _GROUPED_PART if grouped else _PART)
    if not math.isfinite(seconds):
        # Hundreds of digits come to infinity: every check after this one then said "got inf",
        # naming no value anyone wrote.
        raise TooLargeError(
            f"too large a duration: {quoted(text)} is more seconds than a number holds"
        )
    return seconds


class TooLargeError(UsageError):
    """A duration written in too many digits to count in seconds (a ValueError too, as every
    other refusal of parse_duration)."""


# A sign before the number, and an exponent after it (`-5`, `+5`, `1e3`): "not a duration (use
# e.g. 90s ...)" and "unknown unit 'e'" did not say which part of the value was refused.
_SIGN = re.compile(r"^\s*[-+]")
_EXPONENT = re.compile(r"[\d.][eE][-+]?\d")
# `1,5m`: a decimal comma, which `forewarn plan` reads; the agent's durations (its flags,
# TOML, whose numbers take a point, the environment, the wire) take the point only.
_DECIMAL_COMMA = re.compile(r"[0-9],[0-9]")


def _odd_digits(text: str) -> bool:
    """Whether `text` has digits other than 0-9 (Arabic-Indic, full-width): no unit reads them."""
    return any(char.isdecimal() and not char.isascii() for char in text)


def _duration_seconds(text: str, part: re.Pattern[str]) -> float:
    if _SIGN.match(text):
        raise ValueError(
            f"not a duration: {quoted(text)} has a sign; a duration is 0 or more, written without "
            f"one ({_EXAMPLES})"
        )
    if _EXPONENT.search(text):
        raise ValueError(
            f"not a duration: {quoted(text)} has an exponent; write the number out, or with a unit "
            f"({_EXAMPLES})"
        )
    if _odd_digits(text):
        raise ValueError(
            f"not a duration: {quoted(text)} has digits other than 0-9; write it in the digits 0-9 "
            f"({_EXAMPLES})"
        )
    if _DECIMAL_COMMA.search(text):
        raise ValueError(
            f"not a duration: {quoted(text)} has a decimal comma; write its decimal mark as a "
            f"point (1.5m), or in a smaller unit (90s) ({_EXAMPLES})"
        )
    parts: list[tuple[float, str]] = []
    position = 0
    while position < len(text) or not parts:
        match = part.match(text, position)
        if not match:
            raise ValueError(f"not a duration ({_EXAMPLES}): {quoted(text)}")
        written = word = match.group(2)
        if word == "M":
            # A month to systemd and ISO 8601 (P1M), a minute as `m`: not guessed at.
            raise ValueError(
                f"not a duration: 'M' in {quoted(text)} is a minute or a month; write m or min "
                "for minutes (a month is no unit here: use d)"
            )
        # In any case, as every other word of the configuration is read: `2 Hours` and
        # `10 Min` were refused as not a duration.
        word = word.lower()
        if word and word not in _UNITS:
            units = "ms, s, sec, m, min, h, hr, hour, d, day, w, week"
            raise ValueError(
                f"not a duration: unknown unit {quoted(written)} in {quoted(text)} (use {units})"
            )
        parts.append((float(match.group(1).replace("_", "")), word))
        position = match.end()
    if len(parts) == 1:
        number, word = parts[0]
        return number * (_UNITS[word][1] if word else 1.0)
    seconds = 0.0
    last = -1
    for number, word in parts:
        # `1m30` could mean 30 seconds or 30 minutes more; `30m1h` is a typo more likely than
        # not: neither is guessed at.
        if not word:
            raise ValueError(
                f"not a duration: every part of {quoted(text)} needs its unit ({_EXAMPLES})"
            )
        unit, per = _UNITS[word]
        if _ORDER.index(unit) <= last:
            raise ValueError(
                f"not a duration: the parts of {quoted(text)} must go from the largest unit down, "
                f"each once ({_EXAMPLES})"
            )
        last = _ORDER.index(unit)
        seconds += number * per
    return seconds


# A date and time as RFC 3339 writes them, offset or not: text that means to be a time.
_TIMELIKE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}")


def parse_deadline(text: str, now: datetime | None = None) -> datetime:
    """A deadline given as an RFC 3339 time or as a duration from now; ValueError saying what
    is wrong otherwise, never OverflowError."""
    try:
        return parse_time(text)
    except ValueError as error:
        if _TIMELIKE.match(text.strip()):
            # A time out of range, or one without its offset, is not 'not a duration'.
            if not _RFC3339.match(text.strip()) and not _odd_digits(text):
                raise ValueError(
                    f"not an RFC 3339 time: {quoted(text)} (it needs seconds and a UTC offset: "
                    "Z, or one such as +01:00)"
                ) from None
            raise error from None
    try:
        seconds = parse_duration(text)
    except TooLargeError:
        raise ValueError(f"{quoted(text)} is past the last time a date can hold") from None
    except ValueError as error:
        if (
            _SIGN.match(text)
            or _EXPONENT.search(text)
            or _odd_digits(text)
            or _DECIMAL_COMMA.search(text)
        ):
            # Said as every duration flag says it: "not an RFC 3339 time or a duration such
            # as 90s" named neither the sign of `+15m` nor the exponent of `1e3`.
            reason = str(error).removeprefix("not a duration: ")
            raise ValueError(f"not an RFC 3339 time or a duration: {reason}") from None
        raise ValueError(
            f"not an RFC 3339 time or a duration such as 90s, 15m or 2h: {quoted(text)}"
        ) from None
    try:
        return (now or utcnow()) + timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"{quoted(text)} is past the last time a date can hold") from None


def typed_duration(text: str) -> float:
    """A duration a person typed (any command's flag): read as a config key of seconds reads
    one, from the file, a variable or `--set`. A bare number is seconds as TOML (and Python)
    write a number (`90`, `1_000`, `1e3`, `+5`, `0x10`), finite and 0 or more; a number with
    a unit takes the digits 0-9, `_` between them and a point (`1_000ms`, `1.5h`, `1h30m`), as
    `parse_duration(grouped=True)`. ValueError naming what is wrong otherwise. The flags kept
    a stricter reading than the keys: `wait --timeout 1_000` and `drill --lead 1e3` were
    refused where `exit_margin` took them."""
    number = toml_number(text)
    if number is None:
        return parse_duration(text, grouped=True)
    if isinstance(number, WrittenFloat):
        # Digits that overflow a float (`1e400`), not the word `inf`.
        raise TooLargeError(
            f"too large a duration: {quoted(text)} is more seconds than a number holds"
        )
    if not math.isfinite(number):
        raise ValueError(f"not a duration: {quoted(text)} is not a number of seconds ({_EXAMPLES})")
    if number < 0:
        raise ValueError(
            f"not a duration: {quoted(text)} is negative; a duration is 0 or more ({_EXAMPLES})"
        )
    return float(number)


def duration_arg(text: str) -> float:
    """An argparse `type=` for durations (`90`, `90s`, `15m`, `2h`): seconds, never negative,
    read as `typed_duration`."""
    import argparse

    try:
        return typed_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def duration_or_as_is(value: object) -> object:
    """Text that is a duration (`2m`, `90s`) as its seconds; anything else as it is, for the
    field's own check to refuse with its own words (a pydantic "before" validator, a
    simulator's notice field)."""
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except ValueError:
            return value
    return value


__all__ = [
    "NEAR_SECONDS",
    "TooLargeError",
    "civil_time",
    "duration_arg",
    "duration_or_as_is",
    "format_time",
    "parse_deadline",
    "parse_duration",
    "parse_time",
    "span_text",
    "time_or_none",
    "typed_duration",
    "utcnow",
]
