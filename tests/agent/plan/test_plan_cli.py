"""`forewarn plan`: flags, telemetry (a real drill's), the table, --json, --plot, exit 2."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from forewarn.agent.plan import cli as plan_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples, forewarn_cmd, run_forewarn

FIGURES = [
    "--checkpoint",
    "10s",
    "--tax",
    "3%",
    "--steps-per-second",
    "3.5",
    "--interruptions-per-day",
    "1",
    "--notice-lead",
    "2m",
    "--restart",
    "350s",
]
PRICES = ["--spot-price", "1.2", "--on-demand-price", "3.9"]


@pytest.fixture(autouse=True)
def own_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("FOREWARN_STATE_DIR", str(state))
    monkeypatch.delenv("FOREWARN_CONFIG", raising=False)
    return state


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert plan_cli.main([*argv, "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


def fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    try:
        code = plan_cli.main(list(argv))
    except SystemExit as exit:  # argparse rejects the value itself
        code = int(exit.code or 0)
    assert code == 2
    return capsys.readouterr().err


def test_the_published_figures_from_flags(capsys: pytest.CaptureFixture[str]) -> None:
    plan = plan_json(capsys, *FIGURES, *PRICES)
    intervals = plan["intervals"]
    assert intervals["basis"] == "target tax"
    assert intervals["seconds"]["chosen"] == pytest.approx(333.3, abs=0.1)
    assert intervals["steps"]["chosen"] == 1167
    assert intervals["seconds"]["young"] == pytest.approx(1314.5, abs=0.1)
    assert intervals["seconds"]["daly"] == pytest.approx(1307.9, abs=0.1)
    assert plan["checkpoint_tax"] == pytest.approx(0.03)
    cost = plan["overhead"]
    # One 6-minute reclaim a day (350 s restart and reload; the 10 s flush apart) ~ 0.4 %.
    assert round(cost["restart"] * 100, 1) == 0.4
    assert cost["checkpoint_tax"] == pytest.approx(0.03, rel=0.01)
    assert plan["notice"]["usable"] is True
    assert plan["notice"]["needs_seconds"] == 15.0
    assert plan["notice"]["why"] == (
        "notice lead 120 s covers the 15 s to a saved checkpoint (detection 5 s + flush p95 10 s)"
    )
    # With the notice, the periodic interval insures against the 10 % without one.
    assert intervals["seconds"]["recommended"] > 3 * intervals["seconds"]["daly"]
    assert plan["overhead_at_recommended"] < cost["total"] < plan["overhead_without_notice"]
    assert plan["verdict"] == "spot"
    assert plan["costs"]["spot"]["per_useful_hour"] < plan["costs"]["on-demand"]["per_useful_hour"]
    assert plan["inputs"]["checkpoint_seconds"] == {"value": 10.0, "source": "flag"}
    assert plan["warnings"] == []


def test_the_table_shows_the_numbers_and_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_cli.main([*FIGURES, *PRICES, "--reserved-price", "2.5"]) == 0
    out = capsys.readouterr().out
    assert "for the target tax              333 s (5.56 min)  1,167 steps" in out
    assert "usable: notice lead 120 s covers" in out
    assert "restart and reload                 0.42 %" in out
    assert "Verdict: spot:" in out and "reserved" in out
    assert "wall-clock hours per useful hour" in out


def test_a_verdict_against_a_free_alternative_names_no_percentage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Reserved hardware already paid for: the verdict said spot cost "0% more".
    plan = plan_json(capsys, *FIGURES, "--spot-price", "1.20", "--reserved-price", "0")
    assert plan["verdict"] == "reserved"
    assert "0% more" not in plan["summary"]
    assert plan["summary"].startswith("reserved: 0 per useful hour; spot costs 1.2")
    assert "more per useful hour" in plan["summary"]


def test_without_prices_the_plan_says_how_to_get_a_verdict(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert plan_cli.main(["--checkpoint", "10s", "--mtbi", "12h"]) == 0
    out = capsys.readouterr().out
    assert "give --spot-price and --on-demand-price" in out
    assert "not usable: no notice lead known" in out


NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")


def _numbers(value: Any) -> list[float]:
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [number for item in value.values() for number in _numbers(item)]
    if isinstance(value, list):
        return [number for item in value for number in _numbers(item)]
    if isinstance(value, str):
        return [float(text.replace(",", "")) for text in NUMBER.findall(value)]
    return []


@pytest.mark.parametrize(
    "argv",
    [
        [
            *FIGURES,
            *PRICES,
            "--reserved-price",
            "2.5",
            "--storage-price",
            "0.02",
            "--checkpoint-gb",
            "2.4",
            "--io-price",
            "0.0004",
            "--reacquire",
            "10m",
        ],
        [
            "--params",
            "7B",
            "--bandwidth",
            "1GB/s",
            "--mtbi",
            "6h",
            "--notice-lead",
            "30s",
            "--steps-per-second",
            "2",
        ],
        ["--checkpoint-size", "14GB", "--bandwidth", "100MB/s", "--tax", "3%"],
        [
            "--checkpoint",
            "350s",
            "--interval-steps",
            "1200",
            "--steps-per-second",
            "3.5",
            "--mtbi",
            "1h",
            "--notice-lead",
            "2m",
        ],
    ],
)
def test_json_carries_every_number_the_table_prints(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Each number in the table is a JSON value, in the same or a display unit (minutes,
    hours, days, percent, MB/s, GB), to the digits shown."""
    assert plan_cli.main(argv) == 0
    table = capsys.readouterr().out
    values = _numbers(plan_json(capsys, *argv))
    scales = (1, 1 / 60, 1 / 3600, 1 / 86400, 100, 1e-6, 1e-9)
    candidates = [value * scale for value in values for scale in scales]
    missing = []
    for text in NUMBER.findall(table):
        shown = float(text.replace(",", ""))
        digits = len(text.split(".")[1]) if "." in text else 0
        # What the table rounds to: its last shown digit, or 3 significant digits.
        slack = max(0.5 * 10**-digits, abs(shown) * 0.0051) + 1e-12
        if not any(abs(candidate - shown) <= slack for candidate in candidates):
            missing.append(text)
    assert not missing, missing


def test_sizes_people_have(capsys: pytest.CaptureFixture[str]) -> None:
    # 14 GB at 200 MB/s is a 70 s flush.
    plan = plan_json(capsys, "--checkpoint-size", "14GB", "--bandwidth", "200MB/s", "--mtbi", "6h")
    assert plan["inputs"]["checkpoint_seconds"] == {"value": 70.0, "source": "size / bandwidth"}
    assert plan["checkpoint_size"]["gb"] == 14.0
    # 7B parameters, bf16, AdamW: 2 + 4 (fp32 master) + 8 (two moments) = 14 B a parameter.
    plan = plan_json(capsys, "--params", "7B", "--bandwidth", "1GB/s", "--tax", "3%")
    size = plan["checkpoint_size"]
    assert size["bytes_per_param"] == 14 and size["gb"] == 98.0
    assert size["how"] == (
        "7B parameters x (2 B bf16 weights + 4 B fp32 master weights + 8 B AdamW moments "
        "(fp32)) = 14 B per parameter = 98 GB"
    )
    assert plan["inputs"]["checkpoint_seconds"]["value"] == 98.0
    weights = plan_json(
        capsys, "--params", "350M", "--optimizer", "none", "--bandwidth", "10Gbit/s", "--tax", "1%"
    )
    assert weights["checkpoint_size"]["bytes_per_param"] == 2
    assert weights["inputs"]["checkpoint_seconds"]["value"] == pytest.approx(0.56)
    sgd = plan_json(
        capsys,
        "--params",
        "1e9",
        "--precision",
        "fp32",
        "--optimizer",
        "sgd",
        "--bandwidth",
        "1GB/s",
        "--tax",
        "1%",
    )
    assert sgd["checkpoint_size"]["bytes_per_param"] == 8
    assert plan_cli.main(["--params", "7B", "--bandwidth", "1GB/s", "--tax", "3%"]) == 0
    out = capsys.readouterr().out
    assert "7B parameters x (2 B bf16 weights" in out and "at 1000 MB/s: 98 s" in out


def test_choices_are_taken_as_people_write_them(capsys: pytest.CaptureFixture[str]) -> None:
    # "BF16", "AdamW": refused before ("invalid choice 'AdamW' (did you mean 'adamw'?)").
    written = ["--params", "7B", "--bandwidth", "1GB/s", "--tax", "3%", "--interruptions-per-day"]
    plan = plan_json(
        capsys, *written, "1", "--precision", "BF16", "--optimizer", "AdamW", "--notice-action",
        "Drain", "--notice-lead", "2h",
    )  # fmt: skip
    assert plan["checkpoint_size"]["precision"] == "bf16"
    assert plan["checkpoint_size"]["optimizer"] == "adamw"
    assert plan["notice"]["action"] == "drain"


def test_only_what_the_output_needs_is_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    # The tax alone: no interruption rate, no spot price.
    plan = plan_json(capsys, "--checkpoint-gb", "2.4", "--bandwidth", "240MB/s", "--tax", "3%")
    assert plan["intervals"]["seconds"]["chosen"] == pytest.approx(333.33, abs=0.01)
    assert plan["checkpoint_tax"] == pytest.approx(0.03)
    assert plan["overhead"] is None and plan["intervals"]["seconds"]["recommended"] is None
    assert plan_cli.main(["--checkpoint", "10s", "--interval", "5m"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint tax C/tau  3.33 %" in out and "only the checkpoint tax" in out
    # A size with a flush given: the size is for pricing only, the rate still not needed.
    plan = plan_json(capsys, "--checkpoint", "10s", "--checkpoint-gb", "2.4", "--tax", "3%")
    assert plan["inputs"]["checkpoint_seconds"]["source"] == "flag"


def test_warnings_where_the_answer_is_not_sane(capsys: pytest.CaptureFixture[str]) -> None:
    # A 1,200-step interval with a 350 s checkpoint: 105 % tax, interval shorter than the flush,
    # and a 2-minute notice cannot cover the flush.
    plan = plan_json(
        capsys,
        "--checkpoint",
        "350s",
        "--interval-steps",
        "1200",
        "--steps-per-second",
        "3.5",
        "--mtbi",
        "1d",
        "--notice-lead",
        "2m",
    )
    found = plan["warnings"]
    assert len(found) == 3, found
    assert "102.1%, above 10%" in found[0]
    assert "shorter than the flush" in found[1]
    assert "notice lead (120 s) is shorter than detection plus the flush (355 s" in found[2]
    assert plan["notice"]["usable"] is False
    assert plan["notice"]["effective_no_notice_share"] == 1.0
    assert plan_cli.main(["--checkpoint", "10s", "--tax", "20%", "--warn-tax", "25%"]) == 0
    assert "warning" not in capsys.readouterr().out


def test_the_share_without_a_usable_notice(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--checkpoint", "60s", "--mtbi", "1h", "--notice-lead", "2m"]
    default = plan_json(capsys, *base)
    assert default["inputs"]["no_notice_share"] == {"value": 0.1, "source": "default"}
    more = plan_json(capsys, *base, "--no-notice-share", "40%")
    rate = plan_json(capsys, *base, "--no-notice-per-day", "9.6")
    assert more["inputs"]["no_notice_share"]["value"] == pytest.approx(0.4)
    assert rate["inputs"]["no_notice_share"]["value"] == pytest.approx(0.4)
    # More interruptions without notice: checkpoint more often.
    assert (
        more["intervals"]["seconds"]["recommended"] < default["intervals"]["seconds"]["recommended"]
    )
    all_without = plan_json(capsys, *base, "--no-notice-share", "100%")
    assert all_without["overhead"]["total"] == pytest.approx(all_without["overhead_without_notice"])


def test_late_notices_in_the_telemetry_count_as_without(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lines = ['{"v":1,"at":"2026-11-30T00:00:00Z","kind":"start"}']
    for hour in range(1, 5):
        lines.append(
            f'{{"v":1,"at":"2026-11-30T{hour:02d}:00:00Z","kind":"notice","id":"n{hour}",'
            f'"action":"terminate","reason":"spot-interruption",'
            f'"sent_at":"2026-11-30T{hour:02d}:00:00Z","deadline":"2026-11-30T{hour:02d}:02:00Z"}}'
        )
        # The flush of n1 finishes after the deadline; n2 is never saved on.
        finished = {1: "03:00", 2: None, 3: "00:20", 4: "00:30"}[hour]
        if finished:
            lines.append(
                f'{{"v":1,"at":"2026-11-30T{hour:02d}:{finished}Z","kind":"ack",'
                f'"notice_id":"n{hour}","flush_seconds":10,"outcome":"saved"}}'
            )
    lines.append('{"v":1,"at":"2026-11-30T06:00:00Z","kind":"stop"}')
    path = tmp_path / "telemetry.jsonl"
    path.write_text("\n".join(lines) + "\n")
    plan = plan_json(capsys, "--telemetry", str(path))
    assert plan["telemetry"]["late_notices"] == 2
    assert plan["inputs"]["no_notice_share"] == {"value": 0.5, "source": "telemetry"}
    assert plan["inputs"]["notice_lead_seconds"] == {"value": 120.0, "source": "telemetry"}


def test_an_interval_in_steps_is_at_least_one_step(capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint comes at a step boundary, as AdaptiveInterval.steps() says (at least 1):
    a job of slow steps (one every 5 hours) was told to checkpoint every 0 steps."""
    plan = plan_json(
        capsys,
        "--checkpoint",
        "10s",
        "--interruptions-per-day",
        "1",
        "--steps-per-second",
        "5.5e-5",
    )
    steps = plan["intervals"]["steps"]
    assert {key: value for key, value in steps.items() if value is not None} == {
        "young": 1,
        "daly": 1,
        "recommended": 1,
        "chosen": 1,
    }
    assert (
        plan_cli.main(
            ["--checkpoint", "10s", "--interruptions-per-day", "1", "--steps-per-second", "5.5e-5"]
        )
        == 0
    )
    table = capsys.readouterr().out
    assert "0 steps" not in table and "1 steps" not in table
    assert "least overhead (recommended)   1308 s (21.8 min)  1 step" in table


def test_a_p95_below_the_mean_says_the_mean_is_used(capsys: pytest.CaptureFixture[str]) -> None:
    """--checkpoint 10s --checkpoint-p95 5s planned on 10 s (the larger), and the table
    showed 'flush p95 ... 10 s (flag)', as if the flag had said 10 s."""
    assert plan_cli.main(["--checkpoint", "10s", "--checkpoint-p95", "5s", "--tax", "3%"]) == 0
    out = capsys.readouterr().out
    assert "flush p95 (must fit the notice)     10 s  (the mean: above the p95 5 s, flag)" in out
    assert "(flag)" in out.splitlines()[3]  # the mean itself is the flag's


def test_durations_take_compounds_and_unit_words(capsys: pytest.CaptureFixture[str]) -> None:
    """`--mtbi 1h30m` and `--checkpoint 90 s` were refused as not durations."""
    plan = plan_json(capsys, "--checkpoint", "1m30s", "--mtbi", "1h30m", "--restore", "2 min")
    assert plan["inputs"]["checkpoint_seconds"]["value"] == 90
    assert plan["inputs"]["mtbi_seconds"]["value"] == 5400
    assert plan["inputs"]["restore_seconds"]["value"] == 120


def test_a_price_may_carry_a_dollar_sign(capsys: pytest.CaptureFixture[str]) -> None:
    plain = plan_json(capsys, *FIGURES, *PRICES)
    dollars = plan_json(capsys, *FIGURES, "--spot-price", "$1.2", "--on-demand-price", " $3.9")
    assert dollars["costs"] == plain["costs"]


@pytest.mark.parametrize("flag", ["--spot-price", "--on-demand-price", "--reserved-price"])
def test_a_price_the_shell_cut_after_its_dollar_is_refused(
    capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    """`--spot-price $1.20` unquoted reaches forewarn as `.20`, which was priced at 0.20."""
    argv = [*FIGURES, "--spot-price", "1.2", "--on-demand-price", "3.9", flag, ".20"]
    err = fails(capsys, *argv)
    assert f"{flag}: '.20' starts with '.'" in err and "without '$' (1.20)" in err
    assert "'$x'" in fails(capsys, *FIGURES, "--spot-price", "$x", "--on-demand-price", "3")


# Each was ignored in silence: the plan came out the same as without it.
@pytest.mark.parametrize(
    ("given", "says"),
    [
        (["--keep", "5"], "--keep: only used with a --storage-price above 0"),
        (
            ["--keep", "5", "--storage-price", "0"],
            "--keep: only used with a --storage-price above 0",
        ),
        (
            ["--reserved-utilization", "50%"],
            "--reserved-utilization: only used with --reserved-price",
        ),
        (["--precision", "fp32", "--checkpoint-gb", "14"], "--precision: only used with --params"),
        (["--optimizer", "sgd"], "--optimizer: only used with --params"),
    ],
)
def test_an_option_without_the_one_it_refines_is_refused(
    capsys: pytest.CaptureFixture[str], given: list[str], says: str
) -> None:
    err = fails(capsys, *FIGURES, *PRICES, *given)
    assert err.startswith(f"forewarn: plan: {says}") and err.count("\n") == 1


@pytest.mark.parametrize(
    "given",
    [["--notice-action", "drain"], ["--notice-action", "drain", "--exit-margin", "1m"]],
)
def test_a_notice_action_without_a_notice_lead_is_refused(
    capsys: pytest.CaptureFixture[str], given: list[str]
) -> None:
    """With no lead (no --notice-lead, no telemetry) there is no notice to take either way:
    --notice-action drain (and its --exit-margin) changed nothing, in silence."""
    err = fails(capsys, "--checkpoint", "10s", "--interruptions-per-day", "1", *given)
    assert err.startswith("forewarn: plan: --notice-action: only used with a notice lead"), err


def test_options_with_what_they_refine_change_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    base = [*FIGURES, *PRICES, "--reserved-price", "2", "--checkpoint-gb", "100"]
    plain = plan_json(capsys, *base, "--storage-price", "0.02")
    refined = plan_json(
        capsys, *base, "--storage-price", "0.02", "--keep", "5", "--reserved-utilization", "50%"
    )
    # Compute at half use costs twice as much (storage, the same for each option, aside).
    assert (
        refined["costs"]["reserved"]["per_useful_hour"]
        > 1.9 * (plain["costs"]["reserved"]["per_useful_hour"])
    )
    assert refined["costs"]["spot"]["per_useful_hour"] > plain["costs"]["spot"]["per_useful_hour"]
    sized = plan_json(
        capsys,
        "--params",
        "7B",
        "--precision",
        "fp32",
        "--optimizer",
        "sgd",
        "--bandwidth",
        "1GB/s",
        "--tax",
        "3%",
    )
    assert sized["checkpoint_size"]["bytes_per_param"] == 8


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--checkpoint=-10s", "--mtbi", "1d"], "--checkpoint"),
        (["--checkpoint", "-10s", "--mtbi", "1d"], "must not be negative"),
        (["--checkpoint", "10s", "--mtbi", "-1h30m"], "--mtbi: must not be negative"),
        (["--checkpoint", "10s", "--mtbi", "1h30"], "--mtbi: not a duration"),
        (["--checkpoint", "10s", "--mtbi", "1d", "--tax", "-3%"], "--tax"),
        (["--checkpoint", "10s", "--mtbi", "1d", "--restore=-1m"], "--restore"),
        (["--checkpoint", "10s", "--interruptions-per-day", "0"], "--interruptions-per-day"),
        (["--checkpoint", "10s", "--mtbi", "0s"], "--mtbi"),
        (["--checkpoint", "10s", "--mtbi", "1d", "--spot-price", "1"], "--on-demand-price"),
        (["--checkpoint", "10s", "--mtbi", "1d", "--on-demand-price", "3"], "--spot-price"),
        # A price of 0 is a price given: each was ignored in silence, and a spot price of 0
        # alone was answered 'give --spot-price'. A spot or on-demand price of 0 is refused
        # itself now (an unquoted $10 reaches forewarn as 0); a reserved one may be 0.
        (
            ["--checkpoint", "10s", "--mtbi", "1d", "--spot-price", "0"],
            "--spot-price: '0': a spot or on-demand price must be more than 0",
        ),
        (
            ["--checkpoint", "10s", "--mtbi", "1d", "--on-demand-price", "0"],
            "--on-demand-price: '0': a spot or on-demand price must be more than 0",
        ),
        (["--checkpoint", "10s", "--mtbi", "1d", "--reserved-price", "0"], "--spot-price"),
        (
            ["--checkpoint", "10s", "--mtbi", "1d", *PRICES, "--storage-price", "0.02"],
            "--checkpoint-gb",
        ),
        (["--checkpoint", "10s", "--mtbi", "1d", "--storage-price", "0.02"], "--spot-price"),
        (
            ["--checkpoint", "10s", "--mtbi", "1d", "--spot-price=-1", "--on-demand-price", "3"],
            "--spot-price",
        ),
        (["--checkpoint", "10s", "--mtbi", "1d", "--tax", "150%"], "--tax"),
        (["--checkpoint", "10s", "--mtbi", "1d", "--interval-steps", "100"], "--interval-steps"),
        (["--checkpoint", "ten", "--mtbi", "1d"], "--checkpoint"),
        (["--mtbi", "1d"], "--checkpoint"),
        (["--checkpoint", "10s"], "--interruptions-per-day"),
        (["--checkpoint", "10s", "--tax", "3%", "--spot-price", "1"], "--interruptions-per-day"),
        (["--checkpoint-size", "14", "--tax", "3%"], "--checkpoint-size"),
        (["--checkpoint-size", "14GB", "--tax", "3%"], "--bandwidth"),
        (["--bandwidth", "1GB/s", "--tax", "3%", "--checkpoint", "1s"], "--bandwidth"),
        (["--params", "7B", "--bandwidth", "1GB", "--tax", "3%"], "--bandwidth"),
        (["--params", "seven", "--bandwidth", "1GB/s", "--tax", "3%"], "--params"),
        # Read as 7 parameters, a 112 B checkpoint, where 7B was meant.
        (["--params", "7", "--bandwidth", "1GB/s", "--tax", "3%"], "--params: a bare 7 is 7"),
        (["--params", "7", "--bandwidth", "1GB/s", "--tax", "3%"], "write 7B for 7 billion"),
        (["--params", "1.3", "--bandwidth", "1GB/s", "--tax", "3%"], "write 1.3B"),
        (["--params", "7B", "--optimizer", "adam", "--bandwidth", "1GB/s"], "--optimizer"),
        (["--checkpoint-gb", "2", "--params", "7B"], "not allowed with"),
        (["--checkpoint", "10s", "--mtbi", "1d", "--no-notice-share", "150%"], "--no-notice-share"),
        # A bare number past 1 is no share: `--warn-tax 5` was read as 500%, never warning.
        (
            ["--checkpoint", "10s", "--tax", "3%", "--warn-tax", "5"],
            "--warn-tax: '5' is not a share",
        ),
        (["--checkpoint", "10s", "--mtbi", "1d", "--no-notice-share", "50"], "write 50% or 0.5"),
        (["--checkpoint", "10s", "--tax", "3"], "--tax: '3' is not a share: write 3% or 0.03"),
        # A zero tax was taken for no --tax, and the rate was asked for instead.
        (["--checkpoint", "10s", "--tax", "0"], "--tax: must be above 0% and below 100%"),
        (["--checkpoint", "10s", "--tax", "0%"], "--tax: must be above 0% and below 100%"),
        (
            ["--checkpoint", "10s", "--mtbi", "1d", "--no-notice-per-day", "2"],
            "--no-notice-per-day",
        ),
        (["--checkpoint", "10s", "--no-notice-per-day", "2", "--tax", "3%"], "--no-notice-per-day"),
        (["--checkpoint", "10s", "--tax", "3%", "--plot", "x.png"], "--plot"),
        (["--checkpoint", "10s", "--mtbi", "60s", "--restart", "14h"], "--mtbi"),
        (["--checkpoint", "10s", "--mtbi", "60s", "--interval", "7d"], "--interval"),
        (["--telemetry", "/nonexistent/telemetry.jsonl"], "--telemetry"),
    ],
)
def test_bad_input_exits_2_naming_the_field(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    assert named in fails(capsys, *argv)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        # A share flag's range said in the flag's own terms (H119's walk): `--tax 150%` said
        # "tax must be a fraction between 0 and 1, e.g. 0.03 (got 1.5)", of a flag written
        # in percent, and `--interval 0` "(got 0.0)", a value nobody wrote.
        (["--tax", "150%"], "--tax: must be above 0% and below 100% (got '150%')"),
        (["--tax", "100%"], "--tax: must be above 0% and below 100% (got '100%')"),
        (["--tax", "0"], "--tax: must be above 0% and below 100% (got '0')"),
        (["--tax", "1"], "--tax: must be above 0% and below 100% (got '1')"),
        (["--interval", "0"], "--interval: must be more than 0 (got '0')"),
        (["--interval", "0s"], "--interval: must be more than 0 (got '0s')"),
    ],
)
def test_a_range_is_said_in_the_flags_own_terms(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    assert said in fails(capsys, "--checkpoint", "10s", *argv)


# Digits people do not type meaning 0-9: float() and `\d` read Arabic-Indic `١٢` and
# full-width digits as 12, and the plan was made with them (durations refused them already).
_ODD = ["١٢", "\uff11\uff12", "1٢"]


@pytest.mark.parametrize("digits", _ODD)
@pytest.mark.parametrize(
    ("flag", "written", "rest"),
    [
        ("--spot-price", "{}", ["--checkpoint", "10s", "--mtbi", "1d", "--on-demand-price", "3"]),
        ("--on-demand-price", "{}/h", ["--checkpoint", "10s", "--mtbi", "1d", "--spot-price", "1"]),
        ("--tax", "{}%", ["--checkpoint", "10s"]),
        ("--checkpoint-gb", "{}", ["--checkpoint", "10s", "--tax", "3%"]),
        ("--checkpoint-size", "{}GB", ["--bandwidth", "1GB/s", "--tax", "3%"]),
        ("--bandwidth", "{}GB/s", ["--checkpoint-size", "14GB", "--tax", "3%"]),
        ("--params", "{}B", ["--bandwidth", "1GB/s", "--tax", "3%"]),
    ],
)
def test_a_number_in_other_digits_than_0_to_9_is_refused_naming_them(
    capsys: pytest.CaptureFixture[str], digits: str, flag: str, written: str, rest: list[str]
) -> None:
    value = written.format(digits)
    said = fails(capsys, *rest, flag, value)
    assert f"{flag}: " in said and "has digits other than 0-9" in said, said


def test_a_corrupt_telemetry_line_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "telemetry.jsonl"
    path.write_text('{"v":1,"at":"2026-11-30T00:00:00Z","kind":"start"}\nnot json\n{}\n')
    err = fails(capsys, "--telemetry", str(path))
    assert "--telemetry" in err and "telemetry.jsonl:2" in err


def test_a_telemetry_file_that_cannot_be_read_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The agent's file is 0640 root's: read by another user, the plan ended in 'forewarn:
    unexpected PermissionError ... please report it', exit 1, naming no flag."""
    unreadable = tmp_path / "telemetry.jsonl"
    unreadable.write_text('{"v":1,"at":"2026-11-30T00:00:00Z","kind":"start"}\n')
    unreadable.chmod(0)
    # Root reads past the mode; a file that fails to read for anyone stands in for it.
    cases = [unreadable] if os.geteuid() != 0 else []
    if Path("/proc/self/mem").is_file():
        cases.append(Path("/proc/self/mem"))  # EIO at offset 0
    assert cases
    for path in cases:
        err = fails(capsys, "--telemetry", str(path), "--checkpoint", "10s", "--tax", "3%")
        assert err.startswith(f"forewarn: plan: --telemetry: cannot read {path}: "), err
        assert err.count("\n") == 1, err


def test_a_notice_published_past_its_deadline_gave_no_lead(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The agent saw the notice 24.5 s after its deadline. The plan stopped on
    # "--notice-lead: must not be negative (got -24.5...)", a flag nobody gave.
    path = tmp_path / "telemetry.jsonl"
    path.write_text(
        '{"v":1,"at":"2026-11-30T03:00:00Z","kind":"start"}\n'
        '{"v":1,"at":"2026-11-30T03:22:24.5Z","kind":"notice","id":"aws/x","action":"terminate",'
        '"reason":"spot-interruption","deadline":"2026-11-30T03:22:00Z",'
        '"sent_at":"2026-11-30T03:22:24.5Z"}\n'
        '{"v":1,"at":"2026-11-30T03:22:26Z","kind":"ack","notice_id":"aws/x",'
        '"flush_seconds":1.5,"outcome":"saved"}\n'
    )
    plan = plan_json(capsys, "--telemetry", str(path))
    assert plan["inputs"]["notice_lead_seconds"] == {"value": 0.0, "source": "telemetry"}
    assert plan["telemetry"]["late_notices"] == 1
    assert plan["notice"]["usable"] is False


def test_telemetry_without_terminate_notices_asks_for_a_rate(
    capsys: pytest.CaptureFixture[str], own_state_dir: Path
) -> None:
    (own_state_dir / "telemetry.jsonl").write_text(
        '{"v":1,"at":"2026-11-30T00:00:00Z","kind":"ack","flush_seconds":4,"outcome":"saved"}\n'
    )
    err = fails(capsys)
    assert "--interruptions-per-day" in err and "no terminate notices" in err
    # The state directory's file is the default source: the flush comes from it.
    plan = plan_json(capsys, "--interruptions-per-day", "2")
    assert plan["inputs"]["checkpoint_seconds"] == {"value": 4.0, "source": "telemetry"}


def test_plot_writes_a_png(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    target = tmp_path / "plan.png"
    assert plan_cli.main([*FIGURES, *PRICES, "--plot", str(target)]) == 0
    assert f"plot written to {target}" in capsys.readouterr().out
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert target.stat().st_size > 20_000


def test_plot_writes_exactly_the_path_it_names(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Without `.png` matplotlib added one, so `--plot /tmp` wrote /tmp.png and said it wrote
    /tmp; a directory is now a path it cannot write (exit 2)."""
    pytest.importorskip("matplotlib")
    target = tmp_path / "plan"
    assert plan_cli.main([*FIGURES, *PRICES, "--plot", str(target)]) == 0
    assert f"plot written to {target}" in capsys.readouterr().out
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "plan.png").exists()
    folder = tmp_path / "folder"
    folder.mkdir()
    assert plan_cli.main([*FIGURES, *PRICES, "--plot", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"forewarn: plan: --plot: cannot write {folder}") and err.count("\n") == 1
    assert not (tmp_path / "folder.png").exists()


def test_a_plan_from_the_telemetry_of_forewarn_drill_local(
    tmp_path: Path, env: dict[str, str]
) -> None:
    work = tmp_path / "drill"
    drill = subprocess.run(
        forewarn_cmd("drill", "local", "--dir", str(work), "--steps", "200"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert drill.returncode == 0, drill.stdout + drill.stderr
    # Without --keep the --dir stays (only a temporary work directory goes), as the README's
    # drill row now says: it said "temporary unless --dir, and removed unless --keep", which
    # read as a --dir removed too, and --keep's help said only "keep the work directory".
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    assert "removed at the end unless `--keep`, or `--dir`, which is kept" in readme
    done = run_forewarn("plan", "--telemetry", str(work), "--json", *PRICES, env=env)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    telemetry = plan["telemetry"]
    assert len(telemetry["files"]) == 2  # the reclaimed machine and its replacement
    assert telemetry["terminate_notices"] == 1 and telemetry["reasons"] == {"drill": 1}
    assert telemetry["flushes"] >= 2 and telemetry["resumes"] == 1
    assert telemetry["drained"] is True
    inputs = plan["inputs"]
    for name in ("checkpoint_seconds", "mtbi_seconds", "restore_seconds", "response_seconds"):
        assert inputs[name]["source"] == "telemetry", name
    assert inputs["checkpoint_seconds"]["value"] == telemetry["flush_seconds"] > 0
    assert inputs["mtbi_seconds"]["value"] == pytest.approx(telemetry["span_seconds"])
    assert plan["notice"]["usable"] is True
    assert plan["inputs"]["notice_lead_seconds"]["source"] == "telemetry (every notice saved on)"
    assert plan["intervals"]["seconds"]["recommended"] > 0
    assert plan["verdict"] in ("spot", "on-demand")
    table = run_forewarn("plan", "--telemetry", str(work), env=env)
    assert table.returncode == 0, table.stderr
    assert "terminate notices: 1 (0 too late to save on); flushes: " in table.stdout
    assert "a drill's rate, not the capacity's" in table.stdout
    assert any("--interruptions-per-day" in note for note in plan["notes"])
    # docs/plan.md's "From a drill" shows the table a drill gives: every note it prints is
    # there, its figures aside (the drain's save, a note of its own, was missing).
    shown = {_figures_out(line) for line in _doc_block("### From a drill").splitlines()}
    notes = [line for line in table.stdout.splitlines() if line.startswith("note: ")]
    assert notes and [note for note in notes if _figures_out(note) not in shown] == []


def _doc_block(heading: str) -> str:
    """The first fenced block of docs/plan.md after `heading`."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "plan.md").read_text()
    section = doc[doc.index(f"\n{heading}\n") :]
    match = re.search(r"```\n(.*?)```", section, re.S)
    assert match is not None, heading
    return match.group(1)


def _figures_out(line: str) -> str:
    """`line` with every number as `N`: a measured figure differs from run to run."""
    return re.sub(r"\d+(?:[.,]\d+)*(?:e[+-]\d+)?", "N", line.strip())


def test_the_plot_grid_covers_the_marked_intervals_at_any_scale() -> None:
    from forewarn.agent.plan import Timing, choose_interval
    from forewarn.agent.plan.plot import interval_grid

    for checkpoint, mtbi in ((0.0014, 3.8), (10.0, 86400.0), (600.0, 3600.0)):
        timing = Timing(checkpoint_seconds=checkpoint, mtbi_seconds=mtbi)
        intervals = choose_interval(timing)
        grid = interval_grid(timing, intervals)
        assert grid[0] <= min(checkpoint, intervals.young, intervals.daly) / 2 * 1.0001
        assert grid[-1] >= max(intervals.young, intervals.daly) * 10 * 0.9999


def test_the_measured_notice_path_holds_only_for_the_measured_flush(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "telemetry.jsonl"
    path.write_text(
        '{"v":1,"at":"2026-11-30T00:00:00Z","kind":"start"}\n'
        '{"v":1,"at":"2026-11-30T06:00:00Z","kind":"notice","id":"t","action":"terminate",'
        '"reason":"preemption","sent_at":"2026-11-30T06:00:00Z"}\n'
        '{"v":1,"at":"2026-11-30T06:00:02Z","kind":"ack","notice_id":"t","flush_seconds":1.5,'
        '"outcome":"saved"}\n'
    )
    measured = plan_json(capsys, "--telemetry", str(path))
    assert measured["inputs"]["response_seconds"] == {"value": 2.0, "source": "telemetry"}
    assert measured["notice"]["usable"] is True
    assert measured["inputs"]["mtbi_seconds"]["value"] == 6 * 3600 + 2
    # A 60 s checkpoint given by flag: the 2 s the telemetry saw says nothing about it.
    given = plan_json(capsys, "--telemetry", str(path), "--checkpoint", "60s")
    assert given["inputs"]["response_seconds"]["value"] is None
    assert given["notice"]["usable"] is False


@pytest.mark.parametrize(
    "notice_argv",
    [[], ["--notice-lead", "2m"], ["--notice-lead", "2m", "--no-notice-share", "30%"]],
)
def test_every_auto_converges_to_the_recommended_interval(
    capsys: pytest.CaptureFixture[str], notice_argv: list[str]
) -> None:
    """The guard's every="auto", fed the same flush, settles on the interval plan recommends."""
    from forewarn.clients import CheckpointGuard
    from forewarn.clients.adaptive import AdaptiveInterval

    plan = plan_json(capsys, "--checkpoint", "60s", "--mtbi", "1h", "--restart", "5m", *notice_argv)
    inputs = plan["inputs"]
    adaptive = AdaptiveInterval(
        mtbi_seconds=inputs["mtbi_seconds"]["value"],
        restart_seconds=inputs["restart_seconds"]["value"],
        notice_lead_seconds=inputs["notice_lead_seconds"]["value"] or 0.0,
        no_notice_share=inputs["no_notice_share"]["value"],
    )
    guard = CheckpointGuard(
        every="auto", adaptive=adaptive, notices=False, handle_signals=False, flag_file=None
    )
    try:
        for step in range(1, 40):
            guard.saved(step, 60.0)
        assert guard.every_seconds == pytest.approx(
            plan["intervals"]["seconds"]["recommended"], rel=1e-6
        )
    finally:
        guard.close()


def test_json_carries_every_number_of_a_telemetry_plan(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "telemetry.jsonl"
    path.write_text(
        '{"v":1,"at":"2026-11-30T00:00:00Z","kind":"start"}\n'
        '{"v":1,"at":"2026-11-30T01:00:00Z","kind":"ack","notice_id":null,"flush_seconds":12,'
        '"outcome":"saved"}\n'
        '{"v":1,"at":"2026-11-30T06:00:00Z","kind":"notice","id":"t","action":"terminate",'
        '"reason":"preemption","sent_at":"2026-11-30T06:00:00Z",'
        '"deadline":"2026-11-30T06:00:30Z"}\n'
        '{"v":1,"at":"2026-11-30T06:00:20Z","kind":"ack","notice_id":"t","flush_seconds":15,'
        '"outcome":"saved"}\n'
        '{"v":1,"at":"2026-11-30T06:05:00Z","kind":"resume","restore_seconds":40,'
        '"steps_lost":0}\n'
    )
    test_json_carries_every_number_the_table_prints(
        capsys, ["--telemetry", str(path), "--steps-per-second", "2", *PRICES]
    )


def test_the_plot_at_a_glance() -> None:
    """One overhead axis, both curves, the chosen interval with its value, the 3 % rule,
    minutes and hours on x (steps on top), the lead and the restart in the title."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    from forewarn.agent.plan import Timing, choose_interval
    from forewarn.agent.plan.plot import build_figure

    timing = Timing(
        checkpoint_seconds=98,
        mtbi_seconds=6 * 3600,
        restart_seconds=300,
        notice_lead_seconds=120,
        steps_per_second=0.5,
    )
    intervals = choose_interval(timing)
    figure = build_figure(timing, intervals)
    try:
        (axis,) = figure.axes  # one y-axis
        assert axis.get_ylabel() == "overhead, % of useful time"
        labels = [line.get_label() for line in axis.get_lines()]
        assert "no usable notice (Daly's complete model)" in labels
        assert "with the notice, 10% of interruptions without" in labels
        assert any(
            label.startswith("rule of thumb: checkpoint 3 % of the time") for label in labels
        )
        texts = [text.get_text() for text in axis.texts]
        assert any(text.startswith("minimum overhead: 113 min, 3,380 steps") for text in texts)
        ticks = [tick.get_text() for tick in axis.get_xticklabels()]
        assert "15 min" in ticks and "1 h" in ticks
        (steps,) = [child for child in axis.child_axes]
        assert steps.get_xlabel() == "steps at 0.5 steps/s"
        title = axis.get_title()
        assert "notice lead 120 s (2 min)" in title and "restart and reload 300 s (5 min)" in title
    finally:
        plt.close(figure)


@pytest.mark.parametrize(
    "timing_kwargs",
    [
        # Few interruptions without notice: the curve without one lies far above the planned.
        {
            "checkpoint_seconds": 60,
            "mtbi_seconds": 3600,
            "notice_lead_seconds": 120,
            "no_notice_share": 0.02,
        },
        # A drill's scale: M of seconds.
        {
            "checkpoint_seconds": 0.03,
            "mtbi_seconds": 3.35,
            "notice_lead_seconds": 0.2,
            "detection_seconds": 0.05,
        },
    ],
)
def test_the_plot_shows_the_curve_without_notice(timing_kwargs: dict[str, float]) -> None:
    """Both curves are in view: the one without notice is not left off the top of the chart
    with only its legend entry to show for it."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    from forewarn.agent.plan import Timing, choose_interval
    from forewarn.agent.plan.plot import build_figure

    timing = Timing(**timing_kwargs)  # type: ignore[arg-type]
    figure = build_figure(timing, choose_interval(timing))
    try:
        (axis,) = figure.axes
        _, top = axis.get_ylim()
        curves = {line.get_label(): line for line in axis.get_lines()}
        blind = curves["no usable notice (Daly's complete model)"]
        assert min(blind.get_ydata()) < 0.9 * top
    finally:
        plt.close(figure)


@pytest.mark.parametrize(
    ("rate", "says"),
    [
        (1.0, "1 interruption a day,"),
        (1.0004, "1 interruption a day,"),
        (2.0, "2 interruptions a day,"),
        (0.5, "0.5 interruptions a day,"),
    ],
)
def test_the_plot_title_counts_interruptions_in_good_english(rate: float, says: str) -> None:
    """The title read "1 interruptions a day"."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    from forewarn.agent.plan import Timing, choose_interval
    from forewarn.agent.plan.plot import build_figure

    timing = Timing(checkpoint_seconds=10.0, mtbi_seconds=86400.0 / rate)
    figure = build_figure(timing, choose_interval(timing))
    try:
        (axis,) = figure.axes
        assert says in axis.get_title()
    finally:
        plt.close(figure)


def test_a_recommended_interval_at_the_cap_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """With every interruption noticed the overhead only falls as the interval grows: the
    recommended interval is then --max-interval, and the plan says it is the cap, not an
    optimum found below it."""
    base = ["--checkpoint", "60s", "--mtbi", "1h", "--notice-lead", "2m"]
    capped = plan_json(capsys, *base, "--no-notice-share", "0", "--max-interval", "12h")
    assert capped["intervals"]["seconds"]["recommended"] == pytest.approx(12 * 3600)
    (note,) = [note for note in capped["notes"] if "--max-interval" in note]
    assert "the least overhead is at the longest interval accepted (--max-interval 12 h)" in note
    assert plan_cli.main([*base, "--no-notice-share", "0", "--max-interval", "12h"]) == 0
    assert "note: the least overhead is at the longest interval accepted" in capsys.readouterr().out
    inside = plan_json(capsys, *base)
    assert not [note for note in inside["notes"] if "--max-interval" in note]


def test_a_cap_below_the_optimum_says_a_longer_interval_costs_less(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--max-interval 10m against a 22-minute optimum: the note said 'longer intervals cost no
    more', where the plan's own figures show 21.8 min costing 1.54 % against 2.03 %."""
    plan = plan_json(
        capsys, "--checkpoint", "10s", "--interruptions-per-day", "1", "--max-interval", "10m"
    )
    assert plan["intervals"]["seconds"]["recommended"] == pytest.approx(600)
    (note,) = [note for note in plan["notes"] if "--max-interval" in note]
    assert "cost no more" not in note
    assert "a longer one costs less: 1308 s (21.8 min) gives 1.54 %" in note
    assert "at 2.03 %" in note


def test_every_option_is_documented() -> None:
    """Each flag of `forewarn plan` is in docs/plan.md: its synopsis and its option table."""
    import argparse

    doc = (Path(__file__).resolve().parents[3] / "docs" / "plan.md").read_text()
    synopsis = doc[
        doc.index("forewarn plan [--telemetry") : doc.index("Code: `forewarn.agent.plan`")
    ]
    table = doc[
        doc.index("| option | default | meaning |") : doc.index("Cost needs `--spot-price`")
    ]
    parser = argparse.ArgumentParser()
    plan_cli.add_arguments(parser)
    flags = [
        flag
        for action in parser._actions
        for flag in action.option_strings
        if flag not in ("-h", "--help")
    ]
    assert len(flags) > 30
    undocumented = [flag for flag in flags if f"`{flag}" not in table and f"({flag}" not in table]
    assert not undocumented, undocumented
    # Aliases are in the table; the synopsis names each option once.
    missing = [flag for flag in flags if flag not in synopsis and flag != "--flush"]
    assert not missing, missing


def test_each_documented_default_is_the_code_s(capsys: pytest.CaptureFixture[str]) -> None:
    """The default column of docs/plan.md's option table, read with the flag's own parser,
    against what the plan takes when the flag is left out."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "plan.md").read_text()
    cells = {
        row.split("|")[1].strip().split()[0].strip("`"): row.split("|")[2].strip()
        for row in doc.splitlines()
        if row.startswith("| `--")
    }
    plan = plan_json(capsys, "--checkpoint", "10s", "--interruptions-per-day", "1")
    inputs = {name: value["value"] for name, value in plan["inputs"].items()}
    parser = argparse.ArgumentParser()
    plan_cli.add_arguments(parser)
    defaults = vars(parser.parse_args([]))
    companions = {flag: default for flag, (_, _, _, default) in plan_cli._COMPANIONS.items()}
    code = {
        "--restart": (plan_cli._duration, inputs["restart_seconds"]),
        "--reacquire": (plan_cli._duration, inputs["reacquire_seconds"]),
        "--detection": (plan_cli._duration, inputs["detection_seconds"]),
        "--exit-margin": (plan_cli._duration, inputs["exit_margin_seconds"]),
        "--max-interval": (plan_cli._duration, inputs["max_interval_seconds"]),
        "--no-notice-share": (plan_cli._fraction, inputs["no_notice_share"]),
        "--warn-tax": (plan_cli._fraction, plan["warn_tax"]),
        "--reserved-utilization": (plan_cli._fraction, companions["--reserved-utilization"]),
        "--fallback-share": (plan_cli._fraction, defaults["fallback_share"]),
        "--storage-price": (plan_cli._amount, defaults["storage_price"]),
        "--io-price": (plan_cli._amount, defaults["io_price"]),
        "--keep": (int, companions["--keep"]),
        "--precision": (lambda text: text.strip("`"), companions["--precision"]),
        "--optimizer": (lambda text: text.strip("`"), companions["--optimizer"]),
    }
    for flag, (parse, value) in code.items():
        # "10 %, or the telemetry's share ...": the literal before any comma.
        documented = cells[flag].split(",")[0].replace(" %", "%")
        assert parse(documented) == value, (flag, cells[flag], value)


def test_an_interval_no_work_survives_without_notice_is_valid_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every reclaim noticed, M = 60 s, a day between checkpoints: the notices keep the work
    (38.5 % overhead), while without them none would ever be kept. The JSON stays JSON (no
    `Infinity`), and the table says so in words."""
    argv = ["--checkpoint", "1s", "--mtbi", "60s", "--notice-lead", "30s"]
    argv += ["--no-notice-share", "0", "--interval", "1d"]
    assert plan_cli.main([*argv, "--json"]) == 0

    def refuse(constant: str) -> None:
        raise AssertionError(f"not JSON: {constant}")

    plan = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert plan["overhead"]["total"] == pytest.approx(0.3846, abs=1e-4)
    assert plan["overhead_without_notice"] is None
    assert plan_cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "inf" not in out
    assert "without a usable notice no work is ever kept at this interval" in out


def test_a_tax_whose_interval_keeps_no_work_is_refused_like_such_an_interval(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 100 h checkpoints at a 3 % tax: 3333 h between them against M = 1 h. The same interval
    # given with --interval was refused; by --tax the table printed "inf %" and "nan d" and
    # the JSON Infinity and NaN.
    argv = ["--checkpoint", "100h", "--mtbi", "1h", "--tax", "3%"]
    for extra in ([], ["--json"]):
        err = fails(capsys, *argv, *extra)
        assert err.startswith("forewarn: plan: --tax: 0.03 gives an interval of 1.2e+07 s")
        assert "would never keep any work" in err
    assert "would never keep any work" in fails(
        capsys, "--checkpoint", "100h", "--mtbi", "1h", "--interval", "3333h"
    )


def test_a_rate_too_high_for_the_restart_names_the_flag_given(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 1000 a day against a 1-day restart: the error named --mtbi, which was never given.
    base = ["--checkpoint", "10s", "--restart", "1d"]
    err = fails(capsys, *base, "--interruptions-per-day", "1000")
    assert err.startswith("forewarn: plan: --interruptions-per-day: 86.4 s between")
    assert "would never keep any work" in err
    assert fails(capsys, *base, "--mtbi", "86.4s").startswith("forewarn: plan: --mtbi: 86.4 s")


HUGE = "9" * 400  # read as infinity by float()
RESERVED_TINY = ["--reserved-utilization", "1e-300"]


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--checkpoint", HUGE, "--tax", "3%"], "--checkpoint/--flush: too large a duration"),
        (["--checkpoint", "10s", "--interval", HUGE], "--interval: too large a duration"),
        (["--checkpoint", "10s", "--mtbi", HUGE], "--mtbi: too large a duration"),
        (
            ["--checkpoint", "10s", "--interruptions-per-day", "1e-320"],
            "--interruptions-per-day: 9.99989e-321 a day is too small",
        ),
        (["--checkpoint", "10s", "--tax", "1e-320"], "--tax: 9.99989e-321 is so small"),
        # A rate whose M is finite, but not 2CM: Young's and Daly's intervals read "inf d",
        # the JSON "Infinity".
        (
            ["--checkpoint", "1h30m", "--interruptions-per-day", "1e-300"],
            "--interruptions-per-day: 8.64e+304 s between interruptions (1e-300 a day) is too long",
        ),
        (["--checkpoint", "1h30m", "--mtbi", "9" * 306 + "s"], "--mtbi: "),
        (
            ["--checkpoint", "10s", "--mtbi", "1d", "--steps-per-second", "1e308"],
            "--steps-per-second: 1e+308 steps a second make",
        ),
        (
            ["--checkpoint", "10s", "--interval-steps", "10" * 8, "--steps-per-second", "1e-300"],
            "--interval-steps: 1010101010101010 steps at 1e-300 a second",
        ),
        (["--checkpoint", "10s", "--interval-steps", HUGE], "--interval-steps: too large"),
        (["--checkpoint-gb", "1e300", "--bandwidth", "1B/s", "--tax", "3%"], "--checkpoint-gb"),
        (
            ["--checkpoint-size", "1e300B", "--bandwidth", "1e-300B/s", "--tax", "3%"],
            "--bandwidth: the size over the bandwidth in seconds overflows",
        ),
        (
            [*FIGURES, *PRICES, "--checkpoint-gb", "1", "--storage-price", "1", "--keep", HUGE],
            "--keep: too large",
        ),
        (
            [*FIGURES, *PRICES, "--checkpoint-gb", "1e10", "--io-price", "1e300"],
            "--io-price: too large: the spot checkpoint I/O per useful hour",
        ),
        (
            [*FIGURES, "--spot-price", "1", "--reserved-price", "1e300", *RESERVED_TINY],
            "--reserved-price: too large: the reserved compute per useful hour",
        ),
        # Each line finite, their sum not: the table's total and the verdict read "inf", the
        # JSON "Infinity".
        (
            [*FIGURES, "--spot-price", "1.79e308", "--on-demand-price", "1"],
            "--spot-price: too large: the spot total per useful hour",
        ),
    ],
)
def test_values_that_overflow_are_refused_naming_their_flag(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    # Each of these printed inf or nan in the plan, ended in "unexpected OverflowError", or
    # was blamed on a flag nobody gave ("--mtbi: must be positive (got inf)").
    err = fails(capsys, *argv)
    # argparse's own refusal reads "argument --keep: too large ..."
    assert f" {named}" in err and "unexpected" not in err, err


def test_a_verdict_against_a_nearly_free_alternative_names_no_infinite_share(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Spot at 1 against on-demand at 1e-310 said 'inf% more' (the share overflows): the
    verdict says how much more per useful hour instead, as against a price of 0."""
    for prices in (["1", "1e-310"], ["1e308", "1"]):
        assert (
            plan_cli.main([*FIGURES, "--spot-price", prices[0], "--on-demand-price", prices[1]])
            == 0
        )
        out = capsys.readouterr().out
        assert "inf" not in out and "nan" not in out, out
        assert "more per useful hour" in out.splitlines()[-1]


@given(
    st.one_of(
        st.text(max_size=30),
        st.integers(min_value=-5, max_value=10**400).map(str),
        st.floats().map(repr),
        st.tuples(
            st.floats(min_value=0).map(repr) | st.integers(0, 10**400).map(str),
            st.sampled_from(["", "s", "ms", "m", "h", "d", "%", " s", "$", ",10"]),
        ).map("".join),
    )
)
def test_the_input_parsers_answer_a_finite_value_or_refuse(text: str) -> None:
    for parse in (
        plan_cli._duration,
        plan_cli._amount,
        plan_cli._positive,
        plan_cli._fraction,
        plan_cli._count,
    ):
        try:
            value = parse(text)
        except argparse.ArgumentTypeError as error:
            assert str(error)
        else:
            assert math.isfinite(value) and value >= 0, (parse, text, value)


@settings(max_examples=examples(200), deadline=None)
@given(text=st.from_regex(r"\A\s?\d{0,4}(\.\d{0,3})?%?\s?\Z") | st.text(max_size=8))
def test_a_share_is_refused_or_between_0_and_1(text: str) -> None:
    """Every share flag (PCT) reads `3%` or `0.03`: what it takes is a fraction from 0 to 1,
    and a bare number past 1 (a percentage without its sign) is refused, never 100 times it."""
    try:
        value = plan_cli._fraction(text)
    except argparse.ArgumentTypeError:
        return
    assert 0 <= value <= (float(text.strip().removesuffix("%")) / 100 if "%" in text else 1)


def test_a_long_notice_lead_is_taken_as_a_drain_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--notice-lead 2h` (DigitalOcean's reclaim mail) was charged two hours of billed wait
    per reclaim: 9.10 % overhead, more than the 7.25 % with no notice at all."""
    job = ["--checkpoint", "60s", "--interruptions-per-day", "1", "--restart", "5m"]
    plan = plan_json(capsys, *job, "--notice-lead", "2h")
    assert plan["notice"]["action"] == "drain"
    assert plan["inputs"]["notice_action"]["source"].startswith("default")
    assert plan["notice"]["terminate_lead_seconds"] == 120
    assert plan["overhead"]["total"] < plan["overhead_without_notice"]
    assert plan["overhead"]["total"] == pytest.approx(0.0168, abs=0.0005)
    assert "trains on" in plan["notice"]["assumed"]
    # Said in the table too, and the other way for a spot notice.
    assert plan_cli.main([*job, "--notice-lead", "2h"]) == 0
    assert "taken as a drain: the job saves at once and trains on" in capsys.readouterr().out
    assert plan_cli.main([*job, "--notice-lead", "2m"]) == 0
    assert "taken as a terminate: the job saves and exits at once" in capsys.readouterr().out
    # A notice too short to save on is trained through: no "saves and exits at once".
    assert plan_cli.main([*job, "--notice-lead", "30s"]) == 0
    assert "taken as" not in capsys.readouterr().out
    # Asked for as a terminate, the long lead is waited out as before.
    waited = plan_json(capsys, *job, "--notice-lead", "2h", "--notice-action", "terminate")
    assert waited["overhead"]["total"] > waited["overhead_without_notice"]
    # The margin is the agent's floor unless given, and only for a drain.
    wider = plan_json(capsys, *job, "--notice-lead", "2h", "--exit-margin", "5m")
    assert wider["notice"]["terminate_lead_seconds"] == 300
    assert "--exit-margin: only used for a notice taken as a drain" in fails(
        capsys, *job, "--notice-lead", "2m", "--exit-margin", "5m"
    )


def test_a_ten_minute_lead_is_taken_as_azure_scale_set_terminate_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--notice-lead 10m` (an Azure scale set with notBeforeTimeout PT10M) was planned as a
    drain trained through, where the agent publishes Azure's Terminate as terminate: the job
    exits at once and the machine waits ten billed minutes."""
    job = ["--checkpoint", "60s", "--interruptions-per-day", "1"]
    for lead in ("10m", "15m"):
        plan = plan_json(capsys, *job, "--notice-lead", lead)
        assert plan["notice"]["action"] == "terminate"
        assert "Azure's scale-set Terminate" in plan["inputs"]["notice_action"]["source"]
    assert plan_cli.main([*job, "--notice-lead", "10m"]) == 0
    assert "give --notice-action drain for a drain" in capsys.readouterr().out
    assert plan_json(capsys, *job, "--notice-lead", "16m")["notice"]["action"] == "drain"
    assert plan_json(capsys, *job, "--notice-lead", "4m")["inputs"]["notice_action"] == {
        "value": "terminate",
        "source": "default",
    }


@pytest.mark.parametrize(
    ("rate", "flag"),
    [(("--mtbi", "1h"), "--notice-lead"), (("--interruptions-per-day", "30"), "--notice-lead")],
)
def test_a_notice_lead_longer_than_the_time_between_interruptions_is_refused(
    capsys: pytest.CaptureFixture[str], rate: tuple[str, str], flag: str
) -> None:
    """Reclaims are at least a lead apart; `--notice-lead 2h --mtbi 1h --notice-action
    terminate` planned 193 % of the useful time in billed waits, blamed on lost work."""
    for action in ("drain", "terminate"):
        err = fails(
            capsys, "--checkpoint", "60s", "--notice-lead", "2h", *rate, "--notice-action", action
        )
        assert f"{flag}: the notice lead (2 h) is longer than the mean time between" in err
    # A lead as long as the mean time between them is still a plan.
    assert plan_json(capsys, "--checkpoint", "60s", "--notice-lead", "1h", "--mtbi", "1h")


def test_a_config_file_that_does_not_load_is_named_not_taken_for_no_state_directory(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    own_state_dir: Path,
) -> None:
    """`exit_margin = false` beside a good `state_dir` said 'no telemetry file (no state
    directory)', and the telemetry in that directory was left unread without a word."""
    config = tmp_path / "forewarn.toml"
    config.write_text(f'state_dir = "{own_state_dir}"\nexit_margin = false\n')
    monkeypatch.delenv("FOREWARN_STATE_DIR")
    monkeypatch.setenv("FOREWARN_CONFIG", str(config))
    err = fails(capsys)
    assert "the config file does not load" in err and "exit_margin" in err
    assert "no state directory" not in err
    # A plan from flags alone still comes, and says the telemetry was not read.
    plan = plan_json(capsys, "--checkpoint", "10s", "--tax", "3%")
    assert any("exit_margin" in line and "--telemetry" in line for line in plan["warnings"])


@pytest.mark.parametrize(
    "written",
    [["--spot-price", "$2.10/h", "--on-demand-price", "3.90/hr"], ["--spot-price", "2.10 / hour"]],
)
def test_a_price_written_with_its_unit_is_read(
    capsys: pytest.CaptureFixture[str], written: list[str]
) -> None:
    """'$2.10/h', as prices are written, was refused as 'not a number'."""
    sized = [*FIGURES, "--checkpoint-gb", "2.4", "--on-demand-price", "3.90"]
    plan = plan_json(
        capsys, *sized, *written, "--storage-price", "0.023/GB-month", "--io-price", "0.0004/GB"
    )
    plain = plan_json(
        capsys, *sized, "--spot-price", "2.10", "--storage-price", "0.023", "--io-price", "0.0004"
    )
    assert plan["costs"] == plain["costs"]


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--spot-price", "2.10/month", "a price per hour: write 2.10 or 2.10/h"),
        ("--storage-price", "0.023/GB", "a price per GB-month: write 0.023 or 0.023/GB-month"),
        ("--io-price", "0.0004/h", "a price per GB: write 0.0004 or 0.0004/GB"),
    ],
)
def test_a_price_with_another_unit_is_refused_naming_the_one_meant(
    capsys: pytest.CaptureFixture[str], flag: str, value: str, says: str
) -> None:
    argv = [*FIGURES, "--spot-price", "1.2", "--on-demand-price", "3.9", flag, value]
    assert f"{flag}: {says} (got {value!r})" in fails(capsys, *argv)


@given(
    price=st.floats(min_value=0, max_value=1e12, allow_nan=False),
    unit=st.sampled_from(["", "/h", "/hr", "/ hour", "/HOURS"]),
    dollar=st.booleans(),
)
def test_an_hourly_price_reads_the_same_with_or_without_its_unit(
    price: float, unit: str, dollar: bool
) -> None:
    convert = plan_cli._price_per(plan_cli._PER_HOUR, "hour", "2.10 or 2.10/h")
    text = f"{'$' if dollar else ''}{price!r}{unit}"
    assert convert(text) == price


@given(st.text(max_size=20))
def test_a_price_parser_takes_any_text_and_answers_or_refuses(text: str) -> None:
    convert = plan_cli._price_per(plan_cli._PER_GB_MONTH, "GB-month", "0.023")
    try:
        value = convert(text)
    except argparse.ArgumentTypeError:
        return
    assert math.isfinite(value) and value >= 0


def _drain_then_escalation(day: int, *, lead: str = "02:00:00") -> list[str]:
    """One DigitalOcean reclaim mail (a drain with a deadline `lead` ahead), saved on, then
    the agent's terminate at the exit margin, saved on again."""
    hours = int(lead[:2])
    deadline = f"2026-11-{day:02d}T{10 + hours:02d}:00:00Z"
    escalated = f"2026-11-{day:02d}T{9 + hours:02d}:59:30Z"
    notice = (
        '"id":"do/reclaim/{day}","reason":"reclaim","provider":"digitalocean",'
        f'"deadline":"{deadline}"'
    ).replace("{day}", str(day))
    return [
        f'{{"v":1,"at":"2026-11-{day:02d}T10:00:00Z","kind":"notice",{notice},'
        f'"action":"drain","sent_at":"2026-11-{day:02d}T10:00:00Z"}}',
        f'{{"v":1,"at":"2026-11-{day:02d}T10:00:10Z","kind":"ack","notice_id":"do/reclaim/{day}",'
        '"flush_seconds":10,"outcome":"saved"}',
        f'{{"v":1,"at":"{escalated}","kind":"escalation",{notice},"action":"terminate",'
        f'"sent_at":"{escalated}"}}',
        f'{{"v":1,"at":"2026-11-{day:02d}T{9 + hours:02d}:59:40Z","kind":"ack",'
        f'"notice_id":"do/reclaim/{day}","flush_seconds":10,"outcome":"saved"}}',
    ]


def test_a_drain_the_agent_escalated_is_planned_as_the_drain_it_was(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """DigitalOcean's reclaim mail comes as a drain two hours ahead; the agent sends it as
    terminate at the exit margin. The telemetry's lead was the escalation's 30 s, and the plan
    took every reclaim as a 30 s terminate: it left out the save on the drain (one more flush
    per reclaim) and said 'taken as a terminate: the job saves and exits at once'."""
    lines = ['{"v":1,"at":"2026-11-01T00:00:00Z","kind":"start"}']
    for day in range(1, 4):
        lines += _drain_then_escalation(day)
    lines.append('{"v":1,"at":"2026-11-04T00:00:00Z","kind":"stop"}')
    path = tmp_path / "telemetry.jsonl"
    path.write_text("\n".join(lines) + "\n")
    plan = plan_json(capsys, "--telemetry", str(path))
    assert plan["telemetry"]["late_notices"] == 0
    assert plan["inputs"]["notice_lead_seconds"] == {"value": 7200.0, "source": "telemetry"}
    assert plan["notice"]["action"] == "drain"
    assert plan["inputs"]["notice_action"]["source"].startswith("telemetry")
    assert plan["notice"]["terminate_lead_seconds"] == 30
    # Two flushes per noticed reclaim: the drain's and the terminate's.
    flags = ["--checkpoint", "10s", "--checkpoint-p95", "10s", "--interruptions-per-day", "1"]
    as_drain = plan_json(
        capsys, *flags, "--notice-lead", "2h", "--notice-action", "drain", "--interval", "1h"
    )
    measured = plan_json(capsys, "--telemetry", str(path), *flags, "--interval", "1h")
    assert measured["overhead"]["notice_flush"] == pytest.approx(
        as_drain["overhead"]["notice_flush"]
    )
    assert plan_cli.main(["--telemetry", str(path)]) == 0
    table = capsys.readouterr().out
    assert "taken as a drain: the job saves at once and trains on" in table
    assert "(telemetry: 3 of 3 reclaim(s) began as a drain the agent sent as terminate" in table


def test_a_terminate_with_no_job_running_is_not_counted_too_late(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A spot machine reclaimed between two jobs: the agent published the terminate to no
    acking client, and no one saved. The plan counted it as a notice come too late to save
    on, raised the share without a usable notice to 50 % and moved the interval toward
    Daly's, for work that was never at risk."""

    def reclaim(hour: int, clients: int | None, saved: bool) -> list[str]:
        seen = "" if clients is None else f',"clients":{clients}'
        lines = [
            f'{{"v":1,"at":"2026-11-30T{hour:02d}:00:00Z","kind":"notice","id":"n{hour}",'
            f'"action":"terminate","reason":"spot-interruption"{seen},'
            f'"sent_at":"2026-11-30T{hour:02d}:00:00Z","deadline":"2026-11-30T{hour:02d}:02:00Z"}}'
        ]
        if saved:
            lines.append(
                f'{{"v":1,"at":"2026-11-30T{hour:02d}:00:20Z","kind":"ack",'
                f'"notice_id":"n{hour}","flush_seconds":10,"outcome":"saved"}}'
            )
        return lines

    def plan_of(*reclaims: list[str]) -> dict[str, Any]:
        lines = ['{"v":1,"at":"2026-11-30T00:00:00Z","kind":"start"}']
        for each in reclaims:
            lines += each
        lines.append('{"v":1,"at":"2026-11-30T06:00:00Z","kind":"stop"}')
        path = tmp_path / "telemetry.jsonl"
        path.write_text("\n".join(lines) + "\n")
        return plan_json(capsys, "--telemetry", str(path))

    idle = plan_of(reclaim(1, 1, True), reclaim(2, 0, False))
    assert idle["telemetry"]["late_notices"] == 0
    assert idle["telemetry"]["unattended_notices"] == 1
    assert idle["inputs"]["no_notice_share"] == {"value": 0.1, "source": "default"}
    # Still an interruption of the capacity: the rate counts it.
    assert idle["telemetry"]["terminate_notices"] == 2
    assert any("no job" in note for note in idle["notes"]), idle["notes"]
    assert plan_cli.main(["--telemetry", str(tmp_path / "telemetry.jsonl")]) == 0
    assert "(0 too late to save on, 1 reaching no job)" in capsys.readouterr().out
    # A job subscribed that did not save, or an agent too old to say (no "clients"), is late.
    missed = plan_of(reclaim(1, 1, True), reclaim(2, 1, False))
    assert missed["telemetry"]["late_notices"] == 1
    assert missed["inputs"]["no_notice_share"] == {"value": 0.5, "source": "telemetry"}
    older = plan_of(reclaim(1, None, True), reclaim(2, None, False))
    assert older["telemetry"]["late_notices"] == 1
    # A job with no acking subscription (a shell job's `forewarn ack`) that saved is on time.
    shell = plan_of(reclaim(1, 0, True), reclaim(2, 0, True))
    assert shell["telemetry"]["late_notices"] == 0
    assert shell["telemetry"]["unattended_notices"] == 0


def test_a_notice_whose_billed_wait_costs_more_than_it_saves_is_named_with_the_numbers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A 14-minute terminate (Azure's scale-set Terminate) for a 2 s checkpoint: saving at
    once and waiting, billed, for the reclaim costs 2.19 % at best, where not acting on the
    notice and checkpointing every 414 s costs 1.1 %. The plan recommended the first and
    said nothing."""
    job = ["--checkpoint", "2s", "--interruptions-per-day", "2", "--restart", "1m"]
    plan = plan_json(capsys, *job, "--notice-lead", "14m")
    said = [w for w in plan["warnings"] if "costs more than it saves" in w]
    assert len(said) == 1, plan["warnings"]
    best = plan["overhead_at_recommended"]
    assert f"{best:.2%}" in said[0]
    worth = plan["notice_worth"]
    assert worth["acted_on"] == pytest.approx(best)
    assert worth["ignored"] < best
    assert worth["ignored_interval_seconds"] == pytest.approx(
        plan["intervals"]["seconds"]["daly"], rel=0.02
    )
    assert f"{worth['ignored']:.2%}" in said[0]
    assert f"{worth['ignored_interval_seconds']:.0f} s" in said[0]
    # Azure approves a Terminate once saved (after-ack, its default): the lead is not waited
    # out there, and the warning says how to plan that.
    assert "azure.approve = after-ack: give --notice-lead as the time to the save" in said[0]
    # The table says it too.
    assert plan_cli.main([*job, "--notice-lead", "14m"]) == 0
    assert "costs more than it saves" in capsys.readouterr().out
    # AWS's 2-minute notice saves more than its wait costs: no such warning.
    aws = plan_json(capsys, *job, "--notice-lead", "2m")
    assert not [w for w in aws["warnings"] if "costs more than it saves" in w]
    assert aws["notice_worth"]["acted_on"] < aws["notice_worth"]["ignored"]
    # Without a usable notice there is nothing to compare.
    assert plan_json(capsys, *job)["notice_worth"] is None


@pytest.mark.parametrize(
    ("spot", "says"), [("1e300", "2.58e+299x as much"), ("40", "10.3x as much"), ("5", "29% more")]
)
def test_a_verdict_against_a_much_cheaper_alternative_says_how_many_times(
    capsys: pytest.CaptureFixture[str], spot: str, says: str
) -> None:
    """Spot at 1e300 against on-demand at 3.9 printed its share as a 300-digit percentage
    ('spot costs 1.006e+300, 25732309862952016070580...% more')."""
    assert plan_cli.main([*FIGURES, "--spot-price", spot, "--on-demand-price", "3.9"]) == 0
    verdict = capsys.readouterr().out.splitlines()[-1]
    assert says in verdict, verdict
    assert not re.search(r"\d{7}", verdict), verdict


def test_a_longest_interval_shorter_than_the_flush_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--max-interval 1ms` (meant as a minute, or a unit slip) for a 10 s flush recommended
    checkpointing every millisecond: a 1,000,000 % tax, exit 0."""
    job = ["--checkpoint", "10s", "--interruptions-per-day", "1"]
    err = fails(capsys, *job, "--max-interval", "1ms")
    assert "--max-interval" in err and "10 s" in err, err
    assert fails(capsys, *job, "--max-interval", "9s")
    # As long as the flush or longer, it is a cap like any other.
    assert plan_json(capsys, *job, "--max-interval", "10s")["intervals"]["seconds"][
        "recommended"
    ] == pytest.approx(10)


def test_saves_on_drains_that_never_became_a_terminate_are_counted_in_a_note(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """AWS's rebalance recommendation is a drain with no deadline: the job saves on each and
    trains on, and most never end in a reclaim. The telemetry held six such saves a day of
    60 s each (0.42 % of the time) and the plan said nothing of them."""
    lines = ['{"v":1,"at":"2026-11-30T00:00:00Z","kind":"start"}']
    for hour in range(0, 24, 4):
        lines += [
            f'{{"v":1,"at":"2026-11-30T{hour:02d}:00:00Z","kind":"notice","id":"aws/rebalance/{hour}",'
            '"action":"drain","reason":"rebalance-recommendation","deadline":null,'
            f'"sent_at":"2026-11-30T{hour:02d}:00:00Z","clients":1}}',
            f'{{"v":1,"at":"2026-11-30T{hour:02d}:01:00Z","kind":"ack",'
            f'"notice_id":"aws/rebalance/{hour}","flush_seconds":60,"outcome":"saved"}}',
        ]
    lines.append('{"v":1,"at":"2026-12-01T00:00:00Z","kind":"stop"}')
    path = tmp_path / "telemetry.jsonl"
    path.write_text("\n".join(lines) + "\n")
    plan = plan_json(capsys, "--telemetry", str(path), "--interruptions-per-day", "1")
    assert plan["telemetry"]["drain_saves"] == 6
    (note,) = [note for note in plan["notes"] if "drain" in note and "save" in note]
    assert "6 save(s) on drains that did not end in a terminate" in note
    assert "6 a day" in note and "0.42%" in note


@pytest.mark.parametrize("checkpoint_seconds", [10, 98])
def test_the_chosen_interval_s_label_stays_inside_the_axes(checkpoint_seconds: float) -> None:
    """A small overhead (a 10 s checkpoint, one reclaim a day with a 2-minute notice: 0.60 %
    at the marker) put the label below the marker across the x axis, its white box over
    the tick labels; it goes above the marker when there is no room below."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    from forewarn.agent.plan import Timing, choose_interval
    from forewarn.agent.plan.plot import build_figure

    timing = Timing(
        checkpoint_seconds=checkpoint_seconds, mtbi_seconds=86400, notice_lead_seconds=120
    )
    figure = build_figure(timing, choose_interval(timing))
    try:
        (axis,) = figure.axes
        renderer = figure.canvas.get_renderer()
        (label,) = [text for text in axis.texts if "overhead" in text.get_text()]
        box = label.get_window_extent(renderer)
        inside = axis.get_window_extent(renderer)
        assert box.y0 >= inside.y0 and box.y1 <= inside.y1, (box, inside)
    finally:
        plt.close(figure)


def test_plan_run_by_a_member_of_the_agents_group_reads_the_system_agents_telemetry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The system agent's state directory is 0750 forewarn:forewarn, its telemetry 0640: a
    member of the group may read it but not write there, and `forewarn plan` looked in
    ~/.local/state/forewarn (the directory an agent of that user's own would write)."""
    from forewarn.agent import config as agent_config
    from other_user import call_as, other_user

    uid, gid = other_user()
    with tempfile.TemporaryDirectory(dir="/tmp") as directory:
        Path(directory).chmod(0o755)
        system = Path(directory, "lib-forewarn")  # stands for /var/lib/forewarn
        system.mkdir(mode=0o750)
        os.chown(system, 0, gid)
        (system / "telemetry.jsonl").write_text("")
        home = Path(directory, "home")
        home.mkdir()
        os.chown(home, uid, gid)
        monkeypatch.setattr(agent_config, "SYSTEM_STATE_DIR", system)
        monkeypatch.setenv("HOME", str(home))
        config = Path(directory, "forewarn.toml")
        config.write_text("")
        config.chmod(0o644)
        monkeypatch.setenv("FOREWARN_CONFIG", str(config))
        for name in ("FOREWARN_STATE_DIR", "FOREWARN_RUNTIME_DIR", "XDG_STATE_HOME"):
            monkeypatch.delenv(name, raising=False)

        def found() -> str:
            return str(plan_cli._default_telemetry())

        member = call_as(uid, 65534, found, groups=(gid,))
        stranger = call_as(uid, 65534, found)
    assert member == str((system / "telemetry.jsonl", None))
    assert stranger == str((home / ".local/state/forewarn/telemetry.jsonl", None))


@pytest.mark.parametrize(
    ("spot", "on_demand"),
    [("1.2", "3.9"), ("1.2", "45000000"), ("1.2", "1e12"), ("1e300", "3.9"), ("2e-9", "3.9")],
)
def test_the_cost_table_keeps_its_columns_for_any_price(
    capsys: pytest.CaptureFixture[str], spot: str, on_demand: str
) -> None:
    """`--spot-price 1e300` printed its compute line as a 301-digit number, and an on-demand
    price of 1e12 as `1000000000000.0000`, each past the 12 places of its column, so every
    figure after it stood under the wrong option."""
    argv = [*FIGURES, "--spot-price", spot, "--on-demand-price", on_demand]
    assert plan_cli.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("Cost per useful hour") + 1
    header = lines[start]
    rows = lines[start + 1 : lines.index("", start)]
    # Each figure ends where its option's name ends in the header.
    ends = [match.end() for match in re.finditer(r"\S+", header)]
    assert len(ends) == 2
    for row in rows:
        cells = [match.end() for match in re.finditer(r"(?<=\s)[-\d.e+]+(?=\s|$)", row)]
        assert cells and set(cells) <= set(ends), row


@pytest.mark.parametrize(
    "size", [["--checkpoint-size", "14GB"], ["--checkpoint-gb", "14"], ["--params", "7B"]]
)
def test_a_flush_and_a_bandwidth_together_are_refused_naming_both(
    capsys: pytest.CaptureFixture[str], size: list[str]
) -> None:
    """`--checkpoint 10s --checkpoint-size 14GB --bandwidth 1GB/s` planned on the 10 s and
    printed "at 1000 MB/s: 14 s a checkpoint" beside it: two flushes, one used in silence."""
    err = fails(capsys, "--checkpoint", "10s", *size, "--bandwidth", "1GB/s", "--tax", "3%")
    assert "--checkpoint" in err and "--bandwidth" in err, err
    assert "give one" in err, err


def test_a_flush_with_a_size_alone_still_prices_storage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A measured flush and the size, with no bandwidth, is no contradiction: the size
    prices storage and I/O."""
    plan = plan_json(capsys, "--checkpoint", "10s", "--checkpoint-size", "14GB", "--tax", "3%")
    assert plan["inputs"]["checkpoint_seconds"] == {"value": 10.0, "source": "flag"}
    assert plan["checkpoint_size"]["gb"] == pytest.approx(14.0)


@pytest.mark.parametrize("share", [["--no-notice-share", "20%"], ["--no-notice-per-day", "0.5"]])
def test_a_share_without_notice_is_refused_where_no_notice_lead_is_known(
    capsys: pytest.CaptureFixture[str], share: list[str]
) -> None:
    """`--no-notice-share 20%` with no notice lead printed "20.00 % (flag)" among the inputs
    and planned every interruption as one without a notice: a share of those without a
    usable notice means nothing where none has one. Refused naming the lead it needs, as
    --notice-action is."""
    err = fails(capsys, "--checkpoint", "10s", "--interruptions-per-day", "1", *share)
    assert f"{share[0]}: only used with a notice lead" in err, err
    plan = plan_json(
        capsys, "--checkpoint", "10s", "--interruptions-per-day", "1", "--notice-lead", "2m", *share
    )
    assert plan["inputs"]["no_notice_share"]["source"] == "flag"


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--checkpoint", "-1,5h", "--tax", "3%"], "--checkpoint/--flush: must not be negative"),
        (["--checkpoint", "10s", "--tax", "-3,5%"], "--tax"),
        (["--checkpoint", "10s", "--mtbi", "1d", "--spot-price", "-2,50"], "--spot-price"),
        (
            ["--checkpoint", "10s", "--mtbi", "1d", "--spot-price", "1", "--on-demand-price=-3,9"],
            "--on-demand-price: must be zero or more (got '-3,9')",
        ),
        (["--checkpoint", "10s", "--interruptions-per-day", "-0,5"], "must be positive"),
    ],
)
def test_a_negative_number_with_a_decimal_comma_is_refused_as_negative(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    """`--checkpoint -1,5h` and `--tax -3,5%` were taken for options: "expected one
    argument", where `-1.5h` is refused as negative, naming its value."""
    err = fails(capsys, *argv)
    assert named in err and "expected one argument" not in err, err
    assert "could not convert" not in err, err


# H211's walk: each refusal named a flag the user did not give, or asked for one given.
@pytest.mark.parametrize(
    ("argv", "said"),
    [
        # One step at 1e-300 steps a second is 1e300 s: "--interval: 1e+300 s is so long
        # ...", of an --interval nobody wrote.
        (
            ["--interval-steps", "1", "--steps-per-second", "1e-300"],
            "--interval-steps: 1 steps at 1e-300 a second: 1e+300 s is so long against "
            "86400 s between interruptions that the job would never keep any work",
        ),
        # A checkpoint of 1e304 s (2CM overflows): "--interruptions-per-day: 86400 s between
        # interruptions (1 a day) is too long", of one interruption a day.
        (
            ["--checkpoint", "1" + "0" * 304 + "s"],
            "--interruptions-per-day: 86400 s between interruptions is too short for a 0 s "
            "restart and reload and a 1e+304 s checkpoint: the job would never keep any work",
        ),
    ],
)
def test_a_refusal_names_the_value_given_and_what_is_wrong_with_it(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    err = fails(capsys, "--checkpoint", "10s", "--interruptions-per-day", "1", *argv)
    assert err.startswith(f"forewarn: plan: {said}"), err


def test_a_utilization_with_a_reserved_price_of_0_says_the_price_is_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--reserved-price 0 --reserved-utilization 50%` said "only used with --reserved-price",
    asking for a flag given: the price of 0 is what makes the utilization moot."""
    given = ["--reserved-price", "0", "--reserved-utilization", "50%"]
    err = fails(capsys, *FIGURES, *PRICES, *given)
    assert err == (
        "forewarn: plan: --reserved-utilization: only used with a --reserved-price above 0 "
        "(given 0: hardware already paid for costs nothing at any utilization)\n"
    ), err


def test_the_plot_says_an_overhead_off_the_chart_in_few_digits_within_the_figure() -> None:
    """`--checkpoint 45s --mtbi 1s --plot`: the legend read 'off the chart: at least
    9496120697900788350976 %', and so wide that both its ends were cut off the PNG."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    from forewarn.agent.plan.inputs import Timing
    from forewarn.agent.plan.model import choose_interval
    from forewarn.agent.plan.plot import build_figure

    timing = Timing(checkpoint_seconds=45.0, mtbi_seconds=1.0)
    figure = build_figure(timing, choose_interval(timing))
    try:
        figure.canvas.draw()
        legend = figure.axes[0].get_legend()
        texts = [text.get_text() for text in legend.get_texts()]
        assert "no usable notice (Daly's complete model), off the chart: at least 9.5e+21 %" in (
            texts
        ), texts
        box = legend.get_window_extent()
        assert box.x0 >= 0 and box.x1 <= figure.bbox.width, (box, figure.bbox)
    finally:
        plt.close(figure)


def test_a_p95_below_the_stall_and_the_upload_uses_both_and_warns(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--checkpoint 2s --upload 25s --checkpoint-p95 10s was used as given: a 30 s notice
    was taken to cover a save durable only 27 s after its stall began (5 + 10 s < 30 s), and
    the plan read 'usable'. The save's own floor, C + W, is used, and a warning names both."""
    argv = ["--checkpoint", "2s", "--upload", "25s", "--checkpoint-p95", "10s"]
    argv += ["--notice-lead", "30s", "--interruptions-per-day", "24", "--detection", "5s"]
    plan = plan_json(capsys, *argv)
    assert plan["flush"]["p95_seconds"] == 27
    assert plan["notice"]["usable"] is False
    assert any("10 s" in line and "27 s" in line for line in plan["warnings"]), plan["warnings"]
    assert plan_cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "27 s  (the stall + the upload: above the p95 10 s, flag)" in out
