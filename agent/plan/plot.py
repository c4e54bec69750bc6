"""`forewarn plan --plot`: the overhead against the checkpoint interval, at a glance.

One y-axis (overhead, % of useful time); the curve without any usable notice (Daly's
complete model) and the one with the notice as planned; the evaluated and recommended
intervals marked with their values; the "checkpoint 3 % of the time" rule of thumb as a
reference line; the x-axis in minutes and hours (and steps on top when the speed is known).
matplotlib comes from the `plot` extra and is imported only here, only when asked for.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from forewarn.protocol.errors import ForewarnError

from .inputs import Timing
from .model import (
    RULE_OF_THUMB_TAX,
    Intervals,
    notice,
    overhead,
    overhead_without_notice,
)
from .table import seconds_text, steps_text


class PlotError(ForewarnError, RuntimeError):
    """The plot cannot be drawn (matplotlib missing, file not writable)."""


def interval_grid(timing: Timing, intervals: Intervals, points: int = 240) -> list[float]:
    """Log-spaced intervals around the interesting ones: from half the smallest of the
    checkpoint cost and the marked intervals to ten times the largest (three decades at least)."""
    marked = [
        value
        for value in (intervals.young, intervals.daly, intervals.recommended, intervals.chosen)
        if value is not None and value > 0
    ]
    low = min(value for value in (timing.checkpoint_seconds, *marked) if value > 0) / 2
    high = max(max(marked) * 10, low * 1000)
    step = (math.log10(high) - math.log10(low)) / (points - 1)
    return [10 ** (math.log10(low) + index * step) for index in range(points)]


# Ticks a reader knows, in seconds.
_TICKS = [
    1,
    10,
    30,
    60,
    300,
    900,
    1800,
    3600,
    3 * 3600,
    6 * 3600,
    12 * 3600,
    86400,
    2 * 86400,
    7 * 86400,
]


def duration_label(seconds: float) -> str:
    """`30 s`, `5 min`, `1 h`, `2 d`: a tick label."""
    if seconds < 60:
        return f"{seconds:g} s"
    if seconds < 3600:
        return f"{seconds / 60:g} min"
    if seconds < 86400:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 86400:g} d"


def _share_text(percent: float) -> str:
    """`120`, and `9.5e+21` rather than the 22 digits that pushed both ends of the legend
    off the PNG (a 45 s checkpoint against one interruption a second)."""
    return f"{percent:.0f}" if percent < 1e6 else f"{percent:.2g}"


def draw(timing: Timing, intervals: Intervals, path: Path) -> None:
    """Draw the plot into `path` (PNG)."""
    figure = build_figure(timing, intervals)
    try:
        # The format named, not guessed from the name: matplotlib appended `.png` to a name
        # without it (`--plot /tmp` wrote /tmp.png) while the command said it wrote `path`.
        figure.savefig(path, format="png")
    except OSError as error:
        raise PlotError(f"cannot write {path}: {error}") from None
    finally:
        import matplotlib.pyplot as plt

        plt.close(figure)


def build_figure(timing: Timing, intervals: Intervals) -> Any:
    """The matplotlib Figure (the caller closes it)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        from forewarn.protocol.install import extra_hint

        raise PlotError(f"matplotlib is not installed: {extra_hint('plot')}") from None
    grid = interval_grid(timing, intervals)
    seen = notice(timing)
    blind = [overhead_without_notice(timing, tau).total * 100 for tau in grid]
    planned = [overhead(timing, tau).total * 100 for tau in grid]
    chosen = intervals.chosen
    chosen_total = overhead(timing, chosen).total * 100
    lowest_blind = min(blind)
    top = max(5.0, min(chosen_total * 3, max(lowest_blind * 3, chosen_total * 1.5), 100.0))
    # The curve without notice is drawn where it is not off the chart: its minimum in view.
    top = max(top, min(lowest_blind * 1.15, 100.0))
    figure, axis = plt.subplots(figsize=(9, 5.5), dpi=100)
    axis.plot(
        grid,
        blind,
        "--",
        color="tab:red",
        linewidth=1.6,
        label="no usable notice (Daly's complete model)"
        + (
            ""
            if lowest_blind <= top
            else f", off the chart: at least {_share_text(lowest_blind)} %"
            if math.isfinite(lowest_blind)
            else ", off the chart: no work ever kept"
        ),
    )
    if timing.notice_lead_seconds:
        label = (
            f"with the notice, {seen.no_notice_share:.0%} of interruptions without"
            if seen.usable
            else "with the notice: too short for the flush, trained through"
        )
        axis.plot(grid, planned, "-", color="tab:blue", linewidth=2.4, label=label)
    axis.set_ylim(0, top)
    rule = timing.checkpoint_seconds / RULE_OF_THUMB_TAX
    axis.axvline(
        rule,
        color="tab:gray",
        linestyle=":",
        linewidth=1.4,
        label=f"rule of thumb: checkpoint 3 % of the time ({duration_label_exact(rule)})",
    )
    if intervals.recommended is not None and not math.isclose(
        intervals.recommended, chosen, rel_tol=1e-6
    ):
        best = overhead(timing, intervals.recommended).total * 100
        axis.plot([intervals.recommended], [best], "o", color="tab:green", markersize=7)
        axis.annotate(
            f"least overhead: {duration_label_exact(intervals.recommended)}, {best:.2f} %",
            (intervals.recommended, best),
            textcoords="offset points",
            xytext=(8, -14),
            fontsize=9,
            color="tab:green",
        )
    axis.axvline(chosen, color="black", linewidth=1.2)
    axis.plot([chosen], [chosen_total], "o", color="black", markersize=8)
    steps = ""
    if timing.steps_per_second:
        # At least one step, as the table says: a checkpoint comes at a step boundary.
        count = chosen * timing.steps_per_second
        steps = f", {steps_text(count)}"
    # The label goes on the side of the marker with more room.
    right_half = math.log(chosen / grid[0]) > 0.55 * math.log(grid[-1] / grid[0])
    marked = axis.annotate(
        f"{intervals.basis}: {duration_label_exact(chosen)}{steps}\noverhead {chosen_total:.2f} %",
        (chosen, chosen_total),
        textcoords="offset points",
        # Below the marker: nothing is drawn under the curves.
        xytext=(-10, -16) if right_half else (10, -16),
        ha="right" if right_half else "left",
        va="top",
        fontsize=10,
        fontweight="bold",
        bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85},
    )
    axis.set_xscale("log")
    axis.set_xlim(grid[0], grid[-1])
    ticks = [tick for tick in _TICKS if grid[0] <= tick <= grid[-1]]
    axis.set_xticks(ticks, [duration_label(tick) for tick in ticks])
    axis.minorticks_off()
    axis.set_xlabel("checkpoint interval (work between checkpoints)")
    axis.set_ylabel("overhead, % of useful time")
    axis.grid(True, alpha=0.3)
    if timing.steps_per_second:
        rate = timing.steps_per_second

        def to_steps(seconds: Any) -> Any:
            return seconds * rate

        def to_seconds(steps: Any) -> Any:
            return steps / rate

        top_axis = axis.secondary_xaxis("top", functions=(to_steps, to_seconds))
        top_axis.set_xlabel(f"steps at {rate:g} steps/s")
        top_axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: count_label(value)))
    legend = axis.legend(
        loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize=9, frameon=False
    )
    if legend.get_window_extent().width > figure.bbox.width:
        # Two long labels side by side ran off both edges of the PNG: one a line, then.
        legend.remove()
        axis.legend(
            loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=1, fontsize=9, frameon=False
        )
    lead = timing.notice_lead_seconds
    axis.set_title(
        f"checkpoint {seconds_text(timing.checkpoint_seconds)}, "
        f"{per_day(timing.interruptions_per_day or 0)}, "
        f"notice lead {seconds_text(lead) if lead else 'none'}"
        f"{'' if seen.usable or not lead else ' (too short)'}, "
        f"restart and reload {seconds_text(timing.restart_seconds + timing.restore_seconds)}",
        fontsize=10,
    )
    figure.tight_layout()
    if marked.get_window_extent().y0 < axis.get_window_extent().y0:
        # A small overhead leaves no room below the marker: the label crossed the x axis,
        # its box over the tick labels. Above it, then.
        marked.xyann = (marked.xyann[0], 16)
        marked.set_verticalalignment("bottom")
    return figure


def per_day(rate: float) -> str:
    """`1 interruption a day`, `0.5 interruptions a day`: the title once read `1 interruptions`."""
    shown = f"{rate:.3g}"
    return f"{shown} interruption{'' if shown == '1' else 's'} a day"


def count_label(count: float) -> str:
    """`500`, `10k`, `1.2M`, `2.5G`: a step count on the top axis; past 1e12, `1.31e+303`
    (it said `1.31e+297M`)."""
    if count >= 1e12:
        return f"{count:.3g}"
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= scale:
            return f"{count / scale:g}{suffix}"
    return f"{count:g}"


def duration_label_exact(seconds: float) -> str:
    """`333 s`, `21.8 min`, `2.5 h`: three significant digits in the largest fitting unit."""
    # Not table.seconds_text on purpose: a label on the plot names the minutes alone
    # (`21.8 min`); the table keeps the seconds beside them (`1308 s (21.8 min)`).
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.3g} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:.3g} d"


__all__ = [
    "PlotError",
    "build_figure",
    "count_label",
    "draw",
    "duration_label",
    "duration_label_exact",
    "interval_grid",
    "per_day",
]
