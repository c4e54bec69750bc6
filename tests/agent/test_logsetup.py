"""`--log-format json`: one JSON object a line, with the fields machines need."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
from forewarn.agent.logsetup import JsonFormatter
from support import AgentProcess, agent_env

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")


def record(**extra: object) -> logging.LogRecord:
    return logging.makeLogRecord(
        {"name": "forewarn.test", "levelname": "WARNING", "msg": "poll %s", "args": ("failed",)}
        | extra
    )


def test_json_line_has_ts_level_logger_msg_and_extra_fields():
    line = JsonFormatter().format(record(provider="aws", attempt=3))
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "warning" and entry["logger"] == "forewarn.test"
    assert entry["msg"] == "poll failed"
    assert entry["ts"].endswith("Z")
    assert entry["provider"] == "aws" and entry["attempt"] == 3


def test_exceptions_stay_on_the_line():
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        line = JsonFormatter().format(record(exc_info=sys.exc_info()))
    assert "\n" not in line
    assert "RuntimeError: boom" in json.loads(line)["exc"]


def test_secret_looking_extra_fields_are_redacted():
    entry = json.loads(
        JsonFormatter().format(record(token="abc", Authorization="Bearer x", api_key="k", n=1))
    )
    assert entry["token"] == entry["Authorization"] == entry["api_key"] == "[redacted]"
    assert entry["n"] == 1


def test_agent_logs_json_lines(tmp_path: Path):
    env = agent_env(tmp_path, FOREWARN_LOG_FORMAT="json")
    with AgentProcess(tmp_path, providers=("local",), env=env) as agent:
        agent.control({"op": "notify", "action": "drain"})
    lines = agent.output().splitlines()
    entries = [json.loads(line) for line in lines]  # every line is one JSON object
    assert {"ts", "level", "logger", "msg"} <= set(entries[0])
    assert any(entry["msg"].startswith("notice drain") for entry in entries)


def test_json_logs_carry_notice_fields_one_line_per_step(tmp_path: Path) -> None:
    """Issue 18: the notice's id, action and deadline are JSON fields, one line per step."""
    import json as _json

    from forewarn.protocol.timefmt import format_time, parse_deadline
    from support import AgentProcess, agent_env, eventually

    env = agent_env(tmp_path, FOREWARN_LOG_FORMAT="json")
    with AgentProcess(tmp_path, env=env) as agent:
        reply = agent.control(
            {"op": "notify", "action": "drain", "deadline": format_time(parse_deadline("1h"))}
        )
        notice_id = reply["notice"]["id"]
        agent.control({"op": "clear", "id": notice_id})

        def steps() -> list[dict[str, object]] | None:
            lines = [
                _json.loads(line) for line in agent.output().splitlines() if line.startswith("{")
            ]
            found = [line for line in lines if line.get("notice_id") == notice_id]
            return found if len(found) >= 3 else None

        found = eventually(steps, what="the seen, published and cleared lines")
    by_step = {line["lifecycle"]: line for line in found}
    published, cleared = by_step["published"], by_step["cleared"]
    assert published["lifecycle"] == "published" and published["action"] == "drain"
    assert published["deadline"] and published["provider"] == "local"
    assert cleared["lifecycle"] == "cleared" and cleared["action"] == "clear"


def test_json_logs_have_every_lifecycle_step(tmp_path: Path) -> None:
    """Issue 18: seen, published, acked by N clients, escalated, expired and cleared are each
    one JSON line carrying the notice's fields."""
    import json as _json

    from forewarn.protocol.timefmt import format_time, parse_deadline
    from support import AgentProcess, Subscriber, agent_env, eventually

    env = agent_env(
        tmp_path,
        FOREWARN_LOG_FORMAT="json",
        FOREWARN_EXIT_MARGIN="1s",
        FOREWARN_NOTICE_GRACE="1s",
    )
    with (
        AgentProcess(tmp_path, env=env) as agent,
        Subscriber(agent.events, ("notice", "client/log-test")).ready() as client,
    ):
        reply = agent.control(
            {"op": "notify", "action": "drain", "deadline": format_time(parse_deadline("3s"))}
        )
        notice_id = reply["notice"]["id"]
        assert client.notice()["id"] == notice_id
        ack = {"op": "ack", "notice_id": notice_id, "client": "log-test", "flush_seconds": 0.1}
        assert agent.control(ack)["ok"]
        # The drain's ack is not the terminate's: a client acks the escalated notice again
        # (its exit save), else the terminate's deadline passes `unacked` (a WARNING).
        assert client.notice(timeout=10)["action"] == "terminate"
        assert agent.control(ack)["ok"]

        def steps() -> dict[str, dict[str, object]] | None:
            lines = [
                _json.loads(line) for line in agent.output().splitlines() if line.startswith("{")
            ]
            found = {
                str(line["lifecycle"]): line for line in lines if line.get("notice_id") == notice_id
            }
            return found if {"expired", "cleared"} <= set(found) else None

        found = eventually(steps, what="the notice to expire")
    assert {"seen", "published", "acked", "escalated", "expired", "cleared"} <= set(found)
    assert found["seen"]["noticed_at"] and found["seen"]["action"] == "drain"
    assert found["acked"]["clients"] == 1
    assert found["escalated"]["action"] == "terminate"
    for step in ("seen", "published", "acked", "escalated", "expired", "cleared"):
        assert found[step]["provider"] == "local" and found[step]["reason"] == "manual"
    # The levels docs/operations.md gives: every step at info, an expiry at warning.
    levels = {step: line["level"] for step, line in found.items()}
    assert levels == {step: "warning" if step == "expired" else "info" for step in found}
    assert all(notice_id in str(line["msg"]) for line in found.values()), found


def test_an_ack_without_figures_logs_none_not_nones(tmp_path: Path) -> None:
    """A failed flush reports no flush_seconds, and a background save may report a stall
    without a durable time: the ack line read `flush=Nones` and `durable=Nones`."""
    from support import AgentProcess, agent_env, eventually

    with AgentProcess(tmp_path, env=agent_env(tmp_path)) as agent:
        failed = {"op": "ack", "client": "a", "step": 3, "outcome": "failed"}
        assert agent.control(failed)["ok"]
        stalled = {"op": "ack", "client": "b", "step": 4, "flush_seconds": 2, "stall_seconds": 1}
        assert agent.control(stalled)["ok"]

        def ack_lines() -> list[str] | None:
            found = [line for line in agent.output().splitlines() if " ack " in line]
            return found if len(found) == 2 else None

        lines = eventually(ack_lines, what="the two ack lines")
    assert "flush=none outcome=failed" in lines[0], lines
    assert "flush=2.0s" in lines[1] and "stall=1.0s durable=none" in lines[1], lines
    assert not any("None" in line for line in lines), lines


def test_text_log_times_are_utc_whatever_the_machines_zone(tmp_path: Path) -> None:
    """The text form stamped lines in the machine's local time, with no zone, beside
    deadlines in UTC on the same line and the UTC times of `status` and the JSON form: on a
    machine at +05:45 a notice logged at 03:10 UTC read 08:55."""
    from datetime import datetime, timezone

    env = agent_env(tmp_path, TZ="Asia/Kathmandu")
    with AgentProcess(tmp_path, providers=("local",), env=env) as agent:
        agent.control({"op": "notify", "action": "drain"})
    line = next(line for line in agent.output().splitlines() if " notice drain " in line)
    stamp = datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    assert abs((datetime.now(timezone.utc) - stamp).total_seconds()) < 120, line


def test_a_resume_is_logged_with_its_restore_time_and_steps_lost(tmp_path: Path) -> None:
    """A client's resume ack was logged as `ack (periodic) from c: step=3 flush=none
    outcome=resumed`: the steps lost and the restore time, what an operator reads a resume
    for, were in neither the text nor the JSON fields."""
    from support import eventually

    env = agent_env(tmp_path, FOREWARN_LOG_FORMAT="json")
    with AgentProcess(tmp_path, env=env) as agent:
        resumed = {
            "op": "ack",
            "client": "c",
            "step": 3,
            "outcome": "resumed",
            "restore_seconds": 1.5,
            "steps_lost": 2,
        }
        assert agent.control(resumed)["ok"]

        def resume_line() -> dict[str, object] | None:
            for line in agent.output().splitlines():
                entry = json.loads(line)
                if entry.get("lifecycle") == "ack":
                    return dict(entry)
            return None

        entry = eventually(resume_line, what="the resume's line")
    assert entry["restore_seconds"] == 1.5 and entry["steps_lost"] == 2, entry
    assert "restore=1.5s steps_lost=2" in str(entry["msg"]), entry
    assert "periodic" not in str(entry["msg"]) and "flush=" not in str(entry["msg"]), entry


def test_a_resume_without_its_figures_says_steps_lost_unknown_not_none(tmp_path: Path) -> None:
    """`guard.resumed(step)`, as the README's loop calls it, reports no steps lost: its line
    read `resume after (no notice) from trainer-a: step=0 restore=none steps_lost=None`, a
    Python `None` beside the log's own `none`, and `steps_lost=none` would read as none
    lost. Found walking a real agent with two torch jobs."""
    from support import eventually

    with AgentProcess(tmp_path, env=agent_env(tmp_path)) as agent:
        resumed = {"op": "ack", "client": "c", "step": 7, "outcome": "resumed"}
        assert agent.control(resumed)["ok"]

        def resume_line() -> str | None:
            found = [line for line in agent.output().splitlines() if "resume of" in line]
            return found[0] if found else None

        line = eventually(resume_line, what="the resume's line")
    assert "None" not in line, line
    assert "restore=none steps_lost=unknown" in line, line


def test_a_fresh_start_is_not_logged_as_a_resume_after_no_notice(tmp_path: Path) -> None:
    """The README's loop calls `guard.resumed(step)` at every start, a first one at step 0:
    the agent logged `resume after (no notice) from trainer-a: step=0 restore=none
    steps_lost=unknown`, which reads as a job stopped without notice that lost steps. The
    guard never names a notice there; a start at step 0 is a fresh run (or one that saved
    nothing), and a later step a resume. Found reading a real agent's log beside a new job."""
    from support import eventually

    with AgentProcess(tmp_path, env=agent_env(tmp_path)) as agent:
        for step in (0, 1200):
            resumed = {"op": "ack", "client": f"job-{step}", "step": step, "outcome": "resumed"}
            assert agent.control(resumed)["ok"]

        def lines() -> list[str] | None:
            found = [line for line in agent.output().splitlines() if "job-" in line]
            return found if len(found) == 2 else None

        fresh, resumed_line = eventually(lines, what="the two lines")
    assert "(no notice)" not in fresh + resumed_line, (fresh, resumed_line)
    assert "start of job-0 at step 0: nothing to resume (a fresh run, or one that" in fresh
    assert "steps_lost" not in fresh, fresh
    assert "resume of job-1200 at step 1200: restore=none steps_lost=unknown" in resumed_line


def test_json_log_fields_give_times_as_the_wire_does(tmp_path: Path) -> None:
    """The JSON lines' `deadline` and `noticed_at` fields were Python's isoformat,
    `2026-12-06T18:05:55.699277+00:00`, beside `ts` and the text's `...55.699Z` on the same
    line and the wire's and `status --json`'s `...55.699Z`: `jq 'select(.deadline == D)'`
    with the deadline `status` showed found nothing. Found reading a real agent's JSON log."""
    from forewarn.protocol.timefmt import format_time, parse_deadline
    from support import eventually

    env = agent_env(tmp_path, FOREWARN_LOG_FORMAT="json")
    with AgentProcess(tmp_path, env=env) as agent:
        reply = agent.control(
            {"op": "notify", "action": "drain", "deadline": format_time(parse_deadline("1h"))}
        )
        notice = reply["notice"]

        def steps() -> dict[str, dict[str, object]] | None:
            lines = [json.loads(line) for line in agent.output().splitlines()]
            found = {
                str(line["lifecycle"]): line
                for line in lines
                if line.get("notice_id") == notice["id"]
            }
            return found if {"seen", "published"} <= set(found) else None

        by_step = eventually(steps, what="the seen and published lines")
    assert by_step["published"]["deadline"] == notice["deadline"], by_step
    assert by_step["seen"]["deadline"] == notice["deadline"], by_step
    assert by_step["seen"]["noticed_at"] == notice["noticed_at"], by_step


def test_text_log_says_an_escalation_is_one(tmp_path: Path) -> None:
    """A drain sent as terminate within the exit margin of its deadline read, in the text
    log, as any terminate (`notice terminate local/manual/... deadline=... seq=...`): the line
    says it is that drain escalated, and why; the drain it was and a plain terminate do not."""
    from forewarn.protocol.timefmt import format_time, parse_deadline
    from support import eventually

    env = agent_env(tmp_path, FOREWARN_EXIT_MARGIN="1s")
    with AgentProcess(tmp_path, providers=("local",), env=env) as agent:
        reply = agent.control(
            {"op": "notify", "action": "drain", "deadline": format_time(parse_deadline("3s"))}
        )
        drained = reply["notice"]["id"]
        plain = agent.control({"op": "notify", "action": "terminate"})["notice"]["id"]

        def line(notice_id: str, action: str) -> str | None:
            wanted = f" notice {action} {notice_id} "
            return next((x for x in agent.output().splitlines() if wanted in x), None)

        escalated = eventually(lambda: line(drained, "terminate"), what="the escalation")
    assert escalated.endswith(
        "(escalated from drain: its deadline is within the exit margin, 1s)"
    ), escalated
    assert "escalated" not in str(line(drained, "drain"))
    assert "escalated" not in str(line(plain, "terminate"))
