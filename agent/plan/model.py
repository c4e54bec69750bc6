"""Checkpoint intervals and the overhead they cost, from the job's timing.

The overhead is the exact model of `forewarn.clients.overhead` (Daly's complete model for
interruptions without a usable notice; flush, billed idle tail and restart for those with
one). The recommended interval minimizes it; Young's and Daly's closed forms, at the full
interruption rate, are shown beside it for reference. Every time is in seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from forewarn.clients.adaptive import daly_interval, interval_for_tax, young_interval
from forewarn.clients.overhead import Breakdown, Scenario, best_interval, breakdown

from .inputs import PlanError, Timing

# The common rule of thumb: spend about 3 % of the time checkpointing.
RULE_OF_THUMB_TAX = 0.03
DEFAULT_WARN_TAX = 0.10


def checkpoint_tax(checkpoint_seconds: float, interval_seconds: float) -> float:
    """The share of compute time spent checkpointing without interruptions: C / tau."""
    if interval_seconds <= 0:
        raise PlanError("interval", f"must be positive (got {interval_seconds})")
    return checkpoint_seconds / interval_seconds


def interruption_share(seconds_per_interruption: float, mtbi_seconds: float) -> float:
    """The share of time one interruption costs: seconds per interruption over the mean time
    between them (one 6-minute reclaim a day is about 0.4 %)."""
    if mtbi_seconds <= 0:
        raise PlanError("mtbi_seconds", f"must be positive (got {mtbi_seconds})")
    return seconds_per_interruption / mtbi_seconds


@dataclass(frozen=True)
class Notice:
    """Whether the notice covers the flush, and the share of interruptions that cost work."""

    lead_seconds: float | None
    needs_seconds: float
    usable: bool
    no_notice_share: float
    effective_no_notice_share: float
    why: str
    # How the notice is taken to reach the job (None without a lead).
    assumed: str | None = None


def notice(timing: Timing) -> Notice:
    lead = timing.notice_lead_seconds
    needs = timing.notice_to_saved
    how = (
        "measured notice to saved checkpoint"
        if timing.response_seconds is not None
        else f"detection {timing.detection_seconds:g} s + flush p95 {timing.flush_p95:.3g} s"
    )
    # The terminate the job exits on: for a long drain, the one sent at the exit margin.
    acted = timing.terminate_lead_seconds
    if lead is None or acted is None:
        usable = False
        why = "no notice lead known (give --notice-lead): every interruption costs lost work"
    elif not lead:
        # Given as 0, or measured so (every notice published past its deadline): it is
        # known, and asking for it again sent the user after a figure they had given.
        usable = False
        why = "notice lead 0 s: no time to save, so every interruption costs lost work"
    elif acted >= needs:
        usable = True
        why = (
            f"notice lead {_secs(lead)} s covers the {_secs(needs)} s to a saved checkpoint ({how})"
        )
    else:
        usable = False
        why = (
            f"notice lead {_secs(acted)} s is shorter than the {_secs(needs)} s to a saved "
            "checkpoint "
            f"({how}): the flush would not finish, so notices count as without"
        )
    share = timing.no_notice_share
    # A notice too short to save on is trained through whichever way it comes.
    assumed = _acted_how(timing) if usable else None
    return Notice(lead, needs, usable, share, share if usable else 1.0, why, assumed)


def _secs(seconds: float) -> str:
    """A lead and what it must cover, alike: four digits (a measured 0.0569999 s beside the
    0.057 s it covers read as two times), whole seconds from 10,000 on (not 1e+04)."""
    return f"{seconds:.0f}" if seconds >= 1e4 else f"{seconds:.4g}"


def _acted_how(timing: Timing) -> str:
    """Which way the plan takes the notice to reach the job, said in every plan with a
    lead: the billed wait differs by the whole lead between the two."""
    if timing.drains_first:
        return (
            "as a drain: the job saves at once and trains on; the agent sends the terminate "
            f"{timing.escalation_margin:.3g} s before the deadline (the exit margin: the larger "
            f"of {timing.exit_margin_seconds:g} s and twice the flush p95), so the billed wait "
            "is within that margin. Only a delivered notice does this: the share without a "
            "usable notice stands for the rest"
        )
    if timing.notice_action == "drain":
        return (
            f"as a drain within the exit margin ({timing.escalation_margin:.3g} s): the agent "
            "sends it as terminate at once, the job saves and exits"
        )
    return (
        "as a terminate: the job saves and exits at once, and the machine waits, billed, "
        "for the reclaim"
    )


@dataclass(frozen=True)
class NoticeWorth:
    """The least overhead with the notice acted on, beside the least with none acted on.

    Acting on a notice trades the work it saves for the billed wait from the save to the
    reclaim: a long terminate lead for a fast checkpoint costs more than the work it saves
    (a 14-minute terminate, a 2 s checkpoint, two reclaims a day: 2.19 % against 1.1 %).
    """

    acted_on: float  # at the recommended interval
    acted_on_interval_seconds: float
    # Every interruption taken as without a usable notice (Daly's complete model), at its own
    # best interval; None where no interval keeps any work then.
    ignored: float | None
    ignored_interval_seconds: float | None
    wait_seconds: float  # the billed wait from the save to the reclaim, per notice acted on

    @property
    def costs_more_than_it_saves(self) -> bool:
        return self.ignored is not None and self.ignored < self.acted_on


def notice_worth(timing: Timing) -> NoticeWorth | None:
    """What acting on a usable notice is worth, at the best interval either way; None
    without a rate, a checkpoint cost or a usable notice."""
    if timing.mtbi_seconds is None or timing.checkpoint_seconds <= 0 or not notice(timing).usable:
        return None
    scenario = _scenario(timing)
    cap = timing.max_interval_seconds
    acted_interval = best_interval(scenario, max_seconds=cap)
    acted = breakdown(scenario, acted_interval).total
    blind = scenario.without_notice()
    blind_interval = best_interval(blind, max_seconds=cap)
    ignored = breakdown(blind, blind_interval).total
    kept = math.isfinite(ignored)
    lead = timing.terminate_lead_seconds or 0.0
    wait = max(lead - timing.detection_seconds - timing.checkpoint_seconds, 0.0)
    return NoticeWorth(
        acted, acted_interval, ignored if kept else None, blind_interval if kept else None, wait
    )


@dataclass(frozen=True)
class ReclaimLoss:
    """What one reclaim costs in steps, by the model: `steps` lost, and why."""

    steps: int
    notice: Notice

    @property
    def why(self) -> str:
        if self.notice.usable:
            return f"none lost: {self.notice.why}"
        return (
            f"{self.steps} steps lost: {self.notice.why}; the steps since the last completed "
            "checkpoint are lost"
        )


def reclaim_loss(timing: Timing, *, step: int, checkpoint_step: int) -> ReclaimLoss:
    """The steps one reclaim loses, as the overhead model counts them: with a usable notice
    (its lead covers detection and the flush's p95) none; without, every step since the last
    completed checkpoint. `step` is the last step trained when the machine went,
    `checkpoint_step` the step of the newest checkpoint completed by then."""
    if checkpoint_step > step:
        raise PlanError(
            "checkpoint_step",
            f"the checkpoint ({checkpoint_step}) cannot be after the last step ({step})",
        )
    found = notice(timing)
    return ReclaimLoss(0 if found.usable else step - checkpoint_step, found)


@dataclass(frozen=True)
class Intervals:
    young: float | None
    daly: float | None
    recommended: float | None
    for_tax: float | None
    chosen: float
    basis: str


def recommended_interval(timing: Timing) -> float:
    """The interval that minimizes the exact expected overhead, at most the longest
    accepted (`max_interval_seconds`)."""
    if timing.checkpoint_seconds <= 0:
        raise PlanError("checkpoint_seconds", "a checkpoint that costs 0 s has no optimal interval")
    scenario = _scenario(timing)
    found = best_interval(scenario, max_seconds=timing.max_interval_seconds)
    if math.isinf(breakdown(scenario, found).total):
        if timing.upload_seconds and math.isfinite(
            breakdown(replace(scenario, upload_seconds=0), found).total
        ):
            # Saves come at most once per upload: it, not the rate, keeps no work.
            raise PlanError(
                "upload_seconds",
                f"a {_secs(timing.upload_seconds)} s upload is so long against "
                f"{timing.mtbi_seconds:g} s between interruptions that the job would never "
                "keep any work (a save due while one uploads waits for it)",
            )
        raise PlanError(
            "mtbi_seconds",
            f"{timing.mtbi_seconds:g} s between interruptions is too short for a "
            f"{timing.restart_seconds + timing.restore_seconds:g} s restart and reload and a "
            f"{timing.checkpoint_seconds:g} s checkpoint: the job would never keep any work",
        )
    return found


def choose_interval(
    timing: Timing, *, interval: float | None = None, tax: float | None = None
) -> Intervals:
    """Young's and Daly's closed forms, the recommended interval, the one for a target tax,
    and the one to evaluate: the given interval, else the one for the tax, else the
    recommended one."""
    young = daly = recommended = None
    if timing.mtbi_seconds is not None:
        young = young_interval(timing.checkpoint_seconds, timing.mtbi_seconds)
        daly = daly_interval(timing.checkpoint_seconds, timing.mtbi_seconds)
        # M finite, 2CM not (1e-300 interruptions a day): the table read "inf d", the JSON
        # "Infinity".
        if not (math.isfinite(young) and math.isfinite(daly)):
            if timing.checkpoint_seconds >= timing.mtbi_seconds:
                # The checkpoint overflows 2CM, not the rate: a 1e304 s one said that one
                # interruption a day "is too long". Refused as what it is, work never kept.
                recommended_interval(timing)
            raise PlanError(
                "mtbi_seconds",
                f"{timing.mtbi_seconds:g} s between interruptions "
                f"({timing.interruptions_per_day:g} a day) is too long: Young's interval "
                f"sqrt(2CM) for a {timing.checkpoint_seconds:g} s checkpoint is not a finite "
                "number",
            )
        if timing.checkpoint_seconds > 0:
            recommended = recommended_interval(timing)
    for_tax = None
    if tax is not None:
        try:
            for_tax = interval_for_tax(timing.checkpoint_seconds, tax)
        except ValueError as error:
            raise PlanError("tax", str(error)) from None
    if for_tax is not None and not math.isfinite(for_tax):
        raise PlanError(
            "tax",
            f"{tax:g} is so small that the interval for it ({timing.checkpoint_seconds:g} s / "
            f"{tax:g}) has no end",
        )
    if interval is not None:
        if not interval > 0:
            raise PlanError("interval", f"must be positive (got {interval})")
        if not math.isfinite(interval):
            raise PlanError("interval", f"must be finite (got {interval})")
        if timing.mtbi_seconds is not None and math.isinf(overhead(timing, interval).total):
            raise PlanError(
                "interval",
                f"{interval:g} s is so long against {timing.mtbi_seconds:g} s between "
                "interruptions that the job would never keep any work",
            )
        return Intervals(young, daly, recommended, for_tax, interval, "given")
    if for_tax is not None:
        if for_tax <= 0:
            raise PlanError("tax", "a checkpoint that costs 0 s gives no interval for a tax")
        # As for --interval: the overhead there is infinite, and the table printed inf and
        # nan (the JSON Infinity and NaN).
        if timing.mtbi_seconds is not None and math.isinf(overhead(timing, for_tax).total):
            raise PlanError(
                "tax",
                f"{tax:g} gives an interval of {for_tax:g} s, so long against "
                f"{timing.mtbi_seconds:g} s between interruptions that the job would never "
                "keep any work",
            )
        return Intervals(young, daly, recommended, for_tax, for_tax, "target tax")
    if timing.mtbi_seconds is None:
        raise PlanError(
            "interruptions_per_day",
            "needed for the recommended interval (or give --tax or --interval for the tax alone)",
        )
    if recommended is None:
        raise PlanError("checkpoint_seconds", "a checkpoint that costs 0 s has no optimal interval")
    return Intervals(young, daly, recommended, for_tax, recommended, "minimum overhead")


def _scenario(timing: Timing) -> Scenario:
    try:
        return timing.scenario()
    except ValueError as error:
        if isinstance(error, PlanError):
            raise
        raise PlanError("inputs", str(error)) from None


def overhead(timing: Timing, interval_seconds: float) -> Breakdown:
    """The expected overhead at the interval, part by part (needs the interruption rate)."""
    if not interval_seconds > 0:
        raise PlanError("interval", f"must be positive (got {interval_seconds})")
    return breakdown(_scenario(timing), interval_seconds)


def overhead_without_notice(timing: Timing, interval_seconds: float) -> Breakdown:
    """The same job if no interruption came with a usable notice (Daly's complete model)."""
    return breakdown(_scenario(timing).without_notice(), interval_seconds)


def warnings(
    timing: Timing, intervals: Intervals, *, warn_tax: float = DEFAULT_WARN_TAX
) -> list[str]:
    """Where the answer is not sane."""
    found = []
    chosen = intervals.chosen
    tax = checkpoint_tax(timing.checkpoint_seconds, chosen)
    if tax > warn_tax:
        found.append(
            f"the checkpoint tax at {chosen:.4g} s is {tax:.1%}, above {warn_tax:.0%}: "
            "checkpoint less often, or make the checkpoint faster"
        )
    if chosen < timing.checkpoint_seconds:
        found.append(
            f"the interval ({chosen:.4g} s) is shorter than the flush "
            f"({timing.checkpoint_seconds:.4g} s): the job spends more time saving than training"
        )
    if timing.upload_seconds > chosen:
        found.append(
            f"the upload after each save ({timing.upload_seconds:.4g} s) outlasts the "
            f"interval ({chosen:.4g} s): a save due while one uploads waits for it, training "
            f"on, so checkpoints come every {timing.upload_seconds:.4g} s, as the overhead "
            "counts them"
        )
    given_p95 = timing.checkpoint_p95_seconds
    if given_p95 is not None and given_p95 < timing.flush_floor:
        found.append(_p95_below_the_floor(timing, given_p95))
    if timing.mtbi_seconds is not None:
        found += _beyond_the_useful_time(timing, chosen)
        found += _notice_not_worth_it(timing)
    lead = timing.notice_lead_seconds
    if lead and lead < timing.notice_to_saved:
        found.append(
            f"the notice lead ({lead:g} s) is shorter than detection plus the flush "
            f"({timing.notice_to_saved:.4g} s, on the flush's p95): the last checkpoint "
            "would not finish, so interruptions with notice still lose work"
        )
    return found


def _p95_below_the_floor(timing: Timing, given: float) -> str:
    """A flush p95 below the save's own mean: both figures, and the one used."""
    floor = timing.flush_floor
    if timing.upload_seconds:
        what = (
            f"the {timing.checkpoint_seconds:.4g} s stall + the {timing.upload_seconds:.4g} s "
            f"upload ({floor:.4g} s)"
        )
        hint = "with an upload it is the p95 of the time until durable, not of the stall"
    else:
        what = f"the mean flush ({floor:.4g} s)"
        hint = "a 95th percentile is not below the mean"
    return (
        f"the flush p95 ({given:.4g} s) is below {what}: {floor:.4g} s is used for what a "
        f"notice must cover ({hint})"
    )


def _notice_not_worth_it(timing: Timing) -> list[str]:
    """Acting on the notice costs more than not: say so with both figures. (A 14-minute
    terminate for a 2 s checkpoint was planned at 2.19 % with no word that 1.1 % was there
    for not stopping on it.)"""
    worth = notice_worth(timing)
    if worth is None or worth.ignored is None or worth.ignored_interval_seconds is None:
        return []
    if not worth.costs_more_than_it_saves:
        return []
    return [
        f"acting on the notice costs more than it saves: at best {worth.acted_on:.2%} with it "
        f"acted on (a checkpoint every {worth.acted_on_interval_seconds:.0f} s, and a billed "
        f"wait of {worth.wait_seconds:.0f} s from each notice's save to the reclaim), against "
        f"{worth.ignored:.2%} not acting on any notice and checkpointing every "
        f"{worth.ignored_interval_seconds:.0f} s (Daly's complete model). The wait is the "
        "cost: a job that trains on and saves shortly before the deadline (a drain: "
        "--notice-action drain, where the provider's notice allows it) or a machine released "
        "once saved (Azure's approval after the ack, azure.approve = after-ack: give "
        "--notice-lead as the time to the save) does not pay it"
    ]


def _beyond_the_useful_time(timing: Timing, chosen: float) -> list[str]:
    """An overhead above the useful time that the tax does not explain: a restart or an
    interval long against the time between interruptions. (A 24 h restart against 1 h
    between them printed 2.9e12 % with no warning.)"""
    cost = overhead(timing, chosen)
    rest = cost.total - cost.checkpoint_tax
    if not (cost.total > 1 and rest > cost.checkpoint_tax):
        return []
    m = timing.mtbi_seconds or math.inf
    restart = timing.restart_seconds + timing.restore_seconds
    # The largest part names the cause: a 14-minute terminate against 15 minutes between
    # interruptions (86 % billed wait, 13 % restart) was put down to the restart.
    largest = max(
        ("restart", cost.restart),
        ("lost", cost.lost_work),
        ("notice", cost.notice_flush + cost.notice_idle),
        ("reacquire", cost.reacquire),
        key=lambda part: part[1],
    )[0]
    if largest == "restart":
        why = (
            f"most of it is restart and reload ({restart:.4g} s against {m:.4g} s between "
            f"interruptions: only {math.exp(-restart / m):.2g} of restarts finish)"
        )
    elif largest == "notice":
        why = (
            "most of it is the billed wait for the reclaim after each notice's save (a "
            f"notice lead of {timing.terminate_lead_seconds or 0:.4g} s against {m:.4g} s "
            "between interruptions)"
        )
    elif largest == "reacquire":
        why = (
            f"most of it is waiting for capacity ({timing.reacquire_seconds:.4g} s after each "
            f"loss against {m:.4g} s between interruptions)"
        )
    else:
        why = (
            f"most of it is work lost ({chosen:.4g} s of work and a "
            f"{timing.checkpoint_seconds:.4g} s checkpoint against {m:.4g} s between "
            "interruptions)"
        )
    return [
        f"the overhead at {chosen:.4g} s is {cost.total:.3g}x the useful time: {why}; "
        "this capacity costs the job more time than it gives"
    ]


__all__ = [
    "DEFAULT_WARN_TAX",
    "RULE_OF_THUMB_TAX",
    "Intervals",
    "Notice",
    "NoticeWorth",
    "ReclaimLoss",
    "checkpoint_tax",
    "choose_interval",
    "daly_interval",
    "interruption_share",
    "interval_for_tax",
    "notice",
    "notice_worth",
    "overhead",
    "overhead_without_notice",
    "reclaim_loss",
    "recommended_interval",
    "warnings",
    "young_interval",
]
