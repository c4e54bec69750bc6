"""`forewarn plan`: how often to checkpoint, and whether spot capacity pays, from flags or
from the agent's telemetry file.

Exit status: 0 with a plan, 2 on bad input (the message names the flag at fault).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from forewarn.clients.overhead import DEFAULT_NO_NOTICE_SHARE, Breakdown
from forewarn.protocol.timefmt import parse_duration
from forewarn.protocol.wholenumber import whole_number

from ..argtypes import path_arg, word_as_written
from ..telemetry import (
    FILE_NAME,
    TelemetryFormatError,
    read_records,
    rotated_paths,
    telemetry_path,
)
from .costs import Costs, costs
from .inputs import (
    DEFAULT_EXIT_MARGIN_SECONDS,
    DRAIN_LEAD_SECONDS,
    NOTICE_ACTIONS,
    SPOT_LEAD_SECONDS,
    PlanError,
    Prices,
    Timing,
    rate_to_mtbi,
)
from .model import (
    DEFAULT_WARN_TAX,
    Intervals,
    checkpoint_tax,
    choose_interval,
    notice,
    notice_worth,
    overhead,
    overhead_without_notice,
    recommended_interval,
    warnings,
)
from .sizes import (
    OPTIMIZERS,
    PRECISIONS,
    SizeEstimate,
    decimal_point,
    parse_bandwidth,
    parse_count,
    parse_size,
)
from .table import seconds_text
from .telemetry import TelemetrySummary, summarize_telemetry

# Field names used by the model, and the flag a user gives them with.
FLAGS = {
    "checkpoint_seconds": "--checkpoint",
    "checkpoint_p95_seconds": "--checkpoint-p95",
    "upload_seconds": "--upload",
    "no_notice_share": "--no-notice-share",
    "max_interval_seconds": "--max-interval",
    "mtbi_seconds": "--mtbi",
    "interruptions_per_day": "--interruptions-per-day",
    "restore_seconds": "--restore",
    "restart_seconds": "--restart",
    "reacquire_seconds": "--reacquire",
    "detection_seconds": "--detection",
    "notice_lead_seconds": "--notice-lead",
    "notice_action": "--notice-action",
    "exit_margin_seconds": "--exit-margin",
    "response_seconds": "--telemetry",
    "steps_per_second": "--steps-per-second",
    "interval": "--interval",
    "tax": "--tax",
    "spot": "--spot-price",
    "on_demand": "--on-demand-price",
    "reserved": "--reserved-price",
    "reserved_utilization": "--reserved-utilization",
    "fallback_share": "--fallback-share",
    "checkpoint_gb": "--checkpoint-gb",
    "storage_gb_month": "--storage-price",
    "keep": "--keep",
    "io_per_gb": "--io-price",
}
PRICE_FLAGS = (
    "spot_price",
    "on_demand_price",
    "reserved_price",
    "storage_price",
    "io_price",
    "fallback_share",
)


# A number written with a comma inside a duration: `1,5h`, `1h 2,5m`. Not a comma after a
# unit, which separates parts (`1h,30m` was read as 1h.30m, 3618 s): refused as it was.
_COMMA_NUMBER = re.compile(r"(?<![A-Za-z])[0-9.]*,[0-9.,]*")


def _duration(text: str) -> float:
    """A duration, its numbers written with a decimal comma too (`1,5h`), as every other
    number of the plan is read (`1,5h` was 'not a duration' where `--tax 3,5%` was 3.5 %).
    The agent's durations (its flags, the config, the wire) take the point only."""
    if text.strip().startswith("-"):
        raise argparse.ArgumentTypeError(f"must not be negative (got {text!r})")
    try:
        pointed = _COMMA_NUMBER.sub(lambda number: decimal_point(number.group()), text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r}: {error}") from None
    try:
        seconds = parse_duration(pointed)
    except ValueError as error:
        # Enough digits to read as infinity, which every figure of the plan would then carry,
        # are refused there too ("too large a duration"). Said of the text as written.
        said = str(error).replace(repr(pointed), repr(text))
        raise argparse.ArgumentTypeError(said) from None
    return seconds


def _interval(text: str) -> float:
    """An interval to evaluate: a duration above 0 (the model's "must be positive (got 0.0)"
    named a value nobody wrote)."""
    seconds = _duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 (got {text!r})")
    return seconds


def _digits_0_to_9(text: str) -> None:
    """float() reads Arabic-Indic `١٢` and full-width digits as 12: a price, share or size in
    them was planned with, though nobody types them meaning 12 (durations refuse them)."""
    if any(char.isdecimal() and not char.isascii() for char in text):
        raise argparse.ArgumentTypeError(
            f"{text!r} has digits other than 0-9; write it in the digits 0-9"
        )


def _number(text: str, *, positive: bool = False) -> float:
    _digits_0_to_9(text)
    try:
        # `0,5` as 0.5 where the comma can be nothing else (a price took `2,50`, the rate
        # `--interruptions-per-day 0,5` was 'not a number'); `1,234` is refused.
        value = float(decimal_point(text))
    except ValueError as error:
        if "," in text and "," in str(error):
            raise argparse.ArgumentTypeError(str(error)) from None
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        # `1e400` is infinity to float(): "must be positive (got '1e400')" named no fault in it.
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    if value < 0 or (positive and value == 0):
        raise argparse.ArgumentTypeError(
            f"must be {'positive' if positive else 'zero or more'} (got {text!r})"
        )
    return value


def _amount(text: str) -> float:
    return _number(text)


# What an unquoted `$` leaves of a price: `$10` is `$1` (empty) and `0`, `$105` is `05`; `$0.35`
# is the shell's own name (`bash`, `-bash`, a script's path) and `.35`.
_CUT_AFTER_DOLLAR = re.compile(r"^0\d+\Z")
_SHELL_NAME_BEFORE = re.compile(r"^(.*[^\d\s.$])\.(\d+)(?:/.*)?\Z")


def _shell_traces(text: str) -> str | None:
    """Why `text` looks like a price the shell expanded, else None."""
    if text.startswith("."):
        # `--spot-price $1.20` unquoted: the shell expands `$1` (empty) and passes `.20`,
        # which was read as 0.20, a sixth of the price meant.
        return (
            f"{text!r} starts with '.': an unquoted $1{text} reaches forewarn as {text} (the "
            f"shell expands $1); quote it ('$1{text}') or write the price without '$' "
            f"(1{text}), or 0{text} if that is meant"
        )
    number = text.partition("/")[0].strip()
    if _CUT_AFTER_DOLLAR.match(number):
        return (
            f"{text!r}: an unquoted $1{number} reaches forewarn as {number} (the shell expands "
            f"$1); quote it ('$1{number}') or write the price without '$' (1{number})"
        )
    shell = _SHELL_NAME_BEFORE.match(text)
    if shell and not shell.group(1).startswith("$"):
        cents = shell.group(2)
        return (
            f"{text!r} is not a price: an unquoted $0.{cents} reaches forewarn as the shell's "
            f"name for $0 ({shell.group(1)!r}) followed by .{cents}; quote it ('$0.{cents}') or "
            f"write 0.{cents}"
        )
    return None


class Price(float):
    """A price as a float, with the currency it was written in (`USD 2.50`, `2,50 €`), None
    when it named none (or only `$` or `¥`, which name several)."""

    currency: str | None

    def __new__(cls, value: float, currency: str | None = None) -> Price:
        price = super().__new__(cls, value)
        price.currency = currency
        return price


# A currency written before or after a price: an ISO 4217 code of a currency clouds bill in
# (any case), or a symbol. `$` and `¥` name more than one currency (US, Canadian, Australian
# dollars; yen and yuan), so they name none to compare against.
_CURRENCY_CODES = frozenset(
    [
        "USD",
        "EUR",
        "GBP",
        "JPY",
        "CNY",
        "INR",
        "CAD",
        "AUD",
        "NZD",
        "CHF",
        "SEK",
        "NOK",
        "DKK",
        "PLN",
        "CZK",
        "BRL",
        "MXN",
        "KRW",
        "SGD",
        "HKD",
        "ZAR",
    ]
)
_CURRENCY_SYMBOLS = {"US$": "USD", "$": None, "€": "EUR", "£": "GBP", "¥": None, "₹": "INR"}
_CODE_BEFORE = re.compile(r"^([A-Za-z]{3})(?![A-Za-z])\s*(.*)\Z", re.DOTALL)
_CODE_AFTER = re.compile(r"^(.*?)\s*(?<![A-Za-z])([A-Za-z]{3})\Z", re.DOTALL)
_ACCEPTED = "2.50, 2,50, USD 2.50, 2.50 EUR, or '$2.50' quoted"


def _split_currency(text: str) -> tuple[str, str | None]:
    """`text` without the currency written before or after it, and that currency's code (None
    for none, `$` or `¥`)."""
    for symbol, code in _CURRENCY_SYMBOLS.items():
        if text.startswith(symbol):
            return text[len(symbol) :].strip(), code
        if text.endswith(symbol):
            return text[: -len(symbol)].strip(), code
    before = _CODE_BEFORE.match(text)
    if before and before.group(1).upper() in _CURRENCY_CODES:
        return before.group(2), before.group(1).upper()
    after = _CODE_AFTER.match(text)
    if after and after.group(2).upper() in _CURRENCY_CODES:
        return after.group(1), after.group(2).upper()
    return text, None


def _price(text: str, *, positive: bool = False) -> Price:
    """A price: `1.20`, `1,20`, `USD 1.20`, `1.20 €`, or `$1.20` when it was quoted.
    `positive`: a spot or on-demand price, which 0 cannot be."""
    text = text.strip()
    trace = _shell_traces(text)
    if trace is not None:
        raise argparse.ArgumentTypeError(trace)
    number, currency = _split_currency(text)
    try:
        value = _number(number)
    except argparse.ArgumentTypeError as error:
        if str(error).startswith("not a number"):
            raise argparse.ArgumentTypeError(f"not a price: {text!r} (write {_ACCEPTED})") from None
        raise argparse.ArgumentTypeError(str(error).replace(repr(number), repr(text))) from None
    if positive and value == 0:
        if text == "0":
            # `$10` to `$90` unquoted: the shell expands `$1` to `$9` and passes `0`.
            raise argparse.ArgumentTypeError(
                "'0': a spot or on-demand price must be more than 0; an unquoted $10 reaches "
                "forewarn as 0 (the shell expands $1): quote it ('$10') or write the price "
                "without '$' (10)"
            )
        raise argparse.ArgumentTypeError(
            f"a spot or on-demand price must be more than 0 (got {text!r})"
        )
    return Price(value, currency)


# The units a price may be written with, as people write them ('$2.10/h', '0.023/GB-month'),
# and what one of them is in the plan's unit: each was refused as 'not a number'. A provider
# billing per GiB (2^30 bytes) or per TB is converted to per GB (10^9), the plan's unit
# (`0.02/GiB-month` was refused). Any other unit is refused, naming the one meant.
_PER_HOUR = {
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 1.0),
    # Billed per second or minute (GCP's and Azure's lists), or per day: converted, so the
    # plan does not depend on the unit. A month (720, 730 or 744 hours) is refused.
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 3600.0),
    # Not `/m`: a minute to the durations, a month to many bills.
    **dict.fromkeys(("min", "mins", "minute", "minutes"), 60.0),
    **dict.fromkeys(("d", "day", "days"), 1 / 24),
}
_GB = 1e9
_PER_SIZE = {"gb": _GB / 1e9, "gib": _GB / 2**30, "tb": _GB / 1e12, "tib": _GB / 2**40}
_PER_GB_MONTH = {
    f"{size}{sep}{month}": factor
    for size, factor in _PER_SIZE.items()
    for sep in ("-", "/", "")
    for month in ("month", "mo")
}
_PER_GB = dict(_PER_SIZE)


def _price_per(units: dict[str, float], per: str, example: str, *, positive: bool = False) -> Any:
    """`_price`, also with its unit written after a slash: `2.10/h`, `$0.023/GB-month`,
    converted to the plan's unit (`0.02/GiB-month` is 0.0186 per GB-month)."""

    def convert(text: str) -> float:
        number, slash, unit = text.strip().partition("/")
        factor = 1.0
        if slash:
            written = unit.strip().lower().replace(" ", "")
            if written not in units:
                # The traces of an unquoted `$` first: `bash.35/h` is no unit's fault.
                trace = _shell_traces(text.strip())
                if trace is not None:
                    raise argparse.ArgumentTypeError(trace)
                raise argparse.ArgumentTypeError(
                    f"a price per {per}: write {example} (got {text!r})"
                )
            factor = units[written]
        price = _price(number, positive=positive)
        return Price(price * factor, price.currency)

    return convert


# A spot or on-demand price per hour: never 0, which prices nothing (and is what `$10`
# unquoted becomes). A reserved price may be 0: hardware already paid for.
_hourly = _price_per(_PER_HOUR, "hour", "2.10 or 2.10/h", positive=True)
_reserved_hourly = _price_per(_PER_HOUR, "hour", "2.10 or 2.10/h")


def _positive(text: str) -> float:
    return _number(text, positive=True)


# A training speed as tqdm's progress bar (transformers', Lightning's) prints it: `3.50it/s`,
# or below one step a second `1.25s/it`, seconds a step, the inverse. A bare number is steps
# a second.
_STEPS_A_SECOND = re.compile(r"^(.*?)\s*(?:it|its|steps?)?/(?:s|secs?|seconds?)\Z", re.IGNORECASE)
_SECONDS_A_STEP = re.compile(r"^(.*?)\s*(?:s|secs?|seconds?)/(?:it|steps?)\Z", re.IGNORECASE)


def _speed(text: str) -> float:
    """Steps a second: `3.5`, `3.5it/s` (`steps/s`, `/s`), or `1.25s/it` (`s/step`), which
    is 0.8; any other unit is refused naming these forms."""
    written = text.strip()
    per_second = _STEPS_A_SECOND.match(written)
    per_step = None if per_second else _SECONDS_A_STEP.match(written)
    match = per_second or per_step
    try:
        value = _number(match.group(1) if match else written, positive=True)
    except argparse.ArgumentTypeError as error:
        if "positive" in str(error):
            raise argparse.ArgumentTypeError(f"must be positive (got {text!r})") from None
        if not str(error).startswith("not a number"):
            raise  # digits other than 0-9, a number too large: said as for any number
        raise argparse.ArgumentTypeError(
            f"not a speed such as 3.5 (steps a second), 3.5it/s or 1.25s/it, as tqdm prints "
            f"one (got {text!r})"
        ) from None
    return 1.0 / value if per_step else value


def _fraction(text: str) -> float:
    """`3%` or `0.03`."""
    _digits_0_to_9(text)
    percent = text.strip().endswith("%")
    try:
        value = _number(text.strip().removesuffix("%"))
    except argparse.ArgumentTypeError as error:
        if "thousands" in str(error):
            raise  # `1,234%`: the comma's two readings, as for any number
        raise argparse.ArgumentTypeError(
            f"must be a share such as 3% or 0.03 (got {text!r})"
        ) from None
    if not percent and value > 1:
        # A bare `5` is ambiguous: `--warn-tax 5` was read as 500% (so never warned) and
        # `--no-notice-share 50` said 'must be at most 100% (got 50.0)'.
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a share: write {text.strip()}% or {value / 100:g} (a fraction)"
        )
    return value / 100 if percent else value


def _tax(text: str) -> float:
    """A share of compute a checkpoint may cost, above 0 and below all of it; said in the
    flag's terms: the model's "a fraction between 0 and 1, e.g. 0.03 (got 1.5)" answered a
    `--tax 150%`."""
    value = _fraction(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be above 0% and below 100% (got {text!r})")
    return value


def _share_in(says: str, *, above_zero: bool = False, below_all: bool = False) -> Any:
    """A share (`_fraction`) within its flag's range, refused in the flag's terms with the
    text as written: `--reserved-utilization 0%` said 'must be in (0, 1] (got 0.0)' and
    `--fallback-share -5%` 'must be a share such as 3% or 0.03'."""

    def convert(text: str) -> float:
        written = text.strip()
        if written.startswith("-"):
            # `_fraction` refuses any sign as 'must be a share such as 3%': say what is wrong.
            if _fraction(written[1:]) > 0:
                raise argparse.ArgumentTypeError(f"must not be negative (got {text!r})")
            written = written[1:]
        value = _fraction(written)
        if (value <= 0 if above_zero else value < 0) or (value >= 1 if below_all else value > 1):
            raise argparse.ArgumentTypeError(f"{says} (got {text!r})")
        return value

    return convert


# The share flags whose range is narrower than any fraction, each with it as it is said.
SHARE_TYPES = {
    "--no-notice-share": _share_in("must be from 0% to 100%"),
    "--reserved-utilization": _share_in("must be above 0% and at most 100%", above_zero=True),
    "--fallback-share": _share_in("must be 0% or more and below 100%", below_all=True),
}


def _parsed(parse: Any) -> Any:
    def convert(text: str) -> float:
        try:
            return float(parse(text))
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return convert


# The plan computes in floats: a count beyond them raised OverflowError.
_count = whole_number(
    minimum=1,
    maximum=2**53,
    below="must be positive (got {text!r})",
    above="too large (at most 2**53, got {text!r})",
)


# argparse takes `-10s` for an option and answers "expected one argument"; letting negative
# durations through as values lets the type check say what is wrong with them.
# A decimal comma too: `--tax -3,5%` was "expected one argument".
_NEGATIVE_VALUE = re.compile(r"^-(\d+[.,]?\d*|[.,]\d+)[\w .,%]*$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    if isinstance(getattr(parser, "_negative_number_matcher", None), re.Pattern):
        parser._negative_number_matcher = _NEGATIVE_VALUE
    parser.description = (
        "How often to checkpoint (the interval that minimizes the exact expected overhead), "
        "what interruptions cost with and without a usable notice, and whether spot capacity "
        "is cheaper per useful hour than on-demand or reserved. Values come from the flags, "
        "else from the agent's telemetry file."
    )
    source = parser.add_argument_group("source")
    source.add_argument(
        "--telemetry",
        type=path_arg,
        action="append",
        metavar="PATH",
        help="telemetry file to measure from, or a directory searched for telemetry.jsonl "
        "files (one per machine, e.g. a `forewarn drill local --dir`); repeatable (default: "
        "telemetry.jsonl in the state directory)",
    )
    job = parser.add_argument_group(
        "job and capacity (durations: 10s, 5m, 2h, 1d, 1w, 1h30m, 1,5h)"
    )
    job.add_argument(
        "--checkpoint",
        "--flush",
        type=_duration,
        metavar="DUR",
        help="seconds one checkpoint holds up training, on average (default: size over "
        "--bandwidth, else the robust mean flush in the telemetry)",
    )
    job.add_argument(
        "--checkpoint-p95",
        type=_duration,
        metavar="DUR",
        help="95th percentile of the flush (with --upload, of the time until durable): what a "
        "notice must cover, never below the mean plus --upload (default: the telemetry's, "
        "else the mean, plus --upload)",
    )
    job.add_argument(
        "--upload",
        type=_duration,
        metavar="DUR",
        help="a background save's upload: seconds from the end of its stall (--checkpoint) "
        "until the checkpoint is durable; an interruption without a usable notice in it "
        "loses the interval before (default: the telemetry's durable less stall, else 0)",
    )
    job.add_argument(
        "--restore",
        type=_duration,
        metavar="DUR",
        help="seconds to reload a checkpoint on restart (default: median restore "
        "in the telemetry, else 0)",
    )
    job.add_argument(
        "--restart",
        type=_duration,
        metavar="DUR",
        help="seconds from new capacity to a running job, before the reload (default 0)",
    )
    job.add_argument(
        "--reacquire",
        type=_duration,
        metavar="DUR",
        help="seconds without capacity after a reclaim, unbilled (default 0)",
    )
    job.add_argument(
        "--detection",
        type=_duration,
        metavar="DUR",
        help="seconds from the provider's notice to the start of the flush "
        "(default 5s; the telemetry's notice-to-ack time replaces it)",
    )
    job.add_argument(
        "--notice-lead",
        type=_duration,
        metavar="DUR",
        help="seconds of notice before the machine goes (default: median lead of "
        "terminate notices in the telemetry; none: no usable notice)",
    )
    job.add_argument(
        "--notice-action",
        # Any case, as people write them: Drain, BF16, AdamW.
        type=word_as_written,
        choices=NOTICE_ACTIONS,
        help="how the notice reaches the job: terminate (save and exit at once, the machine "
        "waits billed for the reclaim: AWS, GCP and Azure spot) or drain (save and train on "
        "until the agent sends the terminate at the exit margin before the deadline: "
        "DigitalOcean's reclaim mail, GCP host maintenance); default: drain for a --notice-lead "
        f"over {DRAIN_LEAD_SECONDS / 60:g} min (Azure's scale-set Terminate, up to 15 min, is a "
        "terminate), else terminate. A drain's training between the drain and the terminate "
        "is not counted as progress: its overhead errs high, by about (1 - the share without "
        "notice) x (lead - margin) / MTBI of itself (3%% for a 60-minute drain a day)",
    )
    job.add_argument(
        "--exit-margin",
        type=_duration,
        metavar="DUR",
        help="the agent's exit_margin, for a drain: the terminate comes the larger of it and "
        f"twice the flush p95 before the deadline (default {DEFAULT_EXIT_MARGIN_SECONDS:g}s)",
    )
    rate = job.add_mutually_exclusive_group()
    rate.add_argument(
        "--interruptions-per-day",
        type=_positive,
        metavar="N",
        help="interruption rate (default: terminate notices over the telemetry's span)",
    )
    rate.add_argument(
        "--mtbi",
        type=_duration,
        metavar="DUR",
        help="mean time between interruptions, instead of a rate",
    )
    share = job.add_mutually_exclusive_group()
    share.add_argument(
        "--no-notice-share",
        type=SHARE_TYPES["--no-notice-share"],
        metavar="PCT",
        help="share of interruptions without a usable notice: crashes, host failures, lost "
        f"notices (default {DEFAULT_NO_NOTICE_SHARE * 100:.0f}%%, or the telemetry's share of late "
        "notices when larger)",
    )
    share.add_argument(
        "--no-notice-per-day",
        type=_amount,
        metavar="N",
        help="rate of interruptions without a usable notice, instead of a share",
    )
    job.add_argument(
        "--max-interval",
        type=_duration,
        metavar="DUR",
        help="longest interval to recommend (default 24h)",
    )
    job.add_argument(
        "--steps-per-second",
        type=_speed,
        metavar="X",
        help="training speed, to give intervals in steps: 3.5, or as tqdm prints it, "
        "3.5it/s or 1.25s/it (seconds a step, 0.8 steps a second)",
    )
    at = job.add_mutually_exclusive_group()
    at.add_argument(
        "--interval",
        type=_interval,
        metavar="DUR",
        help="evaluate this interval (default: the one of least overhead)",
    )
    at.add_argument(
        "--interval-steps",
        type=_count,
        metavar="N",
        help="evaluate this interval in steps (needs --steps-per-second)",
    )
    at.add_argument(
        "--tax",
        type=_tax,
        metavar="PCT",
        help="evaluate the interval at which checkpoints cost this share of compute: 3%% or 0.03",
    )
    size = parser.add_argument_group(
        "checkpoint size (with --bandwidth, instead of --checkpoint; also prices storage and I/O)"
    )
    given_size = size.add_mutually_exclusive_group()
    given_size.add_argument(
        "--checkpoint-size",
        type=_parsed(parse_size),
        metavar="SIZE",
        help="size of one checkpoint: 14GB, 2.4GiB, 500MB",
    )
    given_size.add_argument(
        "--checkpoint-gb", type=_positive, metavar="GB", help="size of one checkpoint in GB"
    )
    given_size.add_argument(
        "--params",
        type=_parsed(parse_count),
        metavar="N",
        help="estimate the size from the parameter count: 7B, 350M, 1.3e9 (a bare number "
        "below 100000 is refused: 7 is not 7B)",
    )
    size.add_argument(
        "--precision",
        type=word_as_written,
        choices=sorted(PRECISIONS),
        help="weights as trained, for --params (default bf16)",
    )
    size.add_argument(
        "--optimizer",
        type=word_as_written,
        choices=sorted(OPTIMIZERS),
        help="optimizer state saved with the weights, for --params (default adamw)",
    )
    size.add_argument(
        "--bandwidth",
        type=_parsed(parse_bandwidth),
        metavar="RATE",
        help="measured write/upload rate: 500MB/s (500MBps), 1.2GiB/s, 10Gbit/s (10Gbps); "
        "B is a byte, b a bit; the size over it is the flush, so not with --checkpoint",
    )
    money = parser.add_argument_group(
        "prices (per hour unless named otherwise; write 12.50, not $12.50, which the shell "
        "turns into 2.50 unless quoted; USD 12.50, 12,50 EUR and 12,50 are read)"
    )
    money.add_argument("--spot-price", type=_hourly, metavar="P", help="spot compute per hour")
    money.add_argument(
        "--on-demand-price", type=_hourly, metavar="P", help="on-demand compute per hour"
    )
    money.add_argument(
        "--reserved-price",
        type=_reserved_hourly,
        metavar="P",
        help="reserved or committed compute per hour, effective",
    )
    money.add_argument(
        "--reserved-utilization",
        type=SHARE_TYPES["--reserved-utilization"],
        metavar="PCT",
        help="share of reserved hours the job uses, with --reserved-price (default 100%%)",
    )
    money.add_argument(
        "--fallback-share",
        type=SHARE_TYPES["--fallback-share"],
        default=0.0,
        metavar="PCT",
        help="share of compute hours that fall back to on-demand while spot "
        "is unavailable (default 0)",
    )
    money.add_argument(
        "--storage-price",
        type=_price_per(_PER_GB_MONTH, "GB-month", "0.023 or 0.023/GB-month"),
        default=0.0,
        metavar="P",
        help="checkpoint storage per GB-month",
    )
    money.add_argument(
        "--keep",
        type=_count,
        metavar="N",
        help="checkpoint generations kept, priced with --storage-price (default 2)",
    )
    money.add_argument(
        "--io-price",
        type=_price_per(_PER_GB, "GB", "0.0004 or 0.0004/GB"),
        default=0.0,
        metavar="P",
        help="checkpoint transfer and requests per GB written or read",
    )
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print the plan as JSON")
    out.add_argument(
        "--warn-tax",
        type=_fraction,
        default=DEFAULT_WARN_TAX,
        metavar="PCT",
        help=f"warn when the checkpoint tax is above this (default {DEFAULT_WARN_TAX * 100:.0f}%%)",
    )
    out.add_argument(
        "--plot",
        type=path_arg,
        metavar="FILE.png",
        help="also draw the overhead against the interval (needs the `plot` extra: matplotlib)",
    )


@dataclass
class Size:
    """The checkpoint's size, and how it was worked out."""

    bytes: float
    source: str  # "--checkpoint-size", "--checkpoint-gb" or "--params"
    estimate: SizeEstimate | None = None

    @property
    def how(self) -> str:
        if self.estimate is not None:
            return self.estimate.how
        return f"{self.bytes / 1e9:.4g} GB ({self.source})"


@dataclass
class Resolved:
    timing: Timing
    sources: dict[str, str]
    telemetry: TelemetrySummary | None
    telemetry_files: list[Path]
    intervals: Intervals
    prices: Prices | None
    size: Size | None = None
    bandwidth: float | None = None
    warn_tax: float = DEFAULT_WARN_TAX
    # Telemetry lines left out (unfinished writes), each named: nothing is dropped unsaid.
    skipped_lines: list[str] = field(default_factory=list)
    # The currency the prices were written in (`EUR 1.10`), None when none named one.
    currency: str | None = None


def _default_telemetry() -> tuple[Path | None, str | None]:
    """The state directory's telemetry file, or why it is not known. A config file that
    does not load was taken for 'no state directory', and the telemetry in the one it
    names was left unread without a word."""
    from ..config import ConfigError, load_settings

    try:
        return telemetry_path(load_settings().resolved_state_dir(reading=True)), None
    except ConfigError as error:
        return (
            None,
            "not read: the config file does not load, so the state directory is unknown "
            f"({error}); give --telemetry PATH",
        )


def has_telemetry(path: Path) -> bool:
    """Whether the live telemetry file `path` or one of its rotated predecessors exists: just
    after a rotation, or when the live file could not be created again (a full disk), only
    `telemetry.jsonl.1` holds the records."""
    return any(file.is_file() for file in rotated_paths(path))


def telemetry_files(paths: list[Path]) -> list[Path]:
    """The live telemetry file of each machine (read with its rotated predecessors, which
    may be there without it): each file as given, and every telemetry.jsonl under each
    directory."""
    found: list[Path] = []
    names = {file.name for file in rotated_paths(Path(FILE_NAME))}
    for path in paths:
        if path.is_dir():
            files = sorted(
                {
                    file.with_name(FILE_NAME)
                    for file in path.rglob(f"{FILE_NAME}*")
                    if file.name in names and file.is_file()
                }
            )
            if not files:
                raise PlanError("--telemetry", f"no {FILE_NAME} under {path}")
            found += files
        elif path.is_file() or (path.name == FILE_NAME and has_telemetry(path)):
            found.append(path)
        else:
            raise PlanError("--telemetry", f"no such file or directory: {path}")
    return found


def _load_telemetry(
    args: argparse.Namespace, skipped: list[str]
) -> tuple[list[Path], TelemetrySummary | None]:
    if args.telemetry:
        files = telemetry_files(args.telemetry)
    else:
        default, problem = _default_telemetry()
        if problem is not None:
            skipped.append(problem)
        if default is None or not has_telemetry(default):
            return [], None
        files = [default]
    try:
        # Read as summed up: the records of a large file are never all held at once.
        return files, summarize_telemetry(*(read_records(file, skipped=skipped) for file in files))
    except TelemetryFormatError as error:
        raise PlanError("--telemetry", str(error)) from None
    except OSError as error:
        # The agent's file is 0640, its owner's (or the disk fails): this was 'unexpected
        # PermissionError', exit 1, naming no flag.
        where = error.filename or ", ".join(map(str, files))
        raise PlanError("--telemetry", f"cannot read {where}: {error.strerror or error}") from None
    except (KeyError, ValueError) as error:
        raise PlanError("--telemetry", f"unreadable record ({error})") from None


# Options that only refine another one, with what they need and their defaults (the
# parser's are None, so that one given without what it refines can be refused).
_COMPANIONS: dict[str, tuple[str, str, str, object]] = {
    "--precision": ("precision", "params", "--params (to estimate the size)", "bf16"),
    "--optimizer": ("optimizer", "params", "--params (to estimate the size)", "adamw"),
    "--reserved-utilization": ("reserved_utilization", "reserved_price", "--reserved-price", 1.0),
    # Its parser default is 0: not given and given as 0 are one.
    "--keep": ("keep", "storage_price", "a --storage-price above 0 (it prices that many)", 2),
}
# What a refined option given as 0 (not left out) leaves to refine: "only used with
# --reserved-price" asked for a flag given, as `--reserved-price 0`.
_NOTHING_AT_ZERO = {
    "reserved_price": "a --reserved-price above 0 (given 0: hardware already paid for costs "
    "nothing at any utilization)",
}


def _companions(args: argparse.Namespace) -> None:
    """Refuse an option given without the one it refines, then fill in the defaults. Each
    was ignored in silence: `--precision fp32 --checkpoint-gb 14` and `--keep 5` without a
    storage price changed nothing, `--reserved-utilization 50%` without a reserved price
    left spot's verdict as it was."""
    for flag, (dest, needs, needs_flag, default) in _COMPANIONS.items():
        needed = getattr(args, needs, None)
        if getattr(args, dest, None) is None:
            setattr(args, dest, default)
        elif needed is None:
            raise PlanError(flag, f"only used with {needs_flag}")
        elif needed == 0.0:
            raise PlanError(flag, f"only used with {_NOTHING_AT_ZERO.get(needs, needs_flag)}")


def _size(args: argparse.Namespace) -> Size | None:
    if args.checkpoint_size is not None:
        return Size(args.checkpoint_size, "--checkpoint-size")
    if args.checkpoint_gb is not None:
        return Size(args.checkpoint_gb * 1e9, "--checkpoint-gb")
    if args.params is not None:
        estimate = SizeEstimate(args.params, args.precision, args.optimizer)
        return Size(estimate.bytes, "--params", estimate)
    return None


def _finite(value: float, flag: str, what: str) -> float:
    """`value`, unless the flags multiply or divide to infinity, which every figure of the
    plan would then carry."""
    if not math.isfinite(value):
        raise PlanError(flag, f"{what} overflows: it is not a finite number")
    return value


def resolve(args: argparse.Namespace) -> Resolved:
    """Flags first, then telemetry, then defaults; PlanError names what is missing. Only
    what the asked-for output needs is asked for: the tax alone needs no interruption rate."""
    _companions(args)
    skipped: list[str] = []
    files, summary = _load_telemetry(args, skipped)
    if files:
        where = f"the telemetry ({', '.join(map(str, files))})"
    else:
        default, problem = _default_telemetry()
        where = f"there is no telemetry file ({problem or default or 'no state directory'})"
    sources: dict[str, str] = {}

    def pick(name: str, flag_value: Any, measured: Any, default: Any = None) -> Any:
        if flag_value is not None:
            sources[name] = "flag"
            return flag_value
        if measured is not None:
            sources[name] = "telemetry"
            return measured
        sources[name] = "default"
        return default

    size = _size(args)
    if size is not None:
        _finite(size.bytes, size.source, "the checkpoint size in bytes")
    if args.bandwidth is not None and size is None:
        raise PlanError(
            "--bandwidth", "needs a size: --checkpoint-size, --checkpoint-gb or --params"
        )
    checkpoint = args.checkpoint
    if checkpoint is not None and size is not None and args.bandwidth is not None:
        # Two flushes: the one given and the size over the bandwidth. The plan took the
        # first and printed the second beside it ("at 1000 MB/s: 14 s a checkpoint").
        raise PlanError(
            "--checkpoint and --bandwidth",
            f"give one: --checkpoint {seconds_text(checkpoint)} is the flush, and "
            f"{size.source} over --bandwidth is another "
            f"({seconds_text(size.bytes / args.bandwidth)}); a size without --bandwidth "
            "still prices storage and I/O",
        )
    if checkpoint is not None:
        sources["checkpoint_seconds"] = "flag"
    elif size is not None and args.bandwidth is not None:
        checkpoint = _finite(
            size.bytes / args.bandwidth, "--bandwidth", "the size over the bandwidth in seconds"
        )
        sources["checkpoint_seconds"] = "size / bandwidth"
    else:
        checkpoint = pick("checkpoint_seconds", None, summary.flush_seconds if summary else None)
    if checkpoint is None:
        if size is not None:
            raise PlanError(
                "--bandwidth",
                f"needed to turn the {size.source} size into flush seconds (or give --checkpoint)",
            )
        raise PlanError(
            "--checkpoint",
            f"not given (nor a size with --bandwidth), and {where} has no flush seconds"
            if files
            else f"not given (nor a size with --bandwidth), and {where}",
        )
    measured_flush = sources["checkpoint_seconds"] == "telemetry"
    p95 = pick(
        "checkpoint_p95_seconds",
        args.checkpoint_p95,
        summary.flush_p95_seconds if summary and measured_flush else None,
    )
    mtbi: float | None
    if args.interruptions_per_day is not None:
        mtbi = rate_to_mtbi(args.interruptions_per_day)
        sources["mtbi_seconds"] = "flag"
    else:
        mtbi = pick("mtbi_seconds", args.mtbi, summary.mtbi_seconds if summary else None)
    if mtbi is not None and mtbi <= 0:
        raise PlanError("--mtbi", "must be positive (a zero mean time between interruptions)")
    evaluates = args.interval is not None or args.interval_steps is not None or args.tax is not None
    if mtbi is None and (not evaluates or _priced(args)):
        raise PlanError(
            "--interruptions-per-day",
            (
                f"not given (nor --mtbi), and {where} has no terminate notices to measure a rate"
                if files
                else f"not given (nor --mtbi), and {where}"
            )
            + ("; it is needed to price spot" if _priced(args) else "")
            + ("" if evaluates else " (for the tax alone give --tax or --interval)"),
        )
    share = _no_notice_share(args, mtbi, summary, sources)
    # What the telemetry saw of the notice path (notice to saved ack) holds for the flushes
    # it measured, not for a checkpoint cost given by flag.
    path_measured = summary is not None and measured_flush and args.detection is None
    response = pick(
        "response_seconds", None, summary.response_seconds if summary and path_measured else None
    )
    lead = pick(
        "notice_lead_seconds",
        args.notice_lead,
        summary.notice_lead_seconds if summary else None,
    )
    if lead is None and path_measured and summary is not None and summary.drained:
        # Every terminate notice was saved on, with no deadline to measure the lead by: it
        # was long enough, and no longer is assumed (no idle tail).
        lead = response
        sources["notice_lead_seconds"] = "telemetry (every notice saved on)"
    action = _notice_action(args, lead, sources, summary)
    if lead is None:
        # Every interruption is one without a notice: a share of those, given, changed
        # nothing but the line that printed it.
        for flag, given in (
            ("--no-notice-share", args.no_notice_share),
            ("--no-notice-per-day", args.no_notice_per_day),
        ):
            if given is not None:
                raise PlanError(
                    flag,
                    "only used with a notice lead (--notice-lead, or the telemetry's): "
                    "without one every interruption comes without a usable notice",
                )
    _lead_within_mtbi(args, lead, mtbi, sources)
    timing = Timing(
        checkpoint_seconds=checkpoint,
        mtbi_seconds=mtbi,
        checkpoint_p95_seconds=p95,
        restore_seconds=pick(
            "restore_seconds", args.restore, summary.restore_seconds if summary else None, 0.0
        ),
        restart_seconds=pick("restart_seconds", args.restart, None, 0.0),
        reacquire_seconds=pick("reacquire_seconds", args.reacquire, None, 0.0),
        detection_seconds=pick("detection_seconds", args.detection, None, 5.0),
        notice_lead_seconds=lead,
        response_seconds=response,
        no_notice_share=share,
        steps_per_second=pick("steps_per_second", args.steps_per_second, None),
        max_interval_seconds=pick("max_interval_seconds", args.max_interval, None, 86400.0),
        notice_action=action,
        exit_margin_seconds=pick(
            "exit_margin_seconds", args.exit_margin, None, DEFAULT_EXIT_MARGIN_SECONDS
        ),
        # Measured with the stall it follows, so only when the flush is the telemetry's.
        upload_seconds=pick(
            "upload_seconds",
            args.upload,
            summary.upload_seconds if summary and measured_flush else None,
            0.0,
        ),
    )
    if (
        sources.get("max_interval_seconds") == "flag"
        and timing.max_interval_seconds < timing.checkpoint_seconds
    ):
        # `--max-interval 1ms` for a 10 s flush recommended a checkpoint every millisecond,
        # a 1,000,000 % tax, as a plan.
        raise PlanError(
            "--max-interval",
            f"{seconds_text(timing.max_interval_seconds)} is shorter than the "
            f"{seconds_text(timing.checkpoint_seconds)} flush: every interval it allows "
            "spends more time saving than training",
        )
    interval = args.interval
    if args.interval_steps is not None:
        if timing.steps_per_second is None:
            raise PlanError("--interval-steps", "needs --steps-per-second")
        interval = args.interval_steps / timing.steps_per_second
        if not math.isfinite(interval):
            raise PlanError(
                "--interval-steps",
                f"{args.interval_steps} steps at {timing.steps_per_second:g} a second "
                "take longer than any finite time",
            )
    try:
        intervals = choose_interval(timing, interval=interval, tax=args.tax)
    except PlanError as error:
        # The rate given as --interruptions-per-day was blamed on --mtbi, never given.
        if error.field == "mtbi_seconds" and args.interruptions_per_day is not None:
            raise PlanError("--interruptions-per-day", str(error).split(": ", 1)[1]) from None
        # And the interval given in steps on --interval, never given either.
        if error.field == "interval" and args.interval_steps is not None:
            raise PlanError(
                "--interval-steps",
                f"{args.interval_steps} steps at {timing.steps_per_second:g} a second: "
                + str(error).split(": ", 1)[1],
            ) from None
        raise
    prices = None
    given = _given_prices(args)
    currency = _one_currency(args, given)
    if given:
        if args.spot_price is None:
            given_flag = "--" + given[0].replace("_", "-")
            raise PlanError("--spot-price", f"needed to price spot (given: {given_flag})")
        prices = Prices(
            spot=args.spot_price,
            on_demand=args.on_demand_price,
            reserved=args.reserved_price,
            reserved_utilization=args.reserved_utilization,
            fallback_share=args.fallback_share,
            checkpoint_gb=size.bytes / 1e9 if size else 0.0,
            storage_gb_month=args.storage_price,
            keep=args.keep,
            io_per_gb=args.io_price,
        )
    return Resolved(
        timing,
        sources,
        summary,
        files,
        intervals,
        prices,
        size,
        args.bandwidth,
        args.warn_tax,
        skipped,
        currency,
    )


def _notice_action(
    args: argparse.Namespace,
    lead: float | None,
    sources: dict[str, str],
    summary: TelemetrySummary | None = None,
) -> str:
    """The flag, else a drain for a lead given longer than any provider's terminate, else a
    drain where most of the telemetry's reclaims began as drains the agent escalated (their
    lead is the drain's; a terminate's lead is its own)."""
    if args.notice_action is not None:
        if lead is None:
            # No notice to take either way: it changed nothing, in silence.
            raise PlanError(
                "--notice-action",
                "only used with a notice lead (--notice-lead, or the telemetry's)",
            )
        sources["notice_action"] = "flag"
        action = str(args.notice_action)
    elif sources.get("notice_lead_seconds") == "flag" and lead and lead > DRAIN_LEAD_SECONDS:
        sources["notice_action"] = (
            f"default: a lead over {DRAIN_LEAD_SECONDS / 60:g} min; give --notice-action "
            "terminate for one published as terminate"
        )
        action = "drain"
    elif sources.get("notice_lead_seconds") == "flag" and lead and lead > SPOT_LEAD_SECONDS:
        # Between the spot reclaims and the drains, the lead alone does not tell: Azure's
        # scale-set Terminate (5-15 min) is a terminate, its Reboot and Redeploy are drains.
        sources["notice_action"] = (
            f"default: a lead up to {DRAIN_LEAD_SECONDS / 60:g} min, as Azure's scale-set "
            "Terminate; give --notice-action drain for a drain (Azure Reboot or Redeploy)"
        )
        action = "terminate"
    elif (
        sources.get("notice_lead_seconds") == "telemetry"
        and summary is not None
        and lead
        and 2 * summary.drained_first > summary.terminate_notices
    ):
        # A DigitalOcean reclaim mail or a GCP host maintenance, sent as terminate by the
        # agent at its exit margin: planned as a terminate it lost the save on the drain.
        sources["notice_action"] = (
            f"telemetry: {summary.drained_first} of {summary.terminate_notices} reclaim(s) "
            "began as a drain the agent sent as terminate at its exit margin"
        )
        action = "drain"
    else:
        sources["notice_action"] = "default"
        action = "terminate"
    if args.exit_margin is not None and action != "drain":
        raise PlanError("--exit-margin", "only used for a notice taken as a drain")
    return action


def _lead_within_mtbi(
    args: argparse.Namespace, lead: float | None, mtbi: float | None, sources: dict[str, str]
) -> None:
    """A notice comes on a running machine and the machine goes a lead later, so reclaims
    are at least a lead apart: a lead longer than the mean time between them is a figure
    mistaken (`--notice-lead 2h --mtbi 1h` planned 1.9x the useful time in billed waits). A
    drill's telemetry (a 20 s deadline in a 12 s run) is let through: its note says the
    rate is a drill's."""
    if lead is None or mtbi is None or lead <= mtbi:
        return
    given = [
        flag
        for name, flag in (
            ("notice_lead_seconds", "--notice-lead"),
            ("mtbi_seconds", "--interruptions-per-day" if args.interruptions_per_day else "--mtbi"),
        )
        if sources.get(name) == "flag"
    ]
    if given:
        raise PlanError(
            given[0],
            f"the notice lead ({seconds_text(lead)}) is longer than the mean time between "
            f"interruptions ({seconds_text(mtbi)}), but a machine goes a lead after its "
            "notice, so reclaims are at least a lead apart: give the lead of one notice and "
            "the rate of interruptions of one machine",
        )


# The price flags whose parser default is 0 (none given); the others default to None.
_ZERO_DEFAULT = ("storage_price", "io_price", "fallback_share")


def _given_prices(args: argparse.Namespace) -> list[str]:
    """The price flags given. A compute price of 0 is given (hardware already paid for):
    `--spot-price 0` alone was answered 'give --spot-price', and `--on-demand-price 0`
    without a spot price was ignored in silence."""
    return [
        name
        for name in PRICE_FLAGS
        if getattr(args, name) not in ((None, 0.0) if name in _ZERO_DEFAULT else (None,))
    ]


def _one_currency(args: argparse.Namespace, given: list[str]) -> str | None:
    """The currency the prices name, if any. Prices written in two currencies (`--spot-price
    'EUR 1.10' --on-demand-price 'USD 3.90'`) are refused: the plan compares them as one."""
    named: list[tuple[str, str]] = []
    for name in given:
        currency = getattr(getattr(args, name), "currency", None)
        if currency is not None:
            named.append(("--" + name.replace("_", "-"), currency))
    for flag, currency in named[1:]:
        first_flag, first = named[0]
        if currency != first:
            raise PlanError(
                flag,
                f"in {currency}, but {first_flag} is in {first}: the plan compares prices in "
                "one currency; convert one of them",
            )
    return named[0][1] if named else None


def _priced(args: argparse.Namespace) -> bool:
    return bool(_given_prices(args))


def _no_notice_share(
    args: argparse.Namespace,
    mtbi: float | None,
    summary: TelemetrySummary | None,
    sources: dict[str, str],
) -> float:
    """The share of interruptions without a usable notice: the flag, else the telemetry's
    late notices when they are more than the default (the telemetry sees late notices, not
    crashes, so it only ever raises the share), else the default."""
    if args.no_notice_share is not None:
        if args.no_notice_share > 1:
            raise PlanError(
                "--no-notice-share", f"must be at most 100% (got {args.no_notice_share})"
            )
        sources["no_notice_share"] = "flag"
        return float(args.no_notice_share)
    if args.no_notice_per_day is not None:
        if mtbi is None:
            raise PlanError("--no-notice-per-day", "needs the total rate: --interruptions-per-day")
        total = 86400.0 / mtbi
        if args.no_notice_per_day > total:
            raise PlanError(
                "--no-notice-per-day",
                f"{args.no_notice_per_day:g} a day is more than all interruptions "
                f"({total:.3g} a day)",
            )
        sources["no_notice_share"] = "flag"
        return float(args.no_notice_per_day / total)
    late = summary.late_share if summary else None
    if late is not None and late > DEFAULT_NO_NOTICE_SHARE:
        sources["no_notice_share"] = "telemetry"
        return late
    sources["no_notice_share"] = "default"
    return DEFAULT_NO_NOTICE_SHARE


# Past 2**53 a float has no more digits than it was given, and no step counter (int64, a
# float in JSON readers) holds such counts: a step count beyond it stays a float.
_EXACT_STEPS = 2**53


def _steps(seconds: float | None, timing: Timing) -> float | None:
    if timing.steps_per_second is None or seconds is None:
        return None
    steps = seconds * timing.steps_per_second
    if not math.isfinite(steps):
        raise PlanError(
            "steps_per_second",
            f"{timing.steps_per_second:g} steps a second make {seconds:g} s more steps than "
            "can be counted",
        )
    # A checkpoint comes at a step boundary: at least one step, as AdaptiveInterval.steps()
    # (slow steps, one every 5 hours, were told to checkpoint every 0 steps).
    if steps > _EXACT_STEPS:
        # `--steps-per-second 1e300` printed a 304-digit count, all but 16 of them noise.
        return float(steps)
    return max(1, round(steps))


SHORT_SPAN = 86400.0


def notes(resolved: Resolved) -> list[str]:
    """Caveats about where the numbers came from."""
    found = []
    summary = resolved.telemetry
    if (
        summary is not None
        and resolved.sources.get("mtbi_seconds") == "telemetry"
        and summary.span_seconds < SHORT_SPAN
    ):
        found.append(
            f"the interruption rate comes from {summary.terminate_notices} terminate notice(s) "
            f"in {seconds_text(summary.span_seconds)} of telemetry (a drill's rate, not the "
            "capacity's); give --interruptions-per-day or --mtbi for the real one"
        )
    if (
        summary is not None
        and summary.terminate_notices
        and resolved.sources.get("no_notice_share") == "default"
    ):
        held = summary.terminate_notices - summary.unattended_notices
        found.append(
            f"{summary.late_notices} of {held} terminate notice(s) in the "
            "telemetry came too late to save on; crashes and lost hosts do not show there, so "
            f"the default share without a usable notice ({DEFAULT_NO_NOTICE_SHARE:.0%}) stays"
        )
    if summary is not None and summary.drain_saves and summary.span_seconds > 0:
        per_day = summary.drain_saves * SHORT_SPAN / summary.span_seconds
        flush = resolved.timing.checkpoint_seconds
        found.append(
            f"the telemetry holds {summary.drain_saves} save(s) on drains that did not end in a "
            "terminate (a rebalance recommendation, a live migration, a maintenance "
            f"withdrawn): {per_day:.3g} a day, at {seconds_text(flush)} each about "
            f"{per_day * flush / SHORT_SPAN:.2%} of the time, on top of the overhead below"
        )
    if summary is not None and summary.unattended_notices:
        found.append(
            f"{summary.unattended_notices} of {summary.terminate_notices} terminate notice(s) "
            "reached no job (no acking client subscribed, no hold, no ack): counted in the "
            "interruption rate, not as too late to save on"
        )
    cap = resolved.timing.max_interval_seconds
    recommended = resolved.intervals.recommended
    if recommended is not None and recommended >= cap * (1 - 1e-6):
        found.append(_cap_note(resolved.timing, cap))
    if resolved.timing.mtbi_seconds is None:
        found.append(
            "no interruption rate: only the checkpoint tax is worked out (give "
            "--interruptions-per-day or --mtbi for the overhead and the recommended interval)"
        )
    return found


def _cap_note(timing: Timing, cap: float) -> str:
    """The recommended interval is the cap: say whether a longer one would cost less."""
    # A cap below the optimum (--max-interval 10m against a 22-minute Daly interval) was
    # explained as 'longer intervals cost no more', which holds only where the overhead is
    # flat beyond the cap (every interruption noticed).
    at_cap = overhead(timing, cap).total
    longer, below = cap, at_cap
    if math.isfinite(cap * 1000):
        try:
            longer = recommended_interval(replace(timing, max_interval_seconds=cap * 1000))
            below = overhead(timing, longer).total
        except PlanError:
            pass
    # The table shows overheads to 0.01 percentage point: a smaller gain is no gain.
    if not at_cap - below >= 1e-4:
        return (
            f"the least overhead is at the longest interval accepted (--max-interval "
            f"{seconds_text(cap)}): with this few interruptions without a usable notice, "
            "longer intervals cost no more; give --max-interval to accept longer ones"
        )
    return (
        f"the least overhead is beyond the longest interval accepted (--max-interval "
        f"{seconds_text(cap)}), so the recommended interval is that cap, at "
        f"{at_cap * 100:.2f} %; a longer one costs less: {seconds_text(longer)} gives "
        f"{below * 100:.2f} % (give --max-interval to accept it)"
    )


def _parts(cost: Breakdown) -> dict[str, float]:
    return {
        "checkpoint_tax": cost.checkpoint_tax,
        "lost_work": cost.lost_work,
        "notice_flush": cost.notice_flush,
        "notice_idle": cost.notice_idle,
        "restart": cost.restart,
        "reacquire": cost.reacquire,
        "billed": cost.billed,
        "total": cost.total,
        "per_interruption_seconds": cost.per_interruption_seconds,
    }


def build(resolved: Resolved) -> dict[str, Any]:
    """The whole plan as JSON-ready values."""
    timing = resolved.timing
    intervals = resolved.intervals
    chosen = intervals.chosen
    rated = timing.mtbi_seconds is not None
    priced: Costs | None = costs(timing, resolved.prices, chosen) if resolved.prices else None
    inputs = {
        name: {"value": getattr(timing, name), "source": resolved.sources.get(name, "default")}
        for name in (
            "checkpoint_seconds",
            "checkpoint_p95_seconds",
            "upload_seconds",
            "mtbi_seconds",
            "restore_seconds",
            "restart_seconds",
            "reacquire_seconds",
            "detection_seconds",
            "notice_lead_seconds",
            "response_seconds",
            "no_notice_share",
            "steps_per_second",
            "max_interval_seconds",
            "notice_action",
            "exit_margin_seconds",
        )
    }
    inputs["interruptions_per_day"] = {
        "value": timing.interruptions_per_day,
        "source": inputs["mtbi_seconds"]["source"],
    }
    size = resolved.size
    interval_rows = {
        "young": intervals.young,
        "daly": intervals.daly,
        "recommended": intervals.recommended,
        "for_tax": intervals.for_tax,
        "chosen": chosen,
    }
    seen = notice(timing)
    flush_stats = None
    if resolved.telemetry is not None and resolved.telemetry.flushes:
        flush_stats = {
            "mean_seconds": resolved.telemetry.flush_seconds,
            "median_seconds": resolved.telemetry.flush_median_seconds,
            "p95_seconds": resolved.telemetry.flush_p95_seconds,
            "count": resolved.telemetry.flushes,
        }
    plan: dict[str, Any] = {
        "telemetry": (
            {
                "files": [str(file) for file in resolved.telemetry_files],
                **asdict(resolved.telemetry),
                "mtbi_seconds": resolved.telemetry.mtbi_seconds,
                "late_share": resolved.telemetry.late_share,
            }
            if resolved.telemetry
            else None
        ),
        "inputs": inputs,
        "flush": {
            "mean_seconds": timing.checkpoint_seconds,
            "p95_seconds": timing.flush_p95,
            "measured": flush_stats,
        },
        "checkpoint_size": (
            {
                "bytes": size.bytes,
                "gb": size.bytes / 1e9,
                "source": size.source,
                "how": size.how,
                "params": size.estimate.params if size.estimate else None,
                "precision": size.estimate.precision if size.estimate else None,
                "optimizer": size.estimate.optimizer if size.estimate else None,
                "bytes_per_param": size.estimate.bytes_per_param if size.estimate else None,
                "bandwidth_bytes_per_second": resolved.bandwidth,
                "flush_seconds": size.bytes / resolved.bandwidth if resolved.bandwidth else None,
            }
            if size
            else None
        ),
        "notice": {
            "lead_seconds": seen.lead_seconds,
            "needs_seconds": seen.needs_seconds,
            "usable": seen.usable,
            "no_notice_share": seen.no_notice_share,
            "effective_no_notice_share": seen.effective_no_notice_share,
            "why": seen.why,
            "action": timing.notice_action,
            "terminate_lead_seconds": timing.terminate_lead_seconds,
            "assumed": seen.assumed,
        },
        "intervals": {
            "basis": intervals.basis,
            "seconds": interval_rows,
            "steps": {key: _steps(value, timing) for key, value in interval_rows.items()},
        },
        "checkpoint_tax": checkpoint_tax(timing.checkpoint_seconds, chosen),
        "overhead": None,
        "overhead_without_notice": None,
        "overhead_at_recommended": None,
        "notice_worth": None,
        "costs": None,
        "currency": resolved.currency,
        "verdict": None,
        "summary": None,
        "warnings": [
            *(f"telemetry {line}" for line in resolved.skipped_lines),
            *warnings(timing, intervals, warn_tax=resolved.warn_tax),
        ],
        "warn_tax": resolved.warn_tax,
        "notes": notes(resolved),
    }
    if rated:
        plan["overhead"] = _parts(overhead(timing, chosen))
        blind = overhead_without_notice(timing, chosen).total
        # None: without notices no work would ever be kept at this interval (JSON has no inf).
        plan["overhead_without_notice"] = blind if math.isfinite(blind) else None
        if intervals.recommended is not None:
            plan["overhead_at_recommended"] = overhead(timing, intervals.recommended).total
        worth = notice_worth(timing)
        if worth is not None:
            plan["notice_worth"] = asdict(worth)
    if priced is not None:
        plan["costs"] = {
            option.name: {
                "per_useful_hour": option.per_useful_hour,
                "wall_hours_per_useful_hour": option.wall_hours_per_useful_hour,
                "lines": option.lines,
            }
            for option in [priced.spot, *priced.alternatives]
        }
        plan["verdict"] = priced.verdict
        plan["summary"] = priced.summary
    return plan


def run(args: argparse.Namespace) -> int:
    try:
        resolved = resolve(args)
        plan = build(resolved)
    except PlanError as error:
        print(f"forewarn: plan: {_flagged(error)}", file=sys.stderr)
        return 2
    if args.plot is not None:
        from .plot import PlotError, draw

        if resolved.timing.mtbi_seconds is None:
            print(
                "forewarn: plan: --plot: needs the interruption rate (--interruptions-per-day)",
                file=sys.stderr,
            )
            return 2

        try:
            draw(resolved.timing, resolved.intervals, args.plot)
        except PlotError as error:
            print(f"forewarn: plan: --plot: {error}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(plan, indent=2))
    else:
        from .table import render

        print(render(plan))
        if args.plot is not None:
            print(f"\nplot written to {args.plot}")
    return 0


def _flagged(error: PlanError) -> str:
    flag = FLAGS.get(error.field, error.field)
    return f"{flag}: {str(error).split(': ', 1)[1]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="forewarn plan")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["add_arguments", "build", "main", "resolve", "run"]
