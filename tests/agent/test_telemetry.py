"""Telemetry: the observer's JSON lines, rotation, whole lines under concurrent writers, and
the file a real agent writes."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from forewarn.agent.config import Settings
from forewarn.agent.observers import build_observers
from forewarn.agent.protocol import AckRequest, Notice
from forewarn.agent.telemetry import (
    FILE_NAME,
    TelemetryFormatError,
    TelemetryObserver,
    TelemetryWriter,
    read_records,
    rotated_paths,
)
from hypothesis import given
from hypothesis import strategies as st
from support import AgentProcess, Subscriber, eventually, run_forewarn

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py); tests/agent/test_agent.py starts them fresh.
pytestmark = pytest.mark.usefixtures("forked_agents")

NOW = datetime(2026, 11, 30, 3, 10, tzinfo=timezone.utc)


def notice(action: str = "terminate", deadline: datetime | None = None) -> Notice:
    return Notice(
        id="aws/spot-itn/1f3c9a",
        seq=17,
        action=action,  # type: ignore[arg-type]
        reason="spot-interruption",
        provider="aws",
        deadline=deadline,
        noticed_at=NOW,
        sent_at=NOW,
        detail={"action": "terminate"},
    )


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_event_is_one_json_line_with_its_fields(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    observer = TelemetryObserver(TelemetryWriter(path, max_bytes=1 << 20))
    observer.on_start(["aws"])
    observer.on_notice(notice("drain", NOW + timedelta(minutes=2)), escalated=False)
    observer.on_notice(notice("terminate", NOW + timedelta(minutes=2)), escalated=True)
    observer.on_ack(
        AckRequest(
            op="ack", notice_id="aws/spot-itn/1f3c9a", client="c1", step=1200, flush_seconds=9.5
        ),
        None,
    )
    observer.on_ack(
        AckRequest(
            op="ack", client="c2", step=1200, outcome="resumed", restore_seconds=42.0, steps_lost=0
        ),
        None,
    )
    observer.on_stop()
    records = lines(path)
    assert [r["kind"] for r in records] == [
        "start",
        "notice",
        "escalation",
        "ack",
        "resume",
        "stop",
    ]
    assert all(r["v"] == 1 and str(r["at"]).endswith("Z") for r in records)
    assert records[0]["providers"] == ["aws"]
    assert records[1] | {"at": None} == {
        "v": 1,
        "at": None,
        "kind": "notice",
        "id": "aws/spot-itn/1f3c9a",
        "seq": 17,
        "action": "drain",
        "reason": "spot-interruption",
        "provider": "aws",
        "deadline": "2026-11-30T03:12:00Z",
        "noticed_at": "2026-11-30T03:10:00Z",
        "sent_at": "2026-11-30T03:10:00Z",
        "clients": 0,
    }
    assert records[2]["action"] == "terminate"
    assert records[3] | {"at": None} == {
        "v": 1,
        "at": None,
        "kind": "ack",
        "notice_id": "aws/spot-itn/1f3c9a",
        "client": "c1",
        "step": 1200,
        "flush_seconds": 9.5,
        "outcome": "saved",
    }
    assert records[4] | {"at": None} == {
        "v": 1,
        "at": None,
        "kind": "resume",
        "notice_id": None,
        "client": "c2",
        "step": 1200,
        "restore_seconds": 42.0,
        "steps_lost": 0,
    }


def test_rotation_keeps_three_older_files_each_within_the_limit(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    writer = TelemetryWriter(path, max_bytes=4096)
    for index in range(400):
        writer.write("ack", {"step": index, "pad": "x" * 60})
    files = rotated_paths(path)
    assert all(file.is_file() for file in files), files
    assert not path.with_name(f"{FILE_NAME}.4").exists()
    assert all(file.stat().st_size <= 4096 for file in files)
    steps = [record["step"] for record in read_records(path)]
    # Oldest first, no gaps, ending with the newest record.
    assert steps == list(range(steps[0], 400)) and steps[0] > 0
    assert lines(path)[-1]["step"] == 399


def test_concurrent_writers_never_tear_a_line(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from forewarn.agent.telemetry import TelemetryWriter\n"
        "w = TelemetryWriter(Path(sys.argv[1]), max_bytes=1 << 30)\n"
        "for i in range(300):\n"
        "    w.write('ack', {'writer': sys.argv[2], 'step': i, 'pad': 'y' * 3000})\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path), str(n)]) for n in range(4)]
    assert [proc.wait(60) for proc in procs] == [0, 0, 0, 0]
    records = lines(path)  # json.loads fails on any torn or interleaved line
    assert len(records) == 1200
    for n in range(4):
        assert [r["step"] for r in records if r["writer"] == str(n)] == list(range(300))


def test_an_unwritable_state_directory_costs_telemetry_not_the_agent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    writer = TelemetryWriter(blocker / FILE_NAME, max_bytes=1 << 20)
    writer.write("start", {})
    writer.write("stop", {})
    assert sum("telemetry: cannot write" in r.message for r in caplog.records) == 1


def test_reading_skips_an_unfinished_last_line_and_names_a_bad_one(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    good = json.dumps({"v": 1, "at": "2026-11-30T03:10:00Z", "kind": "start"})
    path.write_text(good + "\n" + '{"v": 1, "at": "2026')
    assert [r["kind"] for r in read_records(path)] == ["start"]
    path.write_text(good + "\nnot json\n" + good + "\n")
    with pytest.raises(TelemetryFormatError, match=f"{FILE_NAME}:2"):
        list(read_records(path))


def test_a_write_cut_short_costs_its_own_line_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The disk fills mid-line (or the agent is killed mid-write): half the line is written.
    # The next record was appended to that half, and `plan` refused the whole file at
    # "telemetry.jsonl:2: not a JSON line".
    from forewarn.agent import telemetry
    from forewarn.agent.plan.cli import main as plan_main

    writer = TelemetryWriter(tmp_path / FILE_NAME, max_bytes=1 << 20)
    writer.write("start", {"pid": 1})
    real_write = os.write
    with monkeypatch.context() as patch:
        patch.setattr(telemetry.os, "write", lambda fd, data: real_write(fd, data[:40]))
        writer.write("ack", {"flush_seconds": 2.0, "outcome": "saved"})
    writer.write("ack", {"notice_id": None, "flush_seconds": 3.0, "outcome": "saved"})
    writer.write("stop", {"pid": 1})
    skipped: list[str] = []
    records = list(read_records(writer.path, skipped=skipped))
    assert [r["kind"] for r in records] == ["start", "ack", "stop"]
    assert records[1]["flush_seconds"] == 3.0
    assert skipped == [f"{writer.path}:2: an unfinished line (a write cut short) was skipped"]
    # The plan goes on, and says what it left out.
    assert plan_main(["--telemetry", str(writer.path), "--tax", "3%", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["inputs"]["checkpoint_seconds"] == {"value": 3.0, "source": "telemetry"}
    assert f"telemetry {skipped[0]}" in plan["warnings"]


def test_the_zeros_a_crash_leaves_cost_their_own_line_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A machine lost mid-append (a reclaim, a power cut) can leave the file's new size on
    # disk without its data: the tail reads as NUL bytes (XFS, ext4 with delayed allocation).
    # The next agent appends after them on a fresh line, and `plan` refused the whole file
    # at "telemetry.jsonl:2: not a JSON line".
    from forewarn.agent.plan.cli import main as plan_main

    writer = TelemetryWriter(tmp_path / FILE_NAME, max_bytes=1 << 20)
    writer.write("start", {"pid": 1})
    with writer.path.open("ab") as handle:
        handle.write(b"\0" * 300)
    writer.write("start", {"pid": 2})
    writer.write("ack", {"notice_id": None, "flush_seconds": 3.0, "outcome": "saved"})
    skipped: list[str] = []
    records = list(read_records(writer.path, skipped=skipped))
    assert [r["kind"] for r in records] == ["start", "start", "ack"]
    assert skipped == [f"{writer.path}:2: an unfinished line (a write cut short) was skipped"]
    assert plan_main(["--telemetry", str(writer.path), "--tax", "3%", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["inputs"]["checkpoint_seconds"] == {"value": 3.0, "source": "telemetry"}
    assert f"telemetry {skipped[0]}" in plan["warnings"]


def test_plan_reads_a_telemetry_file_in_less_memory_than_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The whole file was read, split, and every record kept before it was summed up: a
    # 40 MiB file (the four rotated files' default limit) took 400 MB of memory.
    import tracemalloc

    from forewarn.agent.plan import cli as plan_cli

    path = tmp_path / FILE_NAME
    ack = json.dumps(
        {"v": 1, "at": "2026-11-30T01:00:00Z", "kind": "ack", "client": "vm/1/abc", "step": 7}
        | {"notice_id": None, "flush_seconds": 2.5, "outcome": "saved"},
        separators=(",", ":"),
    )
    path.write_text((ack + "\n") * ((4 << 20) // (len(ack) + 1)))
    args = argparse.Namespace(telemetry=[path])
    tracemalloc.start()
    try:
        _, summary = plan_cli._load_telemetry(args, [])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert summary is not None and summary.flushes == (4 << 20) // (len(ack) + 1)
    assert peak < path.stat().st_size, f"peak {peak} bytes for a {path.stat().st_size} file"


def test_infinity_in_telemetry_is_named_and_never_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Python's json reads Infinity; `plan` then blamed a --checkpoint flag nobody gave.
    from forewarn.agent.plan.cli import main as plan_main

    path = tmp_path / FILE_NAME
    start = json.dumps({"v": 1, "at": "2026-11-30T00:00:00Z", "kind": "start"})
    ack = '{"v":1,"at":"2026-11-30T01:00:00Z","kind":"ack","flush_seconds":Infinity,'
    path.write_text(start + "\n" + ack + '"outcome":"saved"}\n' + start + "\n")
    with pytest.raises(TelemetryFormatError, match=f"{FILE_NAME}:2: Infinity is not a finite"):
        list(read_records(path))
    assert plan_main(["--telemetry", str(path)]) == 2
    err = capsys.readouterr().err
    assert "--telemetry" in err and "Infinity is not a finite number" in err
    assert "--checkpoint" not in err

    # The writer records a non-finite figure as unknown, so it never writes such a line.
    written = tmp_path / "written" / FILE_NAME
    TelemetryWriter(written, max_bytes=1 << 20).write(
        "ack", {"flush_seconds": float("inf"), "step": 3, "restore_seconds": float("nan")}
    )
    (record,) = list(read_records(written))
    assert record["flush_seconds"] is None and record["restore_seconds"] is None
    assert record["step"] == 3


HUGE_INTEGER = "1" + "0" * 400


@pytest.mark.parametrize(
    ("figure", "named"),
    [
        ("-5", "flush_seconds is not a number zero or more (got -5)"),
        ("1e400", "flush_seconds is not a number zero or more"),
        (HUGE_INTEGER, "flush_seconds is not a number zero or more (got 1000"),
        ('"nan"', 'flush_seconds is not a number zero or more (got "nan")'),
        ('"30s"', 'flush_seconds is not a number zero or more (got "30s")'),
        ("true", "flush_seconds is not a number zero or more (got true)"),
        ("[1]", "flush_seconds is not a number zero or more (got [1])"),
        ("{}", "flush_seconds is not a number zero or more (got {})"),
    ],
)
def test_a_figure_that_is_not_seconds_is_named_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], figure: str, named: str
) -> None:
    # Read as they stood, these crashed `plan` (TypeError, OverflowError), were blamed on a
    # --checkpoint flag nobody gave, or (true) were taken for a 1 s flush.
    from forewarn.agent.plan.cli import main as plan_main

    path = tmp_path / FILE_NAME
    good = '{"v":1,"at":"2026-11-30T01:00:00Z","kind":"ack","flush_seconds":2,"outcome":"saved"}'
    bad = good.replace('"flush_seconds":2', f'"flush_seconds":{figure}')
    path.write_text(good + "\n" + bad + "\n" + good + "\n")
    with pytest.raises(TelemetryFormatError, match=f"{FILE_NAME}:2: "):
        list(read_records(path))
    assert plan_main(["--telemetry", str(path), "--tax", "3%"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"forewarn: plan: --telemetry: {path}:2: {named}")
    assert "--checkpoint" not in err


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ('"kind":"resume","restore_seconds":-3', "restore_seconds is not a number zero or more"),
        ('"kind":"resume","steps_lost":-1', "steps_lost is not a number zero or more"),
        ('"kind":"ack","stall_seconds":"1.5h"', "stall_seconds is not a number zero or more"),
        ('"kind":"notice","action":"terminate","sent_at":"bad"', "sent_at is not an RFC 3339"),
        ('"kind":"notice","action":"terminate","deadline":7', "deadline is not an RFC 3339"),
    ],
)
def test_a_bad_time_or_figure_of_any_kind_is_named(tmp_path: Path, fields: str, named: str) -> None:
    path = tmp_path / FILE_NAME
    path.write_text('{"v":1,"at":"2026-11-30T01:00:00Z",' + fields + "}\n")
    with pytest.raises(TelemetryFormatError, match=f"{FILE_NAME}:1: {named}"):
        list(read_records(path))
    path.write_text('{"v":1,"at":"yesterday","kind":"start"}\n')
    with pytest.raises(TelemetryFormatError, match="1: at is not an RFC 3339 time"):
        list(read_records(path))


_TIME = st.sampled_from(
    ["2026-11-30T01:00:00Z", "2026-11-30T01:00:30.5Z", "2026-11-30T01:02:03.5+02:00"]
)
_ANY_VALUE = st.one_of(
    _TIME,
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**400),
    st.floats(),  # NaN and the infinities too
    st.floats(min_value=0, max_value=1e6),
    st.text(max_size=12),
    st.sampled_from(["30s", "1.5h", "$2.10", "2,10", "nan", "Infinity"]),
    st.lists(st.integers(), max_size=2),
)
_SECONDS = st.one_of(st.none(), st.floats(min_value=0, max_value=1e6), st.integers(0, 10**6))
_TIMES = ("at", "sent_at", "noticed_at", "deadline")
_FIGURES = ("flush_seconds", "stall_seconds", "durable_seconds", "restore_seconds", "steps_lost")
_RECORD = st.fixed_dictionaries(
    {
        "v": st.just(1),
        "at": _TIME,
        "kind": st.sampled_from(["start", "notice", "escalation", "ack", "resume", "stop"]),
        "action": st.sampled_from(["terminate", "drain"]),
        "outcome": st.sampled_from(["saved", "failed"]),
        "id": st.sampled_from(["a", "b"]),
        "notice_id": st.sampled_from([None, "a", "b"]),
    },
    optional={
        **{name: _TIME for name in _TIMES[1:]},
        **{name: _SECONDS for name in _FIGURES},
    },
)


@given(
    st.lists(_RECORD, min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(0, 5), st.sampled_from(_TIMES + _FIGURES), _ANY_VALUE)),
    st.lists(st.tuples(st.integers(0, 6), st.binary(max_size=40)), max_size=2),
)
def test_any_line_is_read_as_a_sound_record_or_named(
    records: list[dict[str, Any]],
    spoiled: list[tuple[int, str, Any]],
    raw_lines: list[tuple[int, bytes]],
) -> None:
    from forewarn.agent.plan.telemetry import summarize_telemetry

    for index, name, value in spoiled:
        records[index % len(records)][name] = value
    lines_in = [json.dumps(record).encode() for record in records]
    for index, raw in raw_lines:
        lines_in.insert(index, raw)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / FILE_NAME
        path.write_bytes(b"\n".join(lines_in))
        try:
            read = list(read_records(path))
        except TelemetryFormatError as error:
            assert f"{FILE_NAME}:" in str(error)
            return
    for record in read:
        for name in ("flush_seconds", "stall_seconds", "durable_seconds", "restore_seconds"):
            value = record.get(name)
            assert value is None or (math.isfinite(value) and value >= 0)
    summary = summarize_telemetry(read)
    for figure in (
        summary.flush_seconds,
        summary.flush_p95_seconds,
        summary.restore_seconds,
        summary.notice_lead_seconds,
        summary.response_seconds,
        summary.mtbi_seconds,
    ):
        assert figure is None or (math.isfinite(figure) and figure >= 0)


def test_build_observers_follows_the_telemetry_key(tmp_path: Path) -> None:
    on = build_observers(Settings(state_dir=tmp_path))
    assert any(isinstance(o, TelemetryObserver) for o in on)
    off = build_observers(Settings(state_dir=tmp_path, telemetry=False))
    assert not any(isinstance(o, TelemetryObserver) for o in off)
    writer = next(o for o in on if isinstance(o, TelemetryObserver)).writer
    assert writer.path == tmp_path / FILE_NAME


def test_a_real_agent_writes_notices_escalations_acks_and_resumes(
    tmp_path: Path, env: dict[str, str]
) -> None:
    env["FOREWARN_EXIT_MARGIN"] = "0"
    with AgentProcess(tmp_path, env=env) as agent:
        deadline = (datetime.now(timezone.utc) + timedelta(seconds=1)).strftime(
            "%Y-%m-%dT%H:%M:%S.%fZ"
        )
        raised = agent.control({"op": "notify", "action": "drain", "deadline": deadline})
        notice_id = raised["notice"]["id"]
        with agent.subscriber() as sub:
            sub.notice()  # the replayed drain
            escalated = sub.notice(timeout=5)
        assert escalated["action"] == "terminate"
        assert agent.control(
            {"op": "ack", "notice_id": notice_id, "client": "t", "step": 7, "flush_seconds": 0.25}
        )["ok"]
        assert agent.control(
            {
                "op": "ack",
                "client": "t",
                "step": 7,
                "outcome": "resumed",
                "restore_seconds": 1.5,
                "steps_lost": 0,
            }
        )["ok"]
    records = list(read_records(Path(env["FOREWARN_STATE_DIR"]) / FILE_NAME))
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "start" and kinds[-1] == "stop", kinds
    assert [k for k in kinds if k in ("notice", "escalation", "ack", "resume")] == [
        "notice",
        "escalation",
        "ack",
        "resume",
    ]
    by_kind = {r["kind"]: r for r in records}
    assert by_kind["escalation"]["id"] == notice_id
    assert by_kind["ack"]["flush_seconds"] == 0.25 and by_kind["ack"]["step"] == 7
    assert by_kind["resume"]["restore_seconds"] == 1.5


def test_background_save_acks_reach_telemetry_and_plan_by_the_same_names(
    tmp_path: Path, env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """End to end (issue 20): the client's ack fields for a background save, the agent's
    telemetry line and `forewarn plan` use the same names, and the plan takes the stall as the
    tax and the durable time as what a notice must cover."""
    from forewarn.agent.plan import cli as plan_cli
    from forewarn.clients import Notices

    with AgentProcess(tmp_path, env=env) as agent:
        deadline = (datetime.now(timezone.utc) + timedelta(minutes=10)).strftime(
            "%Y-%m-%dT%H:%M:%S.%fZ"
        )
        raised = agent.control({"op": "notify", "action": "terminate", "deadline": deadline})
        notice_id = raised["notice"]["id"]
        with Notices(agent.events, agent.control_endpoint) as notices:
            eventually(lambda: notices.alive, what="the agent's first heartbeat")
            for step in (10, 20, 30):  # periodic background saves: 0.5 s stall, 8 s durable
                assert notices.ack(
                    None,
                    step=step,
                    flush_seconds=8.0,
                    stall_seconds=0.5,
                    durable_seconds=8.0,
                    wait=True,
                    timeout=5,
                )
            assert notices.ack(
                notice_id,
                step=31,
                flush_seconds=9.0,
                stall_seconds=9.0,
                durable_seconds=9.0,
                choice="waited",
                note="step 30 needed about 2.0 s more",
                wait=True,
                timeout=5,
            )
        # Out of range is refused by name, as every control field.
        refused = agent.control({"op": "ack", "stall_seconds": -1})
        assert not refused["ok"] and "stall_seconds" in refused["error"]
    path = Path(env["FOREWARN_STATE_DIR"]) / FILE_NAME
    acks = [r for r in read_records(path) if r["kind"] == "ack"]
    assert [(a["stall_seconds"], a["durable_seconds"]) for a in acks] == [(0.5, 8.0)] * 3 + [
        (9.0, 9.0)
    ]
    assert acks[-1]["choice"] == "waited" and acks[-1]["note"].startswith("step 30")
    assert plan_cli.main(["--telemetry", str(path), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["telemetry"]["flush_source"] == "stall_seconds"
    assert plan["telemetry"]["coverage_source"] == "durable_seconds"
    assert plan["telemetry"]["flush_median_seconds"] == pytest.approx(0.5)
    assert plan["telemetry"]["flush_p95_seconds"] >= 8.0


def test_a_notice_records_how_many_acking_clients_it_reached(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A terminate published while no job was subscribed (a machine between jobs) left no
    trace of that, and `forewarn plan` counted it as a notice come too late to save on."""
    with AgentProcess(tmp_path, env=env) as agent:
        alone = agent.control({"op": "notify", "action": "terminate"})["notice"]["id"]
        with Subscriber(agent.events, ("notice", "client/job-1")).ready():
            eventually(lambda: agent.control({"op": "status"})["agent"]["subscribers"] == 1)
            watched = agent.control({"op": "notify", "action": "terminate"})["notice"]["id"]
    records = list(read_records(Path(env["FOREWARN_STATE_DIR"]) / FILE_NAME))
    reached = {r["id"]: r.get("clients") for r in records if r["kind"] == "notice"}
    assert reached == {alone: 0, watched: 1}


def test_telemetry_that_cannot_be_written_is_a_condition_in_status_until_it_can(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A full disk or a broken file cost every record after one WARNING: `forewarn status`
    said nothing, and `forewarn plan` later read a span with notices and acks missing."""
    state = Path(env["FOREWARN_STATE_DIR"])
    (state / FILE_NAME).mkdir()  # not a file: every write fails
    with AgentProcess(tmp_path, env=env) as agent:
        conditions = agent.control({"op": "status"})["agent"]["conditions"]
        assert "cannot write" in conditions.get("telemetry", ""), conditions
        shown = run_forewarn("status", env=env)
        assert "condition  agent: telemetry: cannot write" in shown.stdout
        (state / FILE_NAME).rmdir()
        agent.control({"op": "notify", "action": "drain"})
        assert "telemetry" not in agent.control({"op": "status"})["agent"]["conditions"]
    assert any(record["kind"] == "notice" for record in read_records(state / FILE_NAME))
