"""A terminate published before a shell job held it (`forewarn wait --client ID` holds the
notice it returns, after the publication, so the `notice` record says `clients: 0`), and the
job killed before its ack: the job lost its work on it, but the telemetry had no word of the
hold, and `forewarn plan` counted that reclaim as one that reached no job instead of one that
came too late to save on."""

from __future__ import annotations

from pathlib import Path

from forewarn.agent.plan.telemetry import summarize_telemetry
from forewarn.agent.telemetry import FILE_NAME, read_records
from support import AgentProcess


def record(at: str, kind: str, **fields: object) -> dict[str, object]:
    return {"v": 1, "at": f"2026-11-30T{at}Z", "kind": kind, **fields}


NOTICE = record(
    "01:00:00",
    "notice",
    id="aws/spot-itn/1",
    action="terminate",
    reason="spot-interruption",
    provider="aws",
    deadline="2026-11-30T01:02:00Z",
    sent_at="2026-11-30T01:00:00Z",
    clients=0,
)


def test_a_held_notice_not_saved_on_is_too_late_not_unattended() -> None:
    held = record("01:00:01", "hold", notice_id="aws/spot-itn/1", client="train")
    summary = summarize_telemetry([record("00:00:00", "start"), NOTICE, held])
    assert (summary.unattended_notices, summary.late_notices) == (0, 1), summary


def test_without_a_hold_nor_an_ack_it_reached_no_job() -> None:
    summary = summarize_telemetry([record("00:00:00", "start"), NOTICE])
    assert (summary.unattended_notices, summary.late_notices) == (1, 0), summary


def test_the_agent_records_each_hold_in_its_telemetry(tmp_path: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        notice = agent.control({"op": "notify", "action": "terminate"})["notice"]
        hold = {"op": "hold", "notice_id": notice["id"], "client": "train"}
        assert agent.control(hold)["held"] is True
        assert agent.control(hold)["held"] is False  # held already: not recorded again
        telemetry = Path(agent.env["FOREWARN_STATE_DIR"]) / FILE_NAME
        holds = [r for r in read_records(telemetry) if r["kind"] == "hold"]
    assert [(r["notice_id"], r["client"]) for r in holds] == [(notice["id"], "train")], holds
