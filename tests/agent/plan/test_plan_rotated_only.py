"""A state directory whose telemetry has just been rotated (or whose live file could not be
created again after the rotation: a full disk, a read-only remount) holds `telemetry.jsonl.1`
and no `telemetry.jsonl`. `forewarn plan` said there was no telemetry, and the measured
flushes and notices in the rotated files were not read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from forewarn.agent.plan import cli as plan_cli

RECORDS = [
    {"v": 1, "at": "2026-12-01T00:00:00Z", "kind": "start", "providers": ["local"], "pid": 1},
    {
        "v": 1,
        "at": "2026-12-01T01:00:00Z",
        "kind": "ack",
        "notice_id": None,
        "client": "job",
        "step": 1,
        "flush_seconds": 42.0,
        "outcome": "saved",
    },
]


def _rotated_only(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(record) + "\n" for record in RECORDS)
    (directory / "telemetry.jsonl.1").write_text(text)


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert plan_cli.main([*argv, "--mtbi", "6h", "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


@pytest.fixture(autouse=True)
def _no_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FOREWARN_CONFIG", raising=False)


def test_the_default_state_directory_with_only_a_rotated_file_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _rotated_only(tmp_path)
    monkeypatch.setenv("FOREWARN_STATE_DIR", str(tmp_path))
    plan = _plan(capsys)
    assert plan["inputs"]["checkpoint_seconds"] == {"value": 42.0, "source": "telemetry"}


def test_a_directory_given_with_only_rotated_files_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FOREWARN_STATE_DIR", str(tmp_path / "elsewhere"))
    _rotated_only(tmp_path / "machine-1")
    _rotated_only(tmp_path / "machine-2")
    plan = _plan(capsys, "--telemetry", str(tmp_path))
    assert plan["telemetry"]["flushes"] == 2, plan["telemetry"]
    assert plan["telemetry"]["files"] == [
        str(tmp_path / "machine-1" / "telemetry.jsonl"),
        str(tmp_path / "machine-2" / "telemetry.jsonl"),
    ]


def test_the_live_files_path_given_with_only_rotated_files_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FOREWARN_STATE_DIR", str(tmp_path / "elsewhere"))
    _rotated_only(tmp_path)
    plan = _plan(capsys, "--telemetry", str(tmp_path / "telemetry.jsonl"))
    assert plan["inputs"]["checkpoint_seconds"]["value"] == 42.0


def test_a_directory_with_live_and_rotated_files_counts_each_machine_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FOREWARN_STATE_DIR", str(tmp_path / "elsewhere"))
    _rotated_only(tmp_path)
    (tmp_path / "telemetry.jsonl").write_text(json.dumps(RECORDS[1]) + "\n")
    plan = _plan(capsys, "--telemetry", str(tmp_path))
    assert plan["telemetry"]["flushes"] == 2
    assert plan["telemetry"]["files"] == [str(tmp_path / "telemetry.jsonl")]
