"""A flag file's deadline kept beside it (`checkpoint-now.jobs/.deadline-...`) and the agent:
one the jobs' guards kept while no agent ran is raised again by an agent started later (a job
connected to it heard nothing: its guard leaves the flag to the agent); the agent keeps one
too when it removes a flag with a deadline, for a job started after it stops; an earlier
boot's deadline still stands, a time or a duration; and a new flag file withdraws it."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flag_guard import looked, save_for_flag
from forewarn.clients import CheckpointGuard
from forewarn.protocol import flagkept
from forewarn.protocol.flagkept import KeptDeadline, parse_record, record_name
from forewarn.protocol.timefmt import format_time, parse_time, utcnow
from support import AgentProcess, agent_env, eventually

pytestmark = pytest.mark.usefixtures("forked_agents")


def alone(flag: Path, margin: float = 1.0) -> CheckpointGuard:
    """A job's guard with no agent: it takes the flag file itself."""
    return CheckpointGuard(
        notices=False, handle_signals=False, flag_file=flag, agree=False, exit_margin=margin
    )


def connected(agent: AgentProcess, flag: Path, margin: float = 1.0) -> CheckpointGuard:
    guard = CheckpointGuard(
        events=agent.events,
        control=agent.control_endpoint,
        flag_file=flag,
        handle_signals=False,
        exit_margin=margin,
    )
    notices = guard.notices
    assert notices is not None
    eventually(lambda: notices.agent is not None, timeout=10, what="the agent's heartbeat")
    return guard


def records(flag: Path) -> list[str]:
    directory = flag.with_name(flag.name + ".jobs")
    if not directory.is_dir():
        return []
    return sorted(path.name for path in directory.iterdir() if path.name.startswith(".deadline-"))


def plant(flag: Path, record: KeptDeadline) -> None:
    directory = flag.with_name(flag.name + ".jobs")
    directory.mkdir(exist_ok=True)
    (directory / record_name(record.flag)).write_text(record.to_text())


def train_until_exit(guard: CheckpointGuard, timeout: float) -> tuple[float, tuple[str, ...]]:
    """Steps until a save says exit: when it did (wall time) and the notices it answered."""
    ends = time.monotonic() + timeout
    step = 0
    while time.monotonic() < ends:
        step += 1
        time.sleep(0.02)  # the step's work
        if guard.due(step):
            result = guard.saved(step, 0.01)
            if result.exit:
                return time.time(), result.notices
    raise AssertionError(f"the job did not exit within {timeout}s")


def test_an_agent_started_after_the_guard_kept_a_deadline_stops_its_job_in_time(
    tmp_path: Path,
) -> None:
    env = agent_env(tmp_path)
    flag = Path(env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
    deadline = utcnow().replace(microsecond=0) + timedelta(seconds=12)
    keeper = alone(flag)
    try:
        flag.write_text(format_time(deadline) + "\n")
        save_for_flag(keeper)  # the only job saved: the file goes, its deadline is kept
        assert not flag.exists()
    finally:
        keeper.close()
    assert len(records(flag)) == 1
    agent = AgentProcess(tmp_path, env=env, args=("--set", "exit_margin=3s"))
    with agent, agent.subscriber() as sub:
        job = connected(agent, flag)
        try:
            exited_at, answered = train_until_exit(job, timeout=20)
            assert exited_at < deadline.timestamp(), "the job exited after its deadline"
            assert exited_at > deadline.timestamp() - 3 - 2, "the job exited long before"
            assert job.exit_code == 143
        finally:
            job.close()
        drain = sub.notice(timeout=1)
        assert drain["action"] == "drain", drain
        assert parse_time(drain["deadline"]) == deadline
        assert answered == (drain["id"],)
        # Seen at the start, not written now: no detection delay to measure from the mtime.
        assert "notice_time" not in drain["detail"]
        assert drain["detail"]["kept"].startswith(str(flag) + ".jobs/.deadline-")
        assert "was handled before this agent started" in agent.output()
    assert len(records(flag)) == 1, "the record went while its deadline stands"


def test_the_agent_keeps_the_deadline_of_a_flag_it_removes_for_a_job_after_it(
    tmp_path: Path,
) -> None:
    """Flushed by its clients, the flag goes and its drain stays in force; the agent keeps the
    deadline beside it, so a job started once the agent stopped still saves and exits by it."""
    agent = AgentProcess(tmp_path)
    with agent, agent.subscriber() as sub:
        flag = Path(agent.env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        flag.write_text("1h\n")
        drain = sub.notice(timeout=5)
        assert agent.control({"op": "ack", "notice_id": drain["id"]})["ok"]
        eventually(lambda: not flag.exists(), timeout=5, what="the flag removed at the flush")
        eventually(lambda: len(records(flag)) == 1, timeout=5, what="the kept deadline")
    late = alone(flag)
    try:
        eventually(lambda: late.due(1), timeout=5, what="the late job's save for the flag")
        assert not late.saved(1, 0.01).exit
        assert late._flag_deadline == parse_time(drain["deadline"])
    finally:
        late.close()


def test_a_new_flag_withdraws_a_kept_deadline_even_when_removed_by_hand(tmp_path: Path) -> None:
    """The agent clears the kept drain when the file is written again: the record goes with
    it, and a job started after the new file was removed by hand takes no deadline."""
    env = agent_env(tmp_path)
    flag = Path(env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
    boot_id, booted = flagkept.this_boot()
    plant(flag, KeptDeadline((1, 2, 3), utcnow() + timedelta(hours=1), None, boot_id, booted))
    agent = AgentProcess(tmp_path, env=env)
    with agent, agent.subscriber() as sub:
        kept = sub.notice(timeout=5)
        assert kept["id"] == "local/flag/3" and kept["deadline"] is not None
        flag.write_text("")
        assert sub.notice(timeout=5)["action"] == "clear"
        assert sub.notice(timeout=5)["action"] == "drain"
        assert records(flag) == []
        flag.unlink()
        assert sub.notice(timeout=5)["action"] == "clear"
    late = alone(flag)
    try:
        looked(late)
        assert not late.due(1) and late._flag_deadline is None
    finally:
        late.close()


@pytest.mark.parametrize("written_as", ["time", "duration"])
def test_an_earlier_boots_deadline_stands_for_the_agent_written_as_a_time_or_a_duration(
    tmp_path: Path, written_as: str
) -> None:
    """A deadline kept in an earlier boot names the moment it was kept for, written as a time
    or as a duration (`30m` from the writing, whose wall time the record keeps), as
    `forewarn notify --deadline 30m` from an earlier boot keeps its deadline: a duration was
    dead, and a job started after a reboot 30 min before the deadline trained on into it."""
    env = agent_env(tmp_path)
    flag = Path(env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
    boot_id, booted = flagkept.this_boot()
    earlier = None if booted is None else booted - timedelta(days=1)
    deadline = utcnow().replace(microsecond=0) + timedelta(minutes=30)
    duration = written_as == "duration"
    plant(
        flag,
        KeptDeadline(
            (1, 2, 3),
            deadline,
            1234.0 if duration else None,  # on that boot's clock: no reading of this one
            "0" * 32 if boot_id else None,
            earlier,
            duration,
        ),
    )
    agent = AgentProcess(tmp_path, env=env)
    with agent, agent.subscriber() as sub:
        drain = sub.notice(timeout=5)
        assert drain["id"] == "local/flag/3" and drain["action"] == "drain"
        assert parse_time(drain["deadline"]) == deadline


@pytest.mark.parametrize("written_as", ["time", "duration"])
def test_an_earlier_boots_deadline_that_passed_before_this_boot_is_dead_for_the_agent(
    tmp_path: Path, written_as: str
) -> None:
    """Whether written as a time or a duration, a kept deadline that passed before this boot
    began was for the machine the reboot ended: no drain, and the record is removed."""
    env = agent_env(tmp_path)
    flag = Path(env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
    boot_id, booted = flagkept.this_boot()
    if booted is None:
        pytest.skip("no boot clock here")
    earlier = booted - timedelta(days=1)
    deadline = booted - timedelta(seconds=60)
    duration = written_as == "duration"
    other = "0" * 32 if boot_id else None
    plant(
        flag,
        KeptDeadline((1, 2, 3), deadline, 50.0 if duration else None, other, earlier, duration),
    )
    agent = AgentProcess(tmp_path, env=env)
    with agent:
        eventually(lambda: records(flag) == [], timeout=5, what="the dead record removed")
        assert agent.control({"op": "status"})["active"] == []


def test_a_record_the_agent_keeps_reads_back_as_it_wrote_it(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path)
    with agent, agent.subscriber() as sub:
        flag = Path(agent.env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        flag.write_text("10m\n")
        drain = sub.notice(timeout=5)
        assert agent.control({"op": "ack", "notice_id": drain["id"]})["ok"]
        eventually(lambda: len(records(flag)) == 1, timeout=5, what="the kept deadline")
    (name,) = records(flag)
    record = parse_record((flag.with_name(flag.name + ".jobs") / name).read_text())
    assert record is not None and record.duration and record.boot_deadline is not None
    assert record.deadline == parse_time(drain["deadline"])
    assert name.startswith(f".deadline-{int(drain['id'].rpartition('/')[2], 16)}-")


def test_a_job_that_saved_for_the_flag_is_not_asked_again_by_the_agent_started_later(
    tmp_path: Path,
) -> None:
    """A job alone takes the flag file itself and saves; an agent started before the deadline
    raises the kept drain again. The job connected to it already saved for that flag: it acks
    the drain with that save's step instead of saving again (a second full checkpoint of the
    same state: minutes of a large model's), and still exits by the deadline."""
    env = agent_env(tmp_path)
    flag = Path(env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
    agent = AgentProcess(tmp_path, env=env, args=("--set", "exit_margin=3s"))
    # Made before the agent runs: it gives up on it and takes the flag file itself.
    job = CheckpointGuard(
        events=agent.events,
        control=agent.control_endpoint,
        flag_file=flag,
        handle_signals=False,
        exit_margin=1.0,
    )
    notices = job.notices
    assert notices is not None
    try:
        deadline = utcnow().replace(microsecond=0) + timedelta(seconds=15)
        flag.write_text(format_time(deadline) + "\n")
        save_for_flag(job, step=5)
        assert not flag.exists()
        with agent, agent.subscriber() as sub:
            drain = sub.notice(timeout=5)
            assert drain["action"] == "drain", drain

            def acked() -> list[str]:
                return list(agent.control({"op": "status"})["acked_by"].get(drain["id"], []))

            eventually(
                lambda: acked() == [notices.client_id], timeout=5, what="the job's ack of the drain"
            )
            assert f"ack {drain['id']} from {notices.client_id}: step=5 " in agent.output()
            assert not job.due(6), "the job saved a second time for the flag it saved for"
            exited_at, _ = train_until_exit(job, timeout=20)
            assert exited_at < deadline.timestamp(), "the job exited after its deadline"
            assert job.exit_code == 143
    finally:
        job.close()


def test_a_restarted_agent_does_not_say_it_removed_a_flag_file_already_gone(
    tmp_path: Path,
) -> None:
    """The flag's drain, flushed and its file removed, stays in force until its deadline; an
    agent restarted meanwhile logged `flag file ... handled and removed` again at its start,
    for a file the agent before it had removed: the operator read of a second request."""
    env = agent_env(tmp_path)
    flag = Path(env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
    first = AgentProcess(tmp_path, env=env)
    with first, first.subscriber() as sub:
        flag.write_text("1h\n")
        drain = sub.notice(timeout=5)
        assert first.control({"op": "ack", "notice_id": drain["id"]})["ok"]
        eventually(lambda: not flag.exists(), timeout=5, what="the flag removed at the flush")
        eventually(lambda: len(records(flag)) == 1, timeout=5, what="the kept deadline")
    assert first.output().count("handled and removed") == 1
    second = AgentProcess(tmp_path, env=env)
    with second:
        eventually(lambda: "restored from" in second.output(), timeout=5, what="the drain restored")
        status = second.control({"op": "status"})
        assert [n["id"] for n in status["active"]] == [drain["id"]], status["active"]
    assert "handled and removed" not in second.output(), second.output()


def test_an_agent_restarted_past_a_kept_deadline_does_not_say_it_raised_the_drain_again(
    tmp_path: Path,
) -> None:
    """Found in a field walk: a flag file's drain, flushed and its file removed, sent as
    terminate and past its deadline (within the 300 s a kept deadline stands); the agent
    restarted then restored it from its state file, and its local watcher then logged the
    WARNING `flag file ... was handled before this agent started ...: drain ... raised
    again` at every restart, of a terminate that had never left: the operator's read of a
    flag the jobs took while no agent ran."""
    env = agent_env(tmp_path)
    flag = Path(env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
    first = AgentProcess(tmp_path, env=env)
    with first, first.subscriber() as sub:
        flag.write_text("2s\n")
        notice = sub.notice(timeout=5)
        assert first.control({"op": "ack", "notice_id": notice["id"]})["ok"]
        eventually(lambda: not flag.exists(), timeout=5, what="the flag removed at the flush")
        eventually(lambda: len(records(flag)) == 1, timeout=5, what="the kept deadline")
    deadline = parse_time(notice["deadline"])
    eventually(lambda: utcnow() > deadline, timeout=10, what="the deadline passed")
    second = AgentProcess(tmp_path, env=env)
    with second:
        eventually(lambda: "restored from" in second.output(), timeout=5, what="the restore")
        eventually(
            lambda: second.control({"op": "status"})["health"][0]["polls"] > 1,
            timeout=10,
            what="the local watcher's looks",
        )
        status = second.control({"op": "status"})
        assert [(n["id"], n["action"]) for n in status["active"]] == [
            (notice["id"], "terminate")
        ], status["active"]
    assert "was handled before this agent started" not in second.output(), second.output()


def test_a_job_that_saved_for_the_agents_flag_drain_saves_no_more_once_the_agent_stops(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A job connected to the agent saves for the flag file's drain; the agent removes the
    file, keeps its deadline beside it, and stops. The job, now taking the flag file itself,
    finds that kept deadline: it saved for that flag already, so it writes no second
    checkpoint (found: each job saved again 4 s after the agent stopped and said the flag
    was "handled before this job started"), and still exits by the deadline."""
    env = agent_env(tmp_path)
    flag = Path(env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
    caplog.set_level(logging.INFO, logger="forewarn.clients")
    agent = AgentProcess(tmp_path, env=env, args=("--set", "exit_margin=3s"))
    with agent:
        job = connected(agent, flag)
        try:
            deadline = utcnow().replace(microsecond=0) + timedelta(seconds=16)
            flag.write_text(format_time(deadline) + "\n")
            step = 1
            eventually(lambda: job.due(step), timeout=5, what="the job's save for the drain")
            answered = job.saved(step, 0.01)
            assert not answered.exit
            assert answered.notices and answered.notices[0].startswith("local/flag/")
            eventually(lambda: not flag.exists(), timeout=5, what="the flag removed at the flush")
            eventually(lambda: len(records(flag)) == 1, timeout=5, what="the kept deadline")
            agent.stop()
            eventually(
                lambda: job._flag_deadline == deadline,
                timeout=10,
                what="the job taking the kept deadline with the agent gone",
            )
            assert not job.due(step + 1), "the job saved again for the flag it saved for"
            assert "handled before this job started" not in caplog.text
            assert "this job saved for it already" in caplog.text
            exited_at, _ = train_until_exit(job, timeout=20)
            assert exited_at < deadline.timestamp(), "the job exited after its deadline"
            assert job.exit_code == 143
        finally:
            job.close()


def _plant_text(flag: Path, name: str, text: str) -> None:
    directory = flag.with_name(flag.name + ".jobs")
    directory.mkdir(exist_ok=True)
    (directory / name).write_text(text)


# A record nested past Python's recursion limit, in the 4 KiB a record is read to: the
# directory is open to every user (mode 1777), so anyone on the machine can plant one.
NESTED_RECORD = "[" * 4000


def test_a_record_nested_too_deep_neither_stops_the_watcher_nor_a_guard(tmp_path: Path) -> None:
    """It crashed the agent's local watcher at every restart (no flag was ever raised again:
    `RecursionError` in its health, restarting) and ended each job's guard ticker thread
    (its periodic saves and flag looks): it reads as no record, as any damaged one."""
    with AgentProcess(tmp_path) as agent, agent.subscriber() as sub:
        flag = Path(agent.env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        _plant_text(flag, ".deadline-9-9-9", NESTED_RECORD)
        (tmp_path / "alone").mkdir()
        own = tmp_path / "alone" / "checkpoint-now"
        _plant_text(own, ".deadline-9-9-9", NESTED_RECORD)
        guard = alone(own)
        try:
            looked(guard)
            looked(guard)
            assert guard._ticker.is_alive()
        finally:
            guard.close()
        flag.write_text("")
        drain = sub.notice(timeout=5)
        assert drain["action"] == "drain" and drain["id"].startswith("local/flag/"), drain
        health = agent.control({"op": "status"})["health"]
        assert [h["state"] for h in health if h["name"] == "local"] == ["healthy"], health
    assert "RecursionError" not in agent.output(), agent.output()


def test_a_job_that_saved_for_a_flag_alone_acks_the_agents_drain_for_it_as_a_drains(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The job took the flag file itself (no agent ran) and saved for it; an agent started
    since raises the kept deadline as a drain, which the job acks with that save, as its
    own drain saves are acked: with `action="drain"`, so that the ack, arriving after the
    agent escalated the drain, counts for no terminate (found: it was sent without one)."""
    env = agent_env(tmp_path)
    flag = Path(env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
    caplog.set_level(logging.INFO, logger="forewarn.clients")
    agent = AgentProcess(tmp_path, env=env)
    job = CheckpointGuard(
        events=agent.events,
        control=agent.control_endpoint,
        flag_file=flag,
        handle_signals=False,
        exit_margin=1.0,
        heartbeat_timeout=0.5,
    )
    notices = job.notices
    assert notices is not None
    sent: list[tuple[str | None, str | None]] = []
    ack = notices.ack

    def spied(notice_id: str | None, **kwargs: Any) -> bool:
        sent.append((notice_id, kwargs.get("action")))
        return ack(notice_id, **kwargs)

    setattr(notices, "ack", spied)  # noqa: B010 - the guard looks it up on its Notices
    try:
        flag.write_text("1h\n")
        save_for_flag(job)  # no agent heard from: the job took the flag itself
        assert not flag.exists() and len(records(flag)) == 1
        with agent, agent.subscriber() as sub:
            drain = sub.notice(timeout=10)
            assert drain["action"] == "drain", drain
            eventually(
                lambda: "the flag file this job saved for" in caplog.text,
                timeout=10,
                what="the job answering the drain with its save",
            )
            assert (drain["id"], "drain") in sent, sent
            assert not job.due(2), "the job saved again for the flag it saved for"
    finally:
        job.close()
