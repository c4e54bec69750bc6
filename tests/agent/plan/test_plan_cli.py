"""`forewarn plan`: flags, telemetry (a real drill's), the table, --json, --plot, exit 2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from forewarn.agent.plan import cli as plan_cli
from support import forewarn_cmd, run_forewarn

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
    cost = plan["overhead"]
    assert cost["model"] == "drain"
    assert cost["per_interruption_seconds"] == pytest.approx(360)  # 350 s + the 10 s flush
    assert round(cost["restart"] * 100, 1) == 0.4
    assert cost["checkpoint_tax"] == pytest.approx(0.03)
    assert plan["lost_work"] == {
        "periodic_seconds": pytest.approx(171.67, abs=0.01),
        "drain_seconds": 0.0,
        "applies": "drain",
        "why": "notice lead 120 s covers the 15 s from notice to saved checkpoint",
    }
    assert plan["verdict"] == "spot"
    assert plan["costs"]["spot"]["per_useful_hour"] < plan["costs"]["on-demand"]["per_useful_hour"]
    assert plan["inputs"]["checkpoint_seconds"] == {"value": 10.0, "source": "flag"}


def test_the_table_shows_the_numbers_and_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_cli.main([*FIGURES, *PRICES, "--reserved-price", "2.5"]) == 0
    out = capsys.readouterr().out
    assert "for the target tax       333 s (5.56 min)  1,167 steps" in out
    assert "with forewarn drain                     0 s  <- applies" in out
    assert "restart and reload    0.42 %" in out
    assert "Verdict: spot:" in out and "reserved" in out
    assert "wall-clock hours per useful hour" in out


def test_without_prices_the_plan_says_how_to_get_a_verdict(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert plan_cli.main(["--checkpoint", "10s", "--mtbi", "12h"]) == 0
    out = capsys.readouterr().out
    assert "give --spot-price and --on-demand-price" in out
    assert "periodic checkpoints only" in out and "<- applies" in out


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--checkpoint=-10s", "--mtbi", "1d"], "--checkpoint"),
        (["--checkpoint", "-10s", "--mtbi", "1d"], "must not be negative"),
        (["--checkpoint", "10s", "--mtbi", "1d", "--tax", "-3%"], "--tax"),
        (["--checkpoint", "10s", "--mtbi", "1d", "--restore=-1m"], "--restore"),
        (["--checkpoint", "10s", "--interruptions-per-day", "0"], "--interruptions-per-day"),
        (["--checkpoint", "10s", "--mtbi", "0s"], "--mtbi"),
        (["--checkpoint", "10s", "--mtbi", "1d", "--spot-price", "1"], "--on-demand-price"),
        (["--checkpoint", "10s", "--mtbi", "1d", "--on-demand-price", "3"], "--spot-price"),
        (
            ["--checkpoint", "10s", "--mtbi", "1d", *PRICES, "--storage-price", "0.02"],
            "--checkpoint-gb",
        ),
        (
            ["--checkpoint", "10s", "--mtbi", "1d", "--spot-price=-1", "--on-demand-price", "3"],
            "--spot-price",
        ),
        (["--checkpoint", "10s", "--mtbi", "1d", "--tax", "150%"], "--tax"),
        (["--checkpoint", "10s", "--mtbi", "1d", "--interval-steps", "100"], "--interval-steps"),
        (["--checkpoint", "ten", "--mtbi", "1d"], "--checkpoint"),
        (["--mtbi", "1d"], "--checkpoint"),
        (["--checkpoint", "10s"], "--interruptions-per-day"),
        (["--telemetry", "/nonexistent/telemetry.jsonl"], "--telemetry"),
    ],
)
def test_bad_input_exits_2_naming_the_field(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    assert named in fails(capsys, *argv)


def test_a_corrupt_telemetry_line_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "telemetry.jsonl"
    path.write_text('{"v":1,"at":"2026-11-30T00:00:00Z","kind":"start"}\nnot json\n{}\n')
    err = fails(capsys, "--telemetry", str(path))
    assert "--telemetry" in err and "telemetry.jsonl:2" in err


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
    assert plan["lost_work"]["applies"] == "drain"
    assert plan["intervals"]["seconds"]["daly"] > 0
    assert plan["verdict"] in ("spot", "on-demand")
    table = run_forewarn("plan", "--telemetry", str(work), env=env)
    assert table.returncode == 0, table.stderr
    assert "terminate notices: 1; flushes: " in table.stdout
    assert "a drill's rate, not the capacity's" in table.stdout
    assert any("--interruptions-per-day" in note for note in plan["notes"])


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
    assert measured["lost_work"]["applies"] == "drain"
    assert measured["inputs"]["mtbi_seconds"]["value"] == 6 * 3600 + 2
    # A 60 s checkpoint given by flag: the 2 s the telemetry saw says nothing about it.
    given = plan_json(capsys, "--telemetry", str(path), "--checkpoint", "60s")
    assert given["inputs"]["response_seconds"]["value"] is None
    assert given["lost_work"]["applies"] == "periodic"
