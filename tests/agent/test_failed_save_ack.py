"""A client whose exit save failed acks the terminate `outcome=failed` (with a note saying
why) and exits: the agent does not count that as an ack (its state is not saved), and said
at the deadline, in the flush by the clients left and in `status` that it was "gone before
its ack", as if it never tried, hiding the cause (a full disk, a refused write). It says
now that its save failed, and why, across a restart too; a retry that saves ends acked.
"""

from __future__ import annotations

import json
import re
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from forewarn.agent.state import encode_state, load_state
from forewarn.clients import CheckpointGuard, Notices
from forewarn.protocol.timefmt import format_time
from hypothesis import given, settings
from hypothesis import strategies as st
from support import AgentProcess, Subscriber, agent_env, eventually, examples, run_forewarn

pytestmark = pytest.mark.usefixtures("forked_agents")

WARNING = "passed without an ack from"
ARGS = ("--exit-margin", "1s", "--set", "notice_grace=60")
WHY = "OSError: [Errno 28] No space left on device: '/ckpt/step-41.pt'"


def _terminate(agent: AgentProcess, seconds: float) -> str:
    deadline = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    request = {"op": "notify", "action": "terminate", "deadline": format_time(deadline)}
    notice_id: str = agent.control(request)["notice"]["id"]
    return notice_id


def _warned(agent: AgentProcess, notice_id: str) -> str:
    found: re.Match[str] = eventually(
        lambda: re.search(
            rf"^.*notice {re.escape(notice_id)}: .*{WARNING}.*$", agent.output(), re.M
        ),
        10,
        "the warning at the deadline",
    )
    return found.group(0)


def _status_line(env: dict[str, str], notice_id: str) -> str:
    status = run_forewarn("status", env=env)
    assert status.returncode == 0, status.stderr
    (shown,) = [row for row in status.stdout.splitlines() if notice_id in row]
    return shown


def _failed_ack(notice_id: str, note: str | None = WHY) -> dict[str, Any]:
    """What `CheckpointGuard` sends when the exit's save raised (clients/guard.py)."""
    ack: dict[str, Any] = {
        "op": "ack",
        "notice_id": notice_id,
        "client": "trainer",
        "step": 41,
        "outcome": "failed",
    }
    if note is not None:
        ack["note"] = note
    return ack


def test_a_client_whose_save_failed_is_named_so_not_as_gone_before_its_ack(
    tmp_path: Path,
) -> None:
    env = agent_env(tmp_path)
    with (
        AgentProcess(tmp_path, args=ARGS, env=env) as agent,
        Subscriber(agent.events, ("notice", "client/saver")).ready() as saver,
    ):
        trainer = Subscriber(agent.events, ("notice", "client/trainer")).ready()
        notice_id = _terminate(agent, 3)
        assert trainer.notice()["id"] == notice_id and saver.notice()["id"] == notice_id
        ack = {"op": "ack", "notice_id": notice_id, "client": "saver", "flush_seconds": 0.1}
        assert agent.control(ack)["ok"]
        assert agent.control(_failed_ack(notice_id))["ok"]
        trainer.close()  # it exits after its failed save: its leaving flushes the notice
        flushed = eventually(
            lambda: re.search(
                rf"^.*notice {notice_id} flushed by every client.*$", agent.output(), re.M
            ),
            10,
            "the flush by the clients left",
        ).group(0)
        assert f"trainer left after its save failed ({WHY})" in flushed, flushed

        line = _warned(agent, notice_id)
        assert f"trainer (its save failed: {WHY})" in line, line
        assert "gone before its ack" not in line, line
        reply = agent.control({"op": "status"})
        assert reply["unacked_past_deadline"] == {notice_id: ["trainer"]}
        assert reply["gone_before_ack"] == {}, reply
        assert reply["save_failed"] == {notice_id: {"trainer": WHY}}, reply
        assert json.loads(run_forewarn("status", "--json", env=env).stdout)["save_failed"] == {
            notice_id: {"trainer": WHY}
        }
        shown = _status_line(env, notice_id)
        assert shown.endswith(
            f"past its deadline, not acked by trainer (its save failed: {WHY})"
        ), shown
        saved = Path(env["FOREWARN_STATE_DIR"]) / "state.json"
        eventually(lambda: notice_id in json.loads(saved.read_text()).get("overdue", {}), 10)
        assert agent.stop() == 0
    with AgentProcess(tmp_path, args=ARGS, env=env) as agent:
        reply = agent.control({"op": "status"})
        assert reply["save_failed"] == {notice_id: {"trainer": WHY}}, reply
        assert reply["gone_before_ack"] == {}, reply
        shown = _status_line(env, notice_id)
        assert shown.endswith(
            f"past its deadline, not acked by trainer (its save failed: {WHY})"
        ), shown
        assert WARNING not in agent.output(), "said again after the restart"


def test_a_guard_whose_exit_save_raised_is_named_with_its_error(tmp_path: Path) -> None:
    """A real `CheckpointGuard` whose exit's save raised (a full disk) acks the terminate
    failed and the job exits: the agent named it `trainer (gone before its ack)`."""
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, args=ARGS, env=env) as agent:
        notices = Notices(agent.events, agent.control_endpoint, client_id="trainer")
        guard = CheckpointGuard(notices=notices, flag_file=None, handle_signals=False)
        try:
            eventually(lambda: notices.alive, 10, "the first heartbeat")
            notice_id = _terminate(agent, 3)
            eventually(lambda: guard.due(41), 10, "the guard to see the terminate")

            def full_disk(step: int) -> None:
                raise OSError(28, "No space left on device", f"/ckpt/step-{step}.pt")

            with pytest.raises(OSError):
                guard.save(41, full_disk)
        finally:
            guard.close()
            notices.close()
        line = _warned(agent, notice_id)
        why = "OSError: [Errno 28] No space left on device: '/ckpt/step-41.pt'"
        assert line.endswith(f"trainer (its save failed: {why})"), line
        assert agent.control({"op": "status"})["save_failed"] == {notice_id: {"trainer": why}}


def test_a_guard_whose_exit_save_raised_a_multiline_error_is_named_with_it(
    tmp_path: Path,
) -> None:
    """An error whose message has several lines (a storage client's, with its response
    body): the guard sent it as the failed ack's note, the agent refused the ack (a note is
    one line), and the job was named gone before its ack, its failed save unsaid."""
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, args=ARGS, env=env) as agent:
        notices = Notices(agent.events, agent.control_endpoint, client_id="trainer")
        guard = CheckpointGuard(notices=notices, flag_file=None, handle_signals=False)
        try:
            eventually(lambda: notices.alive, 10, "the first heartbeat")
            notice_id = _terminate(agent, 3)
            eventually(lambda: guard.due(41), 10, "the guard to see the terminate")

            def refused(step: int) -> None:
                raise RuntimeError("PUT ckpt/step-41.pt refused\nHTTP 403\r\nAccessDenied")

            with pytest.raises(RuntimeError):
                guard.save(41, refused)
        finally:
            guard.close()
            notices.close()
        line = _warned(agent, notice_id)
        why = "RuntimeError: PUT ckpt/step-41.pt refused HTTP 403 AccessDenied"
        assert line.endswith(f"trainer (its save failed: {why})"), line


def test_a_failed_save_without_a_note_is_still_named_failed(tmp_path: Path) -> None:
    """`forewarn ack ID --outcome failed --client trainer` from a shell loop, no note."""
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, args=ARGS, env=env) as agent:
        trainer = Subscriber(agent.events, ("notice", "client/trainer")).ready()
        notice_id = _terminate(agent, 2)
        assert trainer.notice()["id"] == notice_id
        acked = run_forewarn(
            "ack", notice_id, "--outcome", "failed", "--client", "trainer", env=env
        )
        assert acked.returncode == 0, acked.stderr
        trainer.close()
        line = _warned(agent, notice_id)
        assert line.endswith("trainer (its save failed)"), line
        shown = _status_line(env, notice_id)
        assert shown.endswith("not acked by trainer (its save failed)"), shown


def test_a_failed_save_then_a_saved_retry_ends_acked(tmp_path: Path) -> None:
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, args=ARGS, env=env) as agent:
        trainer = Subscriber(agent.events, ("notice", "client/trainer")).ready()
        notice_id = _terminate(agent, 2)
        assert trainer.notice()["id"] == notice_id
        assert agent.control(_failed_ack(notice_id))["ok"]
        ack = {"op": "ack", "notice_id": notice_id, "client": "trainer", "flush_seconds": 0.5}
        assert agent.control(ack)["ok"]  # it retried, and saved
        eventually(
            lambda: f"notice {notice_id} flushed by every client (1)" in agent.output(),
            10,
            "the flush",
        )
        trainer.close()
        eventually(
            lambda: (
                datetime.now(timezone.utc)
                > datetime.fromisoformat(agent.control({"op": "status"})["active"][0]["deadline"])
                + timedelta(seconds=1)
            ),
            10,
            "a second past the deadline",
        )
        reply = agent.control({"op": "status"})
        assert reply["unacked_past_deadline"] == {} and reply["save_failed"] == {}, reply
        assert WARNING not in agent.output()


def test_an_older_state_file_without_failed_saves_loads(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": 1, "seq": 3, "gone_before_ack": {"n1": ["trainer"]}}))
    state = load_state(path)
    assert state.gone == {"n1": ["trainer"]} and state.save_failed == {}


@settings(max_examples=examples(60), deadline=None)
@given(
    raw=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
        ),
        max_leaves=12,
    )
)
def test_any_saved_failed_saves_load_as_notes_or_are_left_out(
    raw: object, tmp_path_factory: Any
) -> None:
    path = tmp_path_factory.mktemp("state") / "state.json"
    path.write_text(json.dumps({"version": 1, "seq": 1, "save_failed": raw}))
    state = load_state(path)
    for notice_id, clients in state.save_failed.items():
        assert isinstance(notice_id, str) and isinstance(clients, dict)
        assert all(isinstance(c, str) and isinstance(n, str) for c, n in clients.items())
    again = json.loads(encode_state(state))
    assert load_state_from(tmp_path_factory, again).save_failed == state.save_failed


def load_state_from(factory: Any, payload: dict[str, Any]) -> Any:
    path = factory.mktemp("again") / "state.json"
    path.write_text(json.dumps(payload))
    return load_state(path)


@settings(max_examples=examples(200), deadline=None)
@given(note=st.text(max_size=700))
def test_any_note_a_client_sends_is_one_the_agent_takes(note: str) -> None:
    """A note of several lines (or over 500 characters) made the agent refuse the whole ack."""
    from forewarn.agent.protocol import AckRequest
    from forewarn.clients.notices import _ack_figure

    sent = _ack_figure("note", note)
    request = AckRequest.model_validate({"op": "ack", "outcome": "failed", "note": sent})
    assert request.note == sent


def test_a_shell_loop_whose_save_failed_is_named_so_when_its_hold_is_let_go(
    tmp_path: Path,
) -> None:
    """`forewarn wait --client loop --pid $$`, then `forewarn ack ID --outcome failed --note
    ...` and the loop exits: its hold let go 'gone before its ack', and the deadline named
    it so."""
    from forewarn.agent.holders import pid_namespace

    env = agent_env(tmp_path)
    loop = subprocess.Popen(["sleep", "60"])  # the shell loop, ended below
    try:
        with AgentProcess(tmp_path, args=ARGS, env=env) as agent:
            notice_id = _terminate(agent, 3)
            hold = {
                "op": "hold",
                "notice_id": notice_id,
                "client": "loop",
                "pid": loop.pid,
                "pid_namespace": pid_namespace(),
            }
            assert agent.control(hold)["held"]
            failed = {**_failed_ack(notice_id, "disk full"), "client": "loop"}
            assert agent.control(failed)["ok"]
            loop.kill()
            loop.wait()
            let_go = eventually(
                lambda: re.search(r"^.*hold of client loop on .* let go.*$", agent.output(), re.M),
                10,
                "the hold let go",
            ).group(0)
            assert let_go.endswith(
                f"its process {loop.pid} ended after its save failed (disk full)"
            )
            assert _warned(agent, notice_id).endswith("loop (its save failed: disk full)")
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.wait()


def test_a_failed_save_s_ack_is_logged_as_a_warning(tmp_path: Path) -> None:
    """A job's save that raised (its state NOT saved) was logged at INFO, as a saved one
    (walked: a job whose save raised OSError acked a terminate; the agent's log had `INFO
    forewarn.agent: ack ... outcome=failed (OSError: disk full)`), so an agent run at
    `--log-level warning`, or an alert on WARNING lines, never heard of the lost save."""
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, args=ARGS, env=env) as agent:
        notice_id = _terminate(agent, 60)
        assert agent.control(_failed_ack(notice_id))["ok"] is True
        line: re.Match[str] = eventually(
            lambda: re.search(
                rf"^.*ack {re.escape(notice_id)} from trainer.*$", agent.output(), re.M
            ),
            10,
            "the failed ack's line",
        )
        saved = dict(_failed_ack(notice_id), client="other", outcome="saved", flush_seconds=1.0)
        saved.pop("note")
        agent.control(saved)
        other: re.Match[str] = eventually(
            lambda: re.search(
                rf"^.*ack {re.escape(notice_id)} from other.*$", agent.output(), re.M
            ),
            10,
            "the saved ack's line",
        )
    assert " WARNING forewarn.agent: " in line.group(0), line.group(0)
    assert "outcome=failed" in line.group(0) and WHY in line.group(0), line.group(0)
    assert " INFO forewarn.agent: " in other.group(0), other.group(0)
