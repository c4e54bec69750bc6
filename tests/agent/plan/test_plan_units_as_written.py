"""`forewarn plan`'s rates and prices written as people write them: `500MB/sec`,
`0.02/GiB-month`, and the traces an unquoted `$` leaves in a price."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

import pytest
from forewarn.agent.plan import cli as plan_cli
from forewarn.agent.plan.sizes import parse_bandwidth, parse_count, parse_size
from hypothesis import example, given
from hypothesis import strategies as st

GIB_PER_GB = 2**30 / 10**9


@given(
    number=st.floats(min_value=0.001, max_value=1e6, allow_nan=False),
    unit=st.sampled_from(["MB", "GiB", "Gbit", "Mb", "kB"]),
    per=st.sampled_from(["/sec", "/secs", "/second", " / sec", "/SEC", " per second", " per sec"]),
)
@example(number=500.0, unit="MB", per="/sec")
def test_a_rate_per_sec_or_per_second_reads_as_per_s(number: float, unit: str, per: str) -> None:
    """`--bandwidth 500MB/sec` was 'not a rate such as 500MB/s'."""
    assert parse_bandwidth(f"{number!r}{unit}{per}") == parse_bandwidth(f"{number!r}{unit}/s")


def test_a_rate_per_something_else_is_still_refused() -> None:
    for text in ("500MB/min", "500MB/h", "500MB per hour", "500MB/secx"):
        with pytest.raises(ValueError, match="not a rate"):
            parse_bandwidth(text)


@given(
    price=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    unit=st.sampled_from(["GiB-month", "GiB/month", "GiB-mo", "gib/mo", "GiBmonth"]),
)
@example(price=0.02, unit="GiB-month")
def test_a_price_per_gib_month_is_converted_to_gb_month(price: float, unit: str) -> None:
    """`--storage-price 0.02/GiB-month` (as a provider bills, in binary gigabytes) was refused;
    the plan works in GB (10^9 bytes), so it is that price over 1.074."""
    convert = plan_cli._price_per(plan_cli._PER_GB_MONTH, "GB-month", "0.023 or 0.023/GB-month")
    assert convert(f"{price!r}/{unit}") == pytest.approx(price / GIB_PER_GB, rel=1e-12)


@given(
    price=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    unit=st.sampled_from(["GiB", "gib", "TB", "TiB"]),
)
def test_an_io_price_per_gib_or_tb_is_converted_to_gb(price: float, unit: str) -> None:
    convert = plan_cli._price_per(plan_cli._PER_GB, "GB", "0.0004 or 0.0004/GB")
    per_gb = {"gib": 1 / GIB_PER_GB, "tb": 1e-3, "tib": 1e9 / 2**40}[unit.lower()]
    assert convert(f"{price!r}/{unit}") == pytest.approx(price * per_gb, rel=1e-12)


@pytest.mark.parametrize(
    ("written", "says"),
    [
        # `$10` unquoted reaches forewarn as `0`, `$100` as `00`, `$105` as `05`.
        ("0", "an unquoted $10 reaches forewarn as 0"),
        ("00", "an unquoted $100 reaches forewarn as 00"),
        ("05", "an unquoted $105 reaches forewarn as 05"),
        ("0/h", "an unquoted $10 reaches forewarn as 0"),
        # `$0.35` unquoted: the shell puts its own name for `$0`.
        ("bash.35", "the shell's name for $0"),
        ("/home/me/plan.sh.35", "the shell's name for $0"),
        ("-bash.35", "the shell's name for $0"),
    ],
)
def test_a_compute_price_with_the_traces_of_an_unquoted_dollar_is_refused(
    written: str, says: str
) -> None:
    hourly = plan_cli._hourly
    with pytest.raises(argparse.ArgumentTypeError, match="quote it") as caught:
        hourly(written)
    assert says in str(caught.value)


def test_a_zero_compute_price_quoted_or_written_so_is_refused_too() -> None:
    """A compute price of 0 prices nothing: whether a shell made it or not, the plan's
    comparison against it means nothing."""
    hourly = plan_cli._hourly
    for text in ("0.0", "$0", "0.00/h"):
        with pytest.raises(argparse.ArgumentTypeError, match="more than 0"):
            hourly(text)
    assert hourly("0.5") == 0.5 and hourly("$10") == 10


def test_storage_and_io_prices_may_still_be_zero() -> None:
    convert = plan_cli._price_per(plan_cli._PER_GB_MONTH, "GB-month", "0.023 or 0.023/GB-month")
    assert convert("0") == 0


@given(st.text(max_size=20))
def test_an_hourly_price_parser_takes_any_text_and_answers_or_refuses(text: str) -> None:
    hourly = plan_cli._hourly
    try:
        value = hourly(text)
    except argparse.ArgumentTypeError:
        return
    assert value > 0


FIGURES = ["--checkpoint", "10s", "--interruptions-per-day", "4"]


@pytest.mark.parametrize("flag", ["--spot-price", "--on-demand-price"])
def test_the_command_refuses_a_spot_or_on_demand_price_of_0(
    capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    """`--spot-price $10` unquoted reaches forewarn as `0`: the plan called spot free."""
    argv = [*FIGURES, "--spot-price", "1.2", "--on-demand-price", "3.9", flag, "0"]
    with pytest.raises(SystemExit) as caught:
        plan_cli.main(argv)
    assert caught.value.code == 2
    assert f"{flag}: '0': a spot or on-demand price must be more than 0" in capsys.readouterr().err


def test_the_command_takes_a_reserved_price_of_0_hardware_already_paid_for(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert plan_cli.main([*FIGURES, "--spot-price", "1.2", "--reserved-price", "0"]) == 0


@given(
    per_hour=st.floats(min_value=0.01, max_value=1e4, allow_nan=False),
    unit=st.sampled_from(["s", "sec", "second", "min", "minute", "minutes", "day", "days", "d"]),
)
@example(per_hour=2.10, unit="s")
def test_a_compute_price_per_second_minute_or_day_is_the_same_per_hour(
    per_hour: float, unit: str
) -> None:
    """Clouds bill per second (Azure and GCP list prices per second or minute, some GPU
    clouds per day): `--spot-price 0.000583/s` was refused, 'a price per hour: write 2.10 or
    2.10/h'. It is that price times 3600 an hour; the plan must not depend on the unit."""
    seconds = {"s": 1, "sec": 1, "second": 1, "min": 60, "minute": 60, "minutes": 60}
    span = seconds.get(unit, 86400)
    written = f"{per_hour * span / 3600!r}/{unit}"
    assert plan_cli._hourly(written) == pytest.approx(per_hour, rel=1e-12)
    assert plan_cli._reserved_hourly(written) == pytest.approx(per_hour, rel=1e-12)


def test_a_compute_price_per_month_is_still_refused_naming_the_hour() -> None:
    # A month is 720 or 730 or 744 hours to different bills: the plan does not guess.
    for text in ("1500/month", "1500/mo", "0.035/m"):  # `/m`: a minute, or a month?
        with pytest.raises(argparse.ArgumentTypeError, match="a price per hour"):
            plan_cli._hourly(text)


# Each share flag with the range it takes, as the refusal says it, and texts outside it.
SHARE_RANGES = {
    "--no-notice-share": ("must be from 0% to 100%", ["150%", "100.5%"]),
    "--reserved-utilization": ("must be above 0% and at most 100%", ["0%", "0", "150%"]),
    "--fallback-share": ("must be 0% or more and below 100%", ["100%", "1", "1.0", "250%"]),
}
SHARE_PRICES = {
    "--no-notice-share": [],
    "--reserved-utilization": ["--spot-price", "1.2", "--reserved-price", "1"],
    "--fallback-share": ["--spot-price", "1.2", "--on-demand-price", "3.9"],
}


@pytest.mark.parametrize(
    ("flag", "written"),
    [(flag, text) for flag, (_, texts) in SHARE_RANGES.items() for text in texts],
)
def test_a_share_out_of_its_range_is_refused_as_written(
    capsys: pytest.CaptureFixture[str], flag: str, written: str
) -> None:
    """`--reserved-utilization 0%` said 'must be in (0, 1] (got 0.0)' and `--fallback-share
    100%` 'must be in [0, 1) (got 1.0)': an interval notation and a fraction nobody wrote,
    where `--tax 0%` says 'must be above 0% and below 100% (got '0%')'."""
    argv = [*FIGURES, *SHARE_PRICES[flag], flag, written]
    try:
        code = plan_cli.main(argv)
    except SystemExit as caught:  # argparse's refusal
        code = caught.code
    assert code == 2
    says = SHARE_RANGES[flag][0]
    assert f"{flag}: {says} (got {written!r})" in capsys.readouterr().err


@given(
    flag=st.sampled_from(sorted(SHARE_RANGES)),
    percent=st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
)
@example(flag="--fallback-share", percent=-5.0)
def test_a_share_flag_takes_its_range_and_names_the_text_outside_it(
    flag: str, percent: float
) -> None:
    """Any `N%`: inside the flag's range it is N/100; outside it, the refusal names the flag's
    range and the text as written (a negative one: 'must not be negative')."""
    parse = plan_cli.SHARE_TYPES[flag]
    written = f"{percent!r}%"
    low_open = flag == "--reserved-utilization"
    high_open = flag == "--fallback-share"
    share = percent / 100
    inside = (share > 0 if low_open else share >= 0) and (share < 1 if high_open else share <= 1)
    if inside:
        assert parse(written) == pytest.approx(share, rel=1e-12)
        return
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse(written)
    message = str(caught.value)
    assert repr(written) in message
    if percent < 0:
        assert message.startswith("must not be negative")
    else:
        assert message.startswith(SHARE_RANGES[flag][0])


@pytest.mark.parametrize(
    ("written", "meant"),
    [
        ("14G", "14GB (10^9 bytes) or 14GiB (2^30 bytes"),
        ("800M", "800MB (10^6 bytes) or 800MiB (2^20 bytes"),
        ("1.5T", "1.5TB (10^12 bytes) or 1.5TiB (2^40 bytes"),
        ("14 Gi", "14GB (10^9 bytes) or 14GiB (2^30 bytes"),
        ("512k", "512KB (10^3 bytes) or 512KiB (2^10 bytes"),
    ],
)
def test_a_size_as_du_and_ls_print_it_is_refused_naming_both_units(
    written: str, meant: str
) -> None:
    """`du -sh` and `ls -lh` print a checkpoint's size as `14G`: `--checkpoint-size 14G` said
    'not a size such as 14GB or 2.4GiB', as it said of any text, leaving the user to guess
    which of the two 14G is (du's G is 2^30 bytes, 7 % more than 10^9)."""
    with pytest.raises(ValueError) as caught:
        parse_size(written)
    message = str(caught.value)
    assert meant in message and "du -h" in message and repr(written) in message


@pytest.mark.parametrize(("written", "meant"), [("1G/s", "1GB/s"), ("500M/s", "500MB/s")])
def test_a_rate_without_its_byte_unit_is_refused_naming_both_units(
    written: str, meant: str
) -> None:
    with pytest.raises(ValueError) as caught:
        parse_bandwidth(written)
    message = str(caught.value)
    assert meant in message and meant.replace("B/", "iB/") in message
    assert repr(written) in message


@given(
    number=st.floats(min_value=0.001, max_value=1e6, allow_nan=False),
    prefix=st.sampled_from(["k", "K", "M", "m", "G", "g", "T", "t", "Ki", "Mi", "Gi", "Ti"]),
    space=st.sampled_from(["", " "]),
)
def test_a_size_with_a_prefix_alone_is_refused_with_both_readings(
    number: float, prefix: str, space: str
) -> None:
    """A prefix without B names no unit: refused, never read as one of the two, and the
    refusal offers both, each with the text's number."""
    written = f"{number!r}{space}{prefix}"
    with pytest.raises(ValueError) as caught:
        parse_size(written)
    stem = prefix[0].upper()
    message = str(caught.value)
    assert f"{number!r}{stem}B " in message and f"{number!r}{stem}iB " in message


@given(
    speed=st.floats(min_value=1e-3, max_value=1e4, allow_nan=False),
    per_second=st.sampled_from(
        # `/sec` and `/second` as the seconds-a-step forms take `sec/it` and `seconds/step`:
        # `3.5 steps/sec` was "not a speed" beside an accepted `1.25 sec/it` (H211's walk).
        ["it/s", "its/s", " it/s", "steps/s", " steps/s", "step/s", "/s", " steps/sec", "it/second"]
    ),
)
@example(speed=3.5, per_second="it/s")
@example(speed=3.5, per_second=" steps/sec")
def test_a_speed_as_tqdm_prints_it_in_iterations_a_second_is_that_speed(
    speed: float, per_second: str
) -> None:
    """tqdm's bar (transformers', Lightning's) prints a job's speed as `3.50it/s`:
    `--steps-per-second 3.50it/s` was 'not a number'."""
    assert plan_cli._speed(f"{speed!r}{per_second}") == pytest.approx(speed, rel=1e-12)


@given(
    seconds=st.floats(min_value=1e-3, max_value=1e4, allow_nan=False),
    per_step=st.sampled_from(["s/it", " s/it", "s/step", "sec/it", " seconds/step"]),
)
@example(seconds=1.25, per_step="s/it")
def test_a_speed_as_tqdm_prints_it_in_seconds_an_iteration_is_inverted(
    seconds: float, per_step: str
) -> None:
    """Slower than one step a second, tqdm prints `1.25s/it`: seconds a step, the inverse.
    Typed as `--steps-per-second 1.25` it planned 1.25 steps a second where the job makes
    0.8, every interval's step count 56 % too high; written as printed it is 0.8."""
    assert plan_cli._speed(f"{seconds!r}{per_step}") == pytest.approx(1 / seconds, rel=1e-12)


def test_a_speed_in_another_unit_is_refused_naming_the_forms() -> None:
    for text in ("3.5it/min", "3.5 it/h", "1.25min/it", "0it/s", "0s/it", "-3it/s", "fast"):
        with pytest.raises(argparse.ArgumentTypeError) as caught:
            plan_cli._speed(text)
        message = str(caught.value)
        assert repr(text) in message or "must be positive" in message, message


def test_the_command_takes_the_speed_as_tqdm_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--checkpoint", "10s", "--tax", "3%", "--json", "--steps-per-second"]
    assert plan_cli.main([*argv, "1.25s/it"]) == 0
    slow = json.loads(capsys.readouterr().out)
    assert slow["inputs"]["steps_per_second"]["value"] == pytest.approx(0.8)
    assert slow["intervals"]["steps"]["chosen"] == round(1000 / 3 * 0.8)


def test_the_command_takes_an_mtbi_in_weeks(capsys: pytest.CaptureFixture[str]) -> None:
    """`--mtbi 1w`, one interruption a week, was refused: "unknown unit 'w'"."""
    argv = ["--checkpoint", "10s", "--json"]
    assert plan_cli.main([*argv, "--mtbi", "1w"]) == 0
    weekly = json.loads(capsys.readouterr().out)
    assert weekly["inputs"]["mtbi_seconds"]["value"] == 7 * 86400
    assert plan_cli.main([*argv, "--mtbi", "7d"]) == 0
    assert json.loads(capsys.readouterr().out)["intervals"] == weekly["intervals"]


# Prices as people write them (found: `2,50`, `USD 2.50` and `2.50 EUR` were refused as
# 'not a number').
_CODES = ["USD", "usd", "EUR", "GBP", "JPY", "CAD", "INR"]
_SYMBOLS = ["$", "US$", "€", "£", "¥", "₹"]


@given(
    cents=st.integers(min_value=1, max_value=10**7),
    currency=st.sampled_from(_CODES + _SYMBOLS),
    after=st.booleans(),
    gap=st.sampled_from(["", " "]),
    comma=st.booleans(),
    per=st.sampled_from(["", "/h", "/hour"]),
)
@example(cents=250, currency="USD", after=False, gap=" ", comma=False, per="")
@example(cents=250, currency="€", after=True, gap="", comma=True, per="")
def test_a_price_with_its_currency_or_a_decimal_comma_is_that_price(
    cents: int, currency: str, after: bool, gap: str, comma: bool, per: str
) -> None:
    number = f"{cents // 100}{',' if comma else '.'}{cents % 100:02d}"
    written = f"{number}{gap}{currency}" if after else f"{currency}{gap}{number}"
    assert plan_cli._hourly(written + per) == pytest.approx(cents / 100, rel=1e-12)
    assert plan_cli._hourly(number + per) == pytest.approx(cents / 100, rel=1e-12)
    # The currency named is kept to compare the prices by; `$` and `¥` name several.
    named = {"$": None, "US$": "USD", "€": "EUR", "£": "GBP", "¥": None, "₹": "INR"}
    expected = named[currency] if currency in named else currency.upper()
    assert plan_cli._hourly(written + per).currency == expected
    assert plan_cli._hourly(number + per).currency is None


@pytest.mark.parametrize(
    ("written", "value"),
    [("2,50", 2.5), ("0,023", 0.023), ("1,5", 1.5), ("12,3456", 12.3456), (",5", 0.5)],
)
def test_a_decimal_comma_that_is_no_thousands_separator_is_read(written: str, value: float) -> None:
    convert = plan_cli._price_per(plan_cli._PER_GB_MONTH, "GB-month", "0.023 or 0.023/GB-month")
    assert convert(written) == pytest.approx(value, rel=1e-12)
    assert convert(written + "/GB-month") == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize(
    ("written", "says"),
    [
        ("1,234", "'1,234' is 1234 with a thousands comma or 1.234 with a decimal one"),
        ("USD 2,500", "'USD 2,500' is 2500 with a thousands comma or 2.500 with a decimal one"),
        ("1,234.50", "one decimal mark and no thousands separator"),
        ("1.234,50", "one decimal mark and no thousands separator"),
        ("1,2,3", "one decimal mark and no thousands separator"),
        ("XYZ 2.50", "not a price: 'XYZ 2.50'"),
        ("2.50 dollars", "not a price: '2.50 dollars'"),
        ("USD", "not a price: 'USD'"),
    ],
)
def test_a_price_that_is_not_unambiguous_is_refused_saying_what_is_taken(
    written: str, says: str
) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        plan_cli._hourly(written)
    message = str(refused.value)
    assert says in message
    if "not a price" in message:
        assert "USD 2.50" in message and "2,50" in message  # what is accepted


def test_prices_in_two_currencies_are_refused_naming_both(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A spot price in EUR against an on-demand one in USD compared two currencies as one."""
    argv = [*FIGURES, "--spot-price", "EUR 1.10", "--on-demand-price", "USD 3.90"]
    assert plan_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--on-demand-price" in err and "USD" in err and "EUR" in err and "--spot-price" in err
    # The same currency, or one left unsaid, is one currency.
    assert plan_cli.main([*FIGURES, "--spot-price", "1,10 EUR", "--on-demand-price", "€3.90"]) == 0
    assert plan_cli.main([*FIGURES, "--spot-price", "USD 1.10", "--on-demand-price", "3.90"]) == 0


def test_the_command_takes_prices_as_people_write_them(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*FIGURES, "--json", "--checkpoint-gb", "2", "--spot-price", "USD 2.50"]
    argv += ["--on-demand-price", "3,90/h", "--storage-price", "$0,023/GB-month"]
    assert plan_cli.main(argv) == 0
    written = json.loads(capsys.readouterr().out)["costs"]
    plain = [*FIGURES, "--json", "--checkpoint-gb", "2", "--spot-price", "2.5"]
    plain += ["--on-demand-price", "3.9", "--storage-price", "0.023"]
    assert plan_cli.main(plain) == 0
    assert written == json.loads(capsys.readouterr().out)["costs"]
    assert written["spot"]["lines"]["compute"] == 2.5


def test_a_rare_interruption_still_costs_the_work_it_throws_away(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--interruptions-per-day 1e-300` said "one interruption costs 0 s" at a 24 h
    interval: it throws away half the interval's work, 12 h, on average."""
    assert plan_cli.main(["--checkpoint", "10s", "--interruptions-per-day", "1e-300"]) == 0
    assert "one interruption costs 12 h" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["--steps-per-second", "1e300", "--interruptions-per-day", "1"],
        ["--steps-per-second", "3.5", "--interruptions-per-day", "1e-300"],
        ["--steps-per-second", "1e300", "--tax", "3%"],
    ],
)
def test_a_step_count_beyond_any_counter_is_printed_to_its_digits(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """`--steps-per-second 1e300` printed 300-digit step counts (and `1e-300` interruptions
    a day, Young's 1.5e148-day interval, 160 digits): a count past 2**53 has no more digits
    than the float it came from, and none a step counter (int64) holds. It is printed as
    the float, to 3 digits, as the seconds beside it."""
    assert plan_cli.main(["--checkpoint", "10s", *argv]) == 0
    table = capsys.readouterr().out
    rows = [line for line in table.splitlines() if line.endswith((" steps", " step"))]
    assert rows and max(len(line) for line in rows) < 80, rows
    assert plan_cli.main(["--checkpoint", "10s", "--json", *argv]) == 0
    steps = json.loads(capsys.readouterr().out)["intervals"]["steps"]
    for count in steps.values():
        assert (
            count is None
            or (isinstance(count, int) and count <= 2**53)
            or (isinstance(count, float) and count > 2**53)
        ), steps
    assert any(isinstance(count, float) for count in steps.values()), steps


def test_the_plot_labels_a_step_count_beyond_any_counter_to_its_digits() -> None:
    """The plot's marker said `1,307,875,...` in 304 digits at `--steps-per-second 1e300`,
    and its top axis `1.31e+297M`."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    from forewarn.agent.plan import Timing, choose_interval
    from forewarn.agent.plan.plot import build_figure, count_label

    timing = Timing(checkpoint_seconds=10, mtbi_seconds=86400, steps_per_second=1e300)
    figure = build_figure(timing, choose_interval(timing))
    try:
        (axis,) = figure.axes
        marked = [text.get_text() for text in axis.texts if "steps" in text.get_text()]
        assert marked and all(len(line) < 80 for text in marked for line in text.splitlines())
        assert any("1.31e+303 steps" in text for text in marked), marked
    finally:
        plt.close(figure)
    assert count_label(1.31e303) == "1.31e+303"
    assert count_label(2.5e9) == "2.5G" and count_label(1.2e6) == "1.2M"


@given(
    whole=st.integers(min_value=0, max_value=999),
    fraction=st.from_regex(r"\A[0-9]{1,2}\Z|\A[0-9]{4,6}\Z"),
    form=st.sampled_from(["{}", "{}%", "{}it/s", "{}GB", "{} GiB", "{}MB/s", "{}B", "{}M"]),
)
@example(whole=0, fraction="5", form="{}")
@example(whole=3, fraction="5", form="{}%")
@example(whole=14, fraction="5", form="{}GB")
def test_every_number_of_the_plan_takes_a_decimal_comma_as_its_point(
    whole: int, fraction: str, form: str
) -> None:
    """`--interruptions-per-day 0,5`, `--tax 3,5%`, `--steps-per-second 3,5it/s`,
    `--checkpoint-size 14,5GB` were 'not a number' (or size, share, speed) where a price took
    `2,50`: a comma that cannot group thousands (not 3 digits after it) is the decimal mark."""
    parsers = {
        "{}": plan_cli._positive,
        "{}%": plan_cli._fraction,
        "{}it/s": plan_cli._speed,
        "{}GB": parse_size,
        "{} GiB": parse_size,
        "{}MB/s": parse_bandwidth,
        "{}B": parse_count,
        "{}M": parse_count,
    }
    parse = parsers[form]

    def read(text: str) -> float | str:
        try:
            return float(parse(text))
        except (ValueError, argparse.ArgumentTypeError) as error:
            return type(error).__name__

    pointed = read(form.format(f"{whole}.{fraction}"))
    assert read(form.format(f"{whole},{fraction}")) == pointed


@pytest.mark.parametrize(
    ("parse", "written"),
    [
        (plan_cli._positive, "1,234"),
        (parse_size, "1,234GB"),
        (parse_bandwidth, "1,500MB/s"),
        (parse_count, "1,300M"),
    ],
)
def test_a_comma_that_may_group_thousands_is_refused_with_both_readings(
    parse: Any, written: str
) -> None:
    number = written.split("G")[0].split("M")[0]
    whole, fraction = number.split(",")
    with pytest.raises((ValueError, argparse.ArgumentTypeError)) as refused:
        parse(written)
    assert f"{whole}{fraction} with a thousands comma or {whole}.{fraction}" in str(refused.value)


def test_the_cost_table_names_the_currency_the_prices_were_written_in(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--spot-price 'EUR 1.10'` was read, and the costs printed with no currency: the
    currency written is the table's (and `currency` in JSON); none written, none shown."""
    argv = [*FIGURES, "--spot-price", "1,10 €", "--on-demand-price", "3.90"]
    assert plan_cli.main(argv) == 0
    assert "Cost per useful hour (EUR)" in capsys.readouterr().out
    assert plan_cli.main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["currency"] == "EUR"
    plain = [*FIGURES, "--spot-price", "1.10", "--on-demand-price", "3.90"]
    assert plan_cli.main(plain) == 0
    assert "Cost per useful hour\n" in capsys.readouterr().out
    assert plan_cli.main([*plain, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["currency"] is None


@given(
    whole=st.integers(min_value=0, max_value=999),
    fraction=st.from_regex(r"\A[0-9]{1,2}\Z|\A[0-9]{4,6}\Z"),
    form=st.sampled_from(["{}", "{}s", "{}h", "{} min", "1h{}m", "2d {}h", "{}ms"]),
)
@example(whole=1, fraction="5", form="{}h")
@example(whole=0, fraction="25", form="{}s")
def test_a_duration_of_the_plan_takes_a_decimal_comma_as_its_point(
    whole: int, fraction: str, form: str
) -> None:
    """`--notice-lead 1,5h` was 'not a duration' where `--tax 3,5%` and `--spot-price 2,50`
    were read: every number of the plan takes the decimal comma, its durations too."""

    def read(text: str) -> float | str:
        try:
            return plan_cli._duration(text)
        except argparse.ArgumentTypeError as error:
            return type(error).__name__

    pointed = read(form.format(f"{whole}.{fraction}"))
    assert read(form.format(f"{whole},{fraction}")) == pointed


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("1,500s", "'1,500' is 1500 with a thousands comma or 1.500 with a decimal one"),
        ("1,5,5h", "write a number with one decimal mark"),
        ("1.5,5h", "write a number with one decimal mark"),
    ],
)
def test_a_duration_whose_comma_may_be_either_is_refused_naming_it(written: str, said: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        plan_cli._duration(written)
    assert repr(written) in str(refused.value) and said in str(refused.value)


def test_the_command_takes_a_lead_of_1_5_hours_written_with_a_comma(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--checkpoint", "0,5m", "--interruptions-per-day", "1", "--json"]
    assert plan_cli.main([*argv, "--notice-lead", "1,5h"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["inputs"]["notice_lead_seconds"]["value"] == 5400.0
    assert plan["inputs"]["checkpoint_seconds"]["value"] == 30.0


@given(st.text(alphabet="0123456789.,smhd +-", max_size=40))
@example("1,5x")
@example("1h, 30m")
def test_a_plan_duration_with_a_comma_is_seconds_or_refused_as_written(text: str) -> None:
    """Any text: seconds, or a refusal that names the text as it was written (never the
    text with its comma turned into a point)."""
    try:
        seconds = plan_cli._duration(text)
    except argparse.ArgumentTypeError as error:
        assert repr(text) in str(error), (text, str(error))
    else:
        assert seconds >= 0


def test_a_comma_between_the_parts_of_a_duration_is_no_decimal_mark() -> None:
    """`--mtbi 1h,30m` was read as 1h.30m, an hour and 18 seconds (3618 s): a comma after a
    unit separates parts, and the plan refuses it as the agent does; after a digit it is the
    decimal mark (`1h2,5m`)."""
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        plan_cli._duration("1h,30m")
    assert "'1h,30m'" in str(refused.value)
    assert plan_cli._duration("1h2,5m") == 3750.0
    assert plan_cli._duration("1h 2,5m") == 3750.0


@given(st.text(alphabet="0123456789.,smhd ", max_size=30))
@example("1h,30m")
@example("1h2,5m")
def test_a_plan_duration_s_comma_is_a_point_only_where_a_number_has_it(text: str) -> None:
    """What the plan reads with a comma is what the agent reads with the comma as a point; a
    comma right after a unit is refused, not read."""
    from forewarn.protocol.timefmt import parse_duration

    try:
        seconds = plan_cli._duration(text)
    except argparse.ArgumentTypeError:
        return
    assert not re.search(r"[a-z],", text), (text, seconds)
    assert seconds == parse_duration(text.replace(",", "."))
