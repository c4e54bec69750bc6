"""The plain-text table `forewarn plan` prints by default, from the plan's JSON values."""

from __future__ import annotations

from typing import Any


def seconds_text(seconds: float | None) -> str:
    """`333 s`, `22.3 min`, `24 h`, `3.5 d`: readable without losing the order of magnitude."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 3600:
        return f"{seconds:.0f} s ({seconds / 60:.3g} min)"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:.3g} d"


def _percent(value: float) -> str:
    return f"{value * 100:.2f} %"


def _money(value: float) -> str:
    """Four decimals, or four significant digits where those pass the column's 12 places
    (a price of 1e12 printed `1000000000000.0000`, 1e300 a 301-digit number)."""
    fixed = f"{value:.4f}"
    return fixed if len(fixed) <= 12 else f"{value:.4g}"


def _rows(title: str, rows: list[tuple[str, str, str]]) -> list[str]:
    width = max(len(name) for name, _, _ in rows)
    value_width = max(len(value) for _, value, _ in rows)
    lines = [title]
    for name, value, note in rows:
        lines.append(f"  {name:<{width}}  {value:>{value_width}}  {note}".rstrip())
    return lines


def steps_text(count: float) -> str:
    """`1 step`, `1,167 steps`; past 2**53, where a float has no more digits, `1.31e+303
    steps` (`--steps-per-second 1e300` printed all 304 digits)."""
    if count > 2**53:
        return f"{count:.3g} steps"
    # A checkpoint comes at a step boundary: at least one step.
    whole = max(1, round(count))
    return f"{whole:,} step{'' if whole == 1 else 's'}"


def _steps(plan: dict[str, Any], key: str) -> str:
    steps = plan["intervals"]["steps"][key]
    if steps is None:
        return ""
    return steps_text(steps)


def _p95_source(given: dict[str, Any], used: float, upload: float) -> str:
    """Where the p95 the notice must cover came from. One below the mean is not used (the
    mean is): '10 s (flag)' was shown for --checkpoint-p95 5s, as if the flag had said 10 s."""
    if given["value"] is None:
        # With an upload the notice's save is kept once durable: the stall and the upload.
        return "(the mean + the upload)" if upload else "(the mean)"
    if given["value"] < used:
        floor = "the stall + the upload" if upload else "the mean"
        return f"({floor}: above the p95 {seconds_text(given['value'])}, {given['source']})"
    return f"({given['source']})"


def render(plan: dict[str, Any]) -> str:
    inputs = plan["inputs"]
    out: list[str] = []
    telemetry = plan["telemetry"]
    if telemetry:
        out.append(f"telemetry: {', '.join(telemetry['files'])}")
        out.append(
            f"  records: {telemetry['records']} over {seconds_text(telemetry['span_seconds'])}; "
            f"terminate notices: {telemetry['terminate_notices']} "
            f"({telemetry['late_notices']} too late to save on"
            + (
                f", {telemetry['unattended_notices']} reaching no job"
                if telemetry.get("unattended_notices")
                else ""
            )
            + f"); flushes: {telemetry['flushes']}; resumes: {telemetry['resumes']}"
        )
        out.append("")
    for note in plan["notes"]:
        out.append(f"note: {note}")
    if plan["notes"]:
        out.append("")

    def source(name: str) -> str:
        return f"({inputs[name]['source']})"

    rows = [
        (
            "checkpoint (flush), mean",
            seconds_text(inputs["checkpoint_seconds"]["value"]),
            source("checkpoint_seconds"),
        ),
        (
            "flush p95 (must fit the notice)",
            seconds_text(plan["flush"]["p95_seconds"]),
            _p95_source(
                inputs["checkpoint_p95_seconds"],
                plan["flush"]["p95_seconds"],
                inputs["upload_seconds"]["value"] or 0.0,
            ),
        ),
    ]
    # A background save only: the row says where the model counts a roll-back past it.
    if inputs["upload_seconds"]["value"]:
        rows.append(
            (
                "upload after the stall",
                seconds_text(inputs["upload_seconds"]["value"]),
                source("upload_seconds"),
            )
        )
    if inputs["mtbi_seconds"]["value"] is not None:
        rows.append(
            (
                "mean time between interruptions",
                seconds_text(inputs["mtbi_seconds"]["value"]),
                f"{inputs['interruptions_per_day']['value']:.3g} a day {source('mtbi_seconds')}",
            )
        )
    rows += [
        (
            "restore (reload)",
            seconds_text(inputs["restore_seconds"]["value"]),
            source("restore_seconds"),
        ),
        ("restart", seconds_text(inputs["restart_seconds"]["value"]), source("restart_seconds")),
        (
            "reacquire (unbilled wait)",
            seconds_text(inputs["reacquire_seconds"]["value"]),
            source("reacquire_seconds"),
        ),
        (
            "notice lead",
            seconds_text(inputs["notice_lead_seconds"]["value"]),
            source("notice_lead_seconds"),
        ),
        (
            (
                "notice to saved checkpoint, p95",
                seconds_text(inputs["response_seconds"]["value"]),
                source("response_seconds"),
            )
            if inputs["response_seconds"]["value"] is not None
            else (
                "detection",
                seconds_text(inputs["detection_seconds"]["value"]),
                source("detection_seconds"),
            )
        ),
        (
            "without a usable notice",
            _percent(inputs["no_notice_share"]["value"]),
            f"of interruptions {source('no_notice_share')}",
        ),
    ]
    out += _rows("Inputs", rows)
    measured = plan["flush"]["measured"]
    if measured:
        out.append(
            f"  (telemetry flushes: {measured['count']}; robust mean "
            f"{seconds_text(measured['mean_seconds'])} for the tax, median "
            f"{seconds_text(measured['median_seconds'])}, p95 "
            f"{seconds_text(measured['p95_seconds'])} for the notice)"
        )
    size = plan["checkpoint_size"]
    if size:
        out += ["", "Checkpoint size", f"  {size['how']}"]
        if size["flush_seconds"] is not None:
            out.append(
                f"  at {size['bandwidth_bytes_per_second'] / 1e6:.4g} MB/s: "
                f"{seconds_text(size['flush_seconds'])} a checkpoint"
            )
    seen = plan["notice"]
    out += [
        "",
        "Notice",
        f"  {'usable' if seen['usable'] else 'not usable'}: {seen['why']}",
        *([f"  taken {seen['assumed']}"] if seen["assumed"] else []),
        # Which way a lead is taken is a guess unless --notice-action said: show the guess.
        *(
            [f"  ({how['source']})"]
            if seen["assumed"]
            and (how := plan["inputs"].get("notice_action"))
            and how["source"].startswith(("default:", "telemetry:"))
            else []
        ),
        f"  interruptions that lose work: {_percent(seen['effective_no_notice_share'])}",
    ]
    seconds = plan["intervals"]["seconds"]
    rows = []
    if seconds["young"] is not None:
        rows += [
            ("Young, sqrt(2CM), full rate", seconds_text(seconds["young"]), _steps(plan, "young")),
            ("Daly, higher order, full rate", seconds_text(seconds["daly"]), _steps(plan, "daly")),
        ]
    if seconds["recommended"] is not None:
        rows.append(
            (
                "least overhead (recommended)",
                seconds_text(seconds["recommended"]),
                _steps(plan, "recommended"),
            )
        )
    if seconds["for_tax"] is not None:
        rows.append(
            ("for the target tax", seconds_text(seconds["for_tax"]), _steps(plan, "for_tax"))
        )
    rows.append(
        (
            f"evaluated ({plan['intervals']['basis']})",
            seconds_text(seconds["chosen"]),
            _steps(plan, "chosen"),
        )
    )
    out += ["", *_rows("Checkpoint interval (seconds of work between checkpoints)", rows)]
    cost = plan["overhead"]
    if cost is None:
        out += [
            "",
            *_rows(
                f"At {seconds_text(seconds['chosen'])}",
                [("checkpoint tax C/tau", _percent(plan["checkpoint_tax"]), "")],
            ),
        ]
    else:
        rows = [
            ("checkpoint tax", _percent(cost["checkpoint_tax"]), "(periodic checkpoints)"),
            ("lost work", _percent(cost["lost_work"]), "(redone after interruptions)"),
            ("notice flush", _percent(cost["notice_flush"]), ""),
            ("notice idle tail", _percent(cost["notice_idle"]), "(billed wait for the reclaim)"),
            ("restart and reload", _percent(cost["restart"]), ""),
            ("reacquisition idle", _percent(cost["reacquire"]), "(wall clock, unbilled)"),
            (
                "total",
                _percent(cost["total"]),
                f"one interruption costs {seconds_text(cost['per_interruption_seconds'])}",
            ),
            (
                (
                    "total without any usable notice",
                    _percent(plan["overhead_without_notice"]),
                    "(Daly's complete model)",
                )
                if plan["overhead_without_notice"] is not None
                else (
                    "total without any usable notice",
                    "-",
                    "(Daly's complete model: without a usable notice no work is ever kept at "
                    "this interval)",
                )
            ),
        ]
        if plan["overhead_at_recommended"] is not None:
            rows.append(
                (
                    "total at the recommended interval",
                    _percent(plan["overhead_at_recommended"]),
                    "",
                )
            )
        out += [
            "",
            *_rows(
                f"Overhead at {seconds_text(seconds['chosen'])} (share of useful time)",
                rows,
            ),
        ]
    if plan["warnings"]:
        out += ["", *(f"warning: {warning}" for warning in plan["warnings"])]
    if plan["costs"] is None:
        if cost is not None:
            out += [
                "",
                "Cost: give --spot-price and --on-demand-price (or --reserved-price) for "
                "the cost per useful hour and a verdict.",
            ]
        return "\n".join(out)
    options = plan["costs"]
    names = list(options)
    line_names: list[str] = []
    for option in options.values():
        line_names += [name for name in option["lines"] if name not in line_names]
    width = max(len(name) for name in [*line_names, "wall-clock hours per useful hour"])
    header = f"  {'':<{width}}" + "".join(f"  {name:>12}" for name in names)
    currency = plan.get("currency")
    out += ["", "Cost per useful hour" + (f" ({currency})" if currency else ""), header]
    for line in line_names:
        values = [options[name]["lines"].get(line) for name in names]
        cells = "".join(f"  {_money(v) if v is not None else '':>12}" for v in values)
        out.append(f"  {line:<{width}}{cells}".rstrip())
    out.append(
        f"  {'total':<{width}}"
        + "".join(f"  {_money(options[name]['per_useful_hour']):>12}" for name in names)
    )
    out.append(
        f"  {'wall-clock hours per useful hour':<{width}}"
        + "".join(f"  {options[name]['wall_hours_per_useful_hour']:>12.4f}" for name in names)
    )
    out += ["", f"Verdict: {plan['summary']}"]
    return "\n".join(out)


__all__ = ["render", "seconds_text", "steps_text"]
