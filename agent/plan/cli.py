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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from forewarn.protocol.timefmt import parse_duration

from ..telemetry import FILE_NAME, TelemetryFormatError, read_records, telemetry_path
from .costs import Costs, costs
from .inputs import PlanError, Prices, Timing, rate_to_mtbi
from .model import Intervals, LostWork, Overhead, choose_interval, lost_work, overhead
from .table import seconds_text
from .telemetry import TelemetrySummary, summarize_telemetry

# Field names used by the model, and the flag a user gives them with.
FLAGS = {
    "checkpoint_seconds": "--checkpoint",
    "mtbi_seconds": "--mtbi",
    "interruptions_per_day": "--interruptions-per-day",
    "restore_seconds": "--restore",
    "restart_seconds": "--restart",
    "reacquire_seconds": "--reacquire",
    "detection_seconds": "--detection",
    "notice_lead_seconds": "--notice-lead",
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
    "checkpoint_gb",
    "storage_price",
    "io_price",
    "fallback_share",
)


def _duration(text: str) -> float:
    if text.strip().startswith("-"):
        raise argparse.ArgumentTypeError(f"must not be negative (got {text!r})")
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _number(text: str, *, positive: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise argparse.ArgumentTypeError(
            f"must be {'positive' if positive else 'zero or more'} (got {text!r})"
        )
    return value


def _amount(text: str) -> float:
    return _number(text)


def _positive(text: str) -> float:
    return _number(text, positive=True)


def _fraction(text: str) -> float:
    """`3%` or `0.03`."""
    percent = text.strip().endswith("%")
    try:
        value = _number(text.strip().removesuffix("%"))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"must be a share such as 3% or 0.03 (got {text!r})"
        ) from None
    return value / 100 if percent else value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive (got {text!r})")
    return value


# argparse takes `-10s` for an option and answers "expected one argument"; letting negative
# durations through as values lets the type check say what is wrong with them.
_NEGATIVE_VALUE = re.compile(r"^-\d*\.?\d+(ms|s|m|h|d|%)?$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    if isinstance(getattr(parser, "_negative_number_matcher", None), re.Pattern):
        parser._negative_number_matcher = _NEGATIVE_VALUE
    parser.description = (
        "How often to checkpoint (Young and Daly), what interruptions cost, and whether spot "
        "capacity is cheaper per useful hour than on-demand or reserved. Values come from the "
        "flags, else from the agent's telemetry file."
    )
    source = parser.add_argument_group("source")
    source.add_argument(
        "--telemetry",
        type=Path,
        action="append",
        metavar="PATH",
        help="telemetry file to measure from, or a directory searched for telemetry.jsonl "
        "files (one per machine, e.g. a `forewarn drill local --dir`); repeatable (default: "
        "telemetry.jsonl in the state directory)",
    )
    job = parser.add_argument_group("job and capacity (durations: 10s, 5m, 2h)")
    job.add_argument(
        "--checkpoint",
        "--flush",
        type=_duration,
        metavar="DUR",
        help="seconds one checkpoint holds up training (default: median flush in the telemetry)",
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
    job.add_argument(
        "--steps-per-second",
        type=_positive,
        metavar="X",
        help="training speed, to give intervals in steps",
    )
    at = job.add_mutually_exclusive_group()
    at.add_argument(
        "--interval",
        type=_duration,
        metavar="DUR",
        help="evaluate this interval (default: Daly's optimum)",
    )
    at.add_argument(
        "--interval-steps",
        type=_count,
        metavar="N",
        help="evaluate this interval in steps (needs --steps-per-second)",
    )
    at.add_argument(
        "--tax",
        type=_fraction,
        metavar="PCT",
        help="evaluate the interval at which checkpoints cost this share of compute: 3%% or 0.03",
    )
    money = parser.add_argument_group("prices (per hour unless named otherwise)")
    money.add_argument("--spot-price", type=_amount, metavar="P", help="spot compute per hour")
    money.add_argument(
        "--on-demand-price", type=_amount, metavar="P", help="on-demand compute per hour"
    )
    money.add_argument(
        "--reserved-price",
        type=_amount,
        metavar="P",
        help="reserved or committed compute per hour, effective",
    )
    money.add_argument(
        "--reserved-utilization",
        type=_fraction,
        default=1.0,
        metavar="PCT",
        help="share of reserved hours the job uses (default 100%%)",
    )
    money.add_argument(
        "--fallback-share",
        type=_fraction,
        default=0.0,
        metavar="PCT",
        help="share of compute hours that fall back to on-demand while spot "
        "is unavailable (default 0)",
    )
    money.add_argument(
        "--checkpoint-gb", type=_amount, default=0.0, metavar="GB", help="size of one checkpoint"
    )
    money.add_argument(
        "--storage-price",
        type=_amount,
        default=0.0,
        metavar="P",
        help="checkpoint storage per GB-month",
    )
    money.add_argument(
        "--keep",
        type=_count,
        default=2,
        metavar="N",
        help="checkpoint generations kept (default 2)",
    )
    money.add_argument(
        "--io-price",
        type=_amount,
        default=0.0,
        metavar="P",
        help="checkpoint transfer and requests per GB written or read",
    )
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print the plan as JSON")
    out.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="also draw overhead and cost against the interval (needs the "
        "`plot` extra: matplotlib)",
    )


@dataclass
class Resolved:
    timing: Timing
    sources: dict[str, str]
    telemetry: TelemetrySummary | None
    telemetry_files: list[Path]
    intervals: Intervals
    prices: Prices | None


def _default_telemetry() -> Path | None:
    from ..config import ConfigError, load_settings

    try:
        return telemetry_path(load_settings().resolved_state_dir())
    except ConfigError:
        return None


def telemetry_files(paths: list[Path]) -> list[Path]:
    """The live telemetry file of each machine: each file as given, and every
    telemetry.jsonl under each directory."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            files = sorted(path.rglob(FILE_NAME))
            if not files:
                raise PlanError("--telemetry", f"no {FILE_NAME} under {path}")
            found += files
        elif path.is_file():
            found.append(path)
        else:
            raise PlanError("--telemetry", f"no such file or directory: {path}")
    return found


def _load_telemetry(args: argparse.Namespace) -> tuple[list[Path], TelemetrySummary | None]:
    if args.telemetry:
        files = telemetry_files(args.telemetry)
    else:
        default = _default_telemetry()
        if default is None or not default.is_file():
            return [], None
        files = [default]
    try:
        return files, summarize_telemetry(*(list(read_records(file)) for file in files))
    except TelemetryFormatError as error:
        raise PlanError("--telemetry", str(error)) from None
    except (KeyError, ValueError) as error:
        raise PlanError("--telemetry", f"unreadable record ({error})") from None


def resolve(args: argparse.Namespace) -> Resolved:
    """Flags first, then telemetry, then defaults; PlanError names what is missing."""
    files, summary = _load_telemetry(args)
    where = (
        f"the telemetry ({', '.join(map(str, files))})"
        if files
        else f"there is no telemetry file ({_default_telemetry() or 'no state directory'})"
    )
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

    checkpoint = pick(
        "checkpoint_seconds", args.checkpoint, summary.flush_seconds if summary else None
    )
    if checkpoint is None:
        raise PlanError(
            "--checkpoint",
            f"not given, and {where} has no flush seconds" if files else f"not given, and {where}",
        )
    if args.interruptions_per_day is not None:
        mtbi = rate_to_mtbi(args.interruptions_per_day)
        sources["mtbi_seconds"] = "flag"
    else:
        mtbi = pick("mtbi_seconds", args.mtbi, summary.mtbi_seconds if summary else None)
    if mtbi is None:
        raise PlanError(
            "--interruptions-per-day",
            f"not given (nor --mtbi), and {where} has no terminate notices to measure a rate"
            if files
            else f"not given (nor --mtbi), and {where}",
        )
    if mtbi <= 0:
        raise PlanError("--mtbi", "must be positive (a zero mean time between interruptions)")
    # What the telemetry saw of the notice path (notice to saved ack, every terminate flushed)
    # holds for the flushes it measured, not for a checkpoint cost given by flag.
    path_measured = summary is not None and args.checkpoint is None
    timing = Timing(
        checkpoint_seconds=checkpoint,
        mtbi_seconds=mtbi,
        restore_seconds=pick(
            "restore_seconds", args.restore, summary.restore_seconds if summary else None, 0.0
        ),
        restart_seconds=pick("restart_seconds", args.restart, None, 0.0),
        reacquire_seconds=pick("reacquire_seconds", args.reacquire, None, 0.0),
        detection_seconds=pick("detection_seconds", args.detection, None, 5.0),
        notice_lead_seconds=pick(
            "notice_lead_seconds",
            args.notice_lead,
            summary.notice_lead_seconds if summary else None,
        ),
        # A measured notice-to-saved time beats a guessed detection delay plus flush.
        response_seconds=pick(
            "response_seconds",
            None,
            summary.response_seconds
            if summary and path_measured and args.detection is None
            else None,
        ),
        drained_observed=summary.drained if summary and path_measured else None,
        steps_per_second=pick("steps_per_second", args.steps_per_second, None),
    )
    interval = args.interval
    if args.interval_steps is not None:
        if timing.steps_per_second is None:
            raise PlanError("--interval-steps", "needs --steps-per-second")
        interval = args.interval_steps / timing.steps_per_second
    intervals = choose_interval(timing, interval=interval, tax=args.tax)
    prices = None
    given = [name for name in PRICE_FLAGS if getattr(args, name) not in (None, 0.0)]
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
            checkpoint_gb=args.checkpoint_gb,
            storage_gb_month=args.storage_price,
            keep=args.keep,
            io_per_gb=args.io_price,
        )
    return Resolved(timing, sources, summary, files, intervals, prices)


def _steps(seconds: float, timing: Timing) -> int | None:
    if timing.steps_per_second is None:
        return None
    return round(seconds * timing.steps_per_second)


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
    return found


def build(resolved: Resolved) -> dict[str, Any]:
    """The whole plan as JSON-ready values."""
    timing = resolved.timing
    intervals = resolved.intervals
    chosen = intervals.chosen
    cost: Overhead = overhead(timing, chosen)
    lost: LostWork = lost_work(timing, chosen)
    priced: Costs | None = costs(timing, resolved.prices, chosen) if resolved.prices else None
    inputs = {
        name: {"value": getattr(timing, name), "source": resolved.sources.get(name, "default")}
        for name in (
            "checkpoint_seconds",
            "mtbi_seconds",
            "restore_seconds",
            "restart_seconds",
            "reacquire_seconds",
            "detection_seconds",
            "notice_lead_seconds",
            "response_seconds",
            "steps_per_second",
        )
    }
    inputs["interruptions_per_day"] = {
        "value": timing.interruptions_per_day,
        "source": inputs["mtbi_seconds"]["source"],
    }
    interval_rows = {
        "young": intervals.young,
        "daly": intervals.daly,
        "for_tax": intervals.for_tax,
        "chosen": chosen,
    }
    plan: dict[str, Any] = {
        "telemetry": (
            {
                "files": [str(file) for file in resolved.telemetry_files],
                **asdict(resolved.telemetry),
                "mtbi_seconds": resolved.telemetry.mtbi_seconds,
            }
            if resolved.telemetry
            else None
        ),
        "inputs": inputs,
        "intervals": {
            "basis": intervals.basis,
            "seconds": interval_rows,
            "steps": {
                key: (_steps(value, timing) if value is not None else None)
                for key, value in interval_rows.items()
            },
        },
        "overhead": {
            "model": cost.model,
            "checkpoint_tax": cost.checkpoint_tax,
            "rework": cost.rework,
            "restart": cost.restart,
            "idle": cost.idle,
            "billed": cost.billed,
            "total": cost.total,
            "per_interruption_seconds": cost.per_interruption_seconds,
        },
        "lost_work": {
            "periodic_seconds": lost.periodic,
            "drain_seconds": lost.drain,
            "applies": lost.applies,
            "why": lost.why,
        },
        "costs": None,
        "verdict": None,
        "summary": None,
        "notes": notes(resolved),
    }
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
        print(f"forewarn plan: {_flagged(error)}", file=sys.stderr)
        return 2
    if args.plot is not None:
        from .plot import PlotError, draw

        try:
            draw(resolved.timing, resolved.prices, resolved.intervals, args.plot)
        except PlotError as error:
            print(f"forewarn plan: --plot: {error}", file=sys.stderr)
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
