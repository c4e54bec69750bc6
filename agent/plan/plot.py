"""`forewarn plan --plot`: overhead and cost per useful hour against the interval.

matplotlib comes from the `plot` extra and is imported only here, only when asked for.
"""

from __future__ import annotations

import math
from pathlib import Path

from .costs import costs
from .inputs import PlanError, Prices, Timing
from .model import Intervals, Model, overhead


class PlotError(RuntimeError):
    """The plot cannot be drawn (matplotlib missing, file not writable)."""


def interval_grid(timing: Timing, intervals: Intervals, points: int = 240) -> list[float]:
    """Log-spaced intervals around the interesting ones: from half the smallest of the
    checkpoint cost and the marked intervals to ten times the largest (three decades at least)."""
    marked = [intervals.young, intervals.daly, intervals.chosen]
    low = min(value for value in (timing.checkpoint_seconds, *marked) if value > 0) / 2
    high = max(max(marked) * 10, low * 1000)
    step = (math.log10(high) - math.log10(low)) / (points - 1)
    return [10 ** (math.log10(low) + index * step) for index in range(points)]


def draw(timing: Timing, prices: Prices | None, intervals: Intervals, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError("matplotlib is not installed: pip install 'forewarn[plot]'") from None
    grid = interval_grid(timing, intervals)
    applies = overhead(timing, intervals.chosen).model
    figure, axis = plt.subplots(figsize=(9, 6), dpi=120)
    models: tuple[tuple[Model, str], ...] = (("periodic", "--"), ("drain", "-"))
    for model, style in models:
        values = [overhead(timing, tau, model).total * 100 for tau in grid]
        label = "periodic checkpoints only" if model == "periodic" else "with forewarn drain"
        if model == applies:
            label += " (applies)"
        axis.plot(
            grid,
            values,
            style,
            color="tab:blue",
            linewidth=2 if model == applies else 1.2,
            label=f"overhead, {label}",
        )
    axis.set_xscale("log")
    axis.set_xlabel("checkpoint interval (seconds of work between checkpoints)")
    axis.set_ylabel("overhead, % of useful time", color="tab:blue")
    chosen_total = overhead(timing, intervals.chosen).total * 100
    axis.set_ylim(0, max(5.0, min(chosen_total * 4, 100.0)))
    axis.grid(True, which="both", alpha=0.25)
    for value, label, color in (
        (intervals.young, f"Young {intervals.young:.3g} s", "tab:gray"),
        (intervals.daly, f"Daly {intervals.daly:.3g} s", "tab:green"),
    ):
        axis.axvline(value, color=color, linestyle=":", linewidth=1.2, label=label)
    if intervals.basis != "Daly optimum":
        axis.axvline(
            intervals.chosen,
            color="tab:purple",
            linestyle="-.",
            linewidth=1.2,
            label=f"evaluated {intervals.chosen:.3g} s ({intervals.basis})",
        )
    handles, labels = axis.get_legend_handles_labels()
    if prices is not None:
        right = axis.twinx()
        try:
            priced = [costs(timing, prices, tau) for tau in grid]
        except PlanError as error:
            raise PlotError(str(error)) from None
        spot = [plan.spot.per_useful_hour for plan in priced]
        right.plot(grid, spot, color="tab:orange", linewidth=2, label="spot, per useful hour")
        tops = [min(spot)]
        for index, option in enumerate(priced[0].alternatives):
            steady = [plan.alternatives[index].per_useful_hour for plan in priced]
            tops.append(min(steady))
            right.plot(
                grid,
                steady,
                color="tab:red",
                linestyle="-" if index == 0 else "--",
                linewidth=1.2,
                label=f"{option.name}, per useful hour",
            )
        right.set_ylabel("cost per useful hour", color="tab:orange")
        right.set_ylim(0, max(tops) * 1.6)
        extra_handles, extra_labels = right.get_legend_handles_labels()
        handles += extra_handles
        labels += extra_labels
    axis.legend(
        handles,
        labels,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncol=2,
        fontsize=8,
        frameon=False,
    )
    axis.set_title(
        f"checkpoint {timing.checkpoint_seconds:.3g} s, interruptions a day: "
        f"{timing.interruptions_per_day:.3g}, restart and reload "
        f"{timing.restart_seconds + timing.restore_seconds:.3g} s"
    )
    figure.tight_layout()
    try:
        figure.savefig(path)
    except OSError as error:
        raise PlotError(f"cannot write {path}: {error}") from None
    finally:
        plt.close(figure)


__all__ = ["PlotError", "draw", "interval_grid"]
