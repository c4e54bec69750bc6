"""Shell jobs as the README's "Shell jobs" section writes them: `forewarn wait` in a loop with a
save and `forewarn ack`, and `forewarn wait --for terminate && kill "$JOB"` started while a
terminate is in force. `wait` decides as the client library does which notices in force
before it started are still this job's to act on: a drain some client has saved for (the
heartbeat's `acked`) is not returned again, and a terminate an earlier job acted on returns
`--exit-margin` before its deadline, not at once."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from forewarn.agent.cli import _status_ages, main
from forewarn.protocol.timefmt import format_time
from support import AgentProcess, Subscriber, eventually, forewarn_cmd

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")

README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "<!-- run by tests/agent/test_shell_job_loops.py -->"


def readme_loop() -> str:
    """The README.md's wait → save → ack loop, as written: the sh block under MARKER."""
    text = README.read_text()
    after = text[text.index(MARKER) + len(MARKER) :].lstrip("\n")
    assert after.startswith("```sh\n"), after[:40]
    return after[len("```sh\n") : after.index("\n```")]


def _in(seconds: float) -> str:
    return format_time(datetime.now(timezone.utc) + timedelta(seconds=seconds))


def _wait(agent: AgentProcess, monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """`forewarn wait` in this process (cheaper than a child) on the agent's own endpoints."""
    monkeypatch.setenv("FOREWARN_RUNTIME_DIR", agent.env["FOREWARN_RUNTIME_DIR"])
    return main(["wait", *args])


def _job_dir(tmp_path: Path, env: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """A working directory with the job's `./save-checkpoint.sh` (it notes each save), and
    an environment with `forewarn` on PATH as an installed console script would be."""
    job = tmp_path / "job"
    job.mkdir()
    save = job / "save-checkpoint.sh"
    save.write_text('#!/bin/sh\necho saved >> "$SAVES"\n')
    save.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "forewarn"
    program.write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m forewarn.agent.cli "$@"\n'
    )
    program.chmod(0o755)
    path = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    return job, {**env, "PATH": path, "SAVES": str(tmp_path / "saves"), "STEP": "7"}


def test_the_readme_wait_save_ack_loop_saves_once_for_a_drain_another_client_holds(
    tmp_path: Path,
) -> None:
    """A library client holds the drain (it has not acked yet), so the loop's anonymous ack
    does not end it: the loop's next `wait` got the drain again as a replay, and the loop
    saved for it again and again. Saved for (the heartbeat lists it in `acked`), it is not
    this job's to save for again; a terminate then is saved for and ends the loop."""
    with AgentProcess(tmp_path) as agent:
        job, env = _job_dir(tmp_path, agent.env)
        saves, stderr = tmp_path / "saves", tmp_path / "loop.err"
        with Subscriber(agent.events, ("notice", "client/trainer")).ready() as trainer:
            drain = agent.control({"op": "notify", "action": "drain", "deadline": _in(600)})
            assert trainer.notice()["id"] == drain["notice"]["id"]
            with stderr.open("w") as err:
                loop = subprocess.Popen(
                    ["bash", "-e", "-c", readme_loop()],
                    cwd=job,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    start_new_session=True,
                )
            try:
                eventually(
                    lambda: "saved for" in stderr.read_text() or _count(saves) > 1,
                    timeout=20,
                    what="the loop's second wait",
                )
                assert _count(saves) == 1, stderr.read_text()
                agent.control({"op": "notify", "action": "terminate", "deadline": _in(600)})
                assert loop.wait(20) == 0, stderr.read_text()
            finally:
                if loop.poll() is None:
                    os.killpg(loop.pid, signal.SIGKILL)
                    loop.wait()
        assert _count(saves) == 2, stderr.read_text()
    log = agent.output()
    assert f"ack {drain['notice']['id']} from save-loop: step=7" in log, log


def _count(saves: Path) -> int:
    return len(saves.read_text().splitlines()) if saves.exists() else 0


def test_a_drain_nobody_saved_for_is_returned_to_a_wait_started_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with AgentProcess(tmp_path) as agent:
        drain = agent.control({"op": "notify", "action": "drain"})["notice"]
        code = _wait(agent, monkeypatch, "--for", "drain", "--timeout", "10s")
        out, _ = capsys.readouterr()
        assert code == 0 and drain["id"] in out


def _acked_terminate(agent: AgentProcess, deadline: str | None) -> str:
    request = {"op": "notify", "action": "terminate"}
    if deadline is not None:
        request["deadline"] = deadline
    notice_id: str = agent.control(request)["notice"]["id"]
    assert agent.control({"op": "ack", "notice_id": notice_id, "client": "earlier-job"})["ok"]
    eventually(
        lambda: notice_id in _beat(agent)["acked"], timeout=5, what="the ack in the heartbeat"
    )
    return notice_id


def _beat(agent: AgentProcess) -> dict[str, object]:
    with Subscriber(agent.events, ("heartbeat",)) as sub:
        return sub.recv(5)[1]


def test_a_terminate_an_earlier_job_acted_on_stops_the_next_one_at_its_exit_margin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The library lets a job started under a terminate an earlier job saved for train until
    its exit margin before the deadline; `wait --for terminate && kill "$JOB"` killed the new
    job at once. Both now stop it `exit_margin` before the deadline."""
    with AgentProcess(tmp_path) as agent:
        notice_id = _acked_terminate(agent, _in(60))
        started = time.monotonic()
        # The deadline is 60 s away: with a 57 s margin the wait returns about 3 s from now.
        code = _wait(agent, monkeypatch, "--for", "terminate", "--exit-margin", "57s")
        took = time.monotonic() - started
        out, err = capsys.readouterr()
        assert code == 0 and notice_id in out, err
        assert took >= 1.5, f"returned after {took:.1f}s: at once, not at the exit margin"
        assert "an earlier client acted on it" in err and "57s before its deadline" in err, err


def test_a_terminate_nobody_acted_on_still_returns_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with AgentProcess(tmp_path) as agent:
        notice_id = agent.control({"op": "notify", "action": "terminate", "deadline": _in(600)})[
            "notice"
        ]["id"]
        started = time.monotonic()
        code = _wait(agent, monkeypatch, "--timeout", "10s")
        out, _ = capsys.readouterr()
        assert code == 0 and notice_id in out
        assert time.monotonic() - started < 5


@pytest.mark.parametrize("deadline", [None, "past"], ids=["no-deadline", "past-deadline"])
def test_an_acted_on_terminate_without_a_deadline_ahead_asks_nothing_of_a_new_wait(
    deadline: str | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with AgentProcess(tmp_path) as agent:
        if deadline == "past":
            deadline_at = datetime.now(timezone.utc) + timedelta(seconds=2)
            notice_id = _acked_terminate(agent, format_time(deadline_at))
            # The deadline passes; the notice stays active until its grace ends.
            eventually(
                lambda: datetime.now(timezone.utc) > deadline_at, timeout=5, what="the deadline"
            )
        else:
            notice_id = _acked_terminate(agent, None)
        code = _wait(agent, monkeypatch, "--timeout", "2s")
        out, err = capsys.readouterr()
        assert code == 1 and out == "", out
        assert notice_id in err and "ignored" in err, err


def test_an_acked_drain_escalated_after_the_wait_began_returns_at_once(tmp_path: Path) -> None:
    """The drain was saved for before the wait started, so the wait passes it by; escalated
    to terminate (same id, the drain's `noticed_at`) while it waits, it is this job's exit."""
    with AgentProcess(tmp_path) as agent:
        drain = agent.control({"op": "notify", "action": "drain", "deadline": _in(600)})
        notice_id = drain["notice"]["id"]
        assert agent.control({"op": "ack", "notice_id": notice_id, "client": "earlier-job"})["ok"]
        wait = subprocess.Popen(
            forewarn_cmd("wait", "--for", "drain", "--json", "--timeout", "20s"),
            env=agent.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert wait.stderr is not None
            said = wait.stderr.readline()
            assert notice_id in said and "saved for" in said, said
            agent.control({"op": "notify", "action": "terminate", "id": notice_id})
            out, err = wait.communicate(timeout=15)
        finally:
            if wait.poll() is None:
                wait.kill()
                wait.wait()
        assert wait.returncode == 0, err
        assert json.loads(out)["action"] == "terminate" and json.loads(out)["id"] == notice_id


def test_the_wait_and_the_library_share_one_exit_margin() -> None:
    from forewarn.agent.waitrule import WAIT_EXIT_MARGIN
    from forewarn.clients.guard import INHERITED_EXIT_MARGIN

    assert WAIT_EXIT_MARGIN == INHERITED_EXIT_MARGIN


def test_a_wait_with_a_client_id_passes_by_only_the_drains_that_client_acked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A drain that arrived while the loop saved for the one before, and that another client
    saved for first, was passed by the loop's next `wait`: the heartbeat's `acked` does not
    say which client saved. `--client` names the loop; `acked_by` says who acked."""
    with AgentProcess(tmp_path) as agent:
        drain = agent.control({"op": "notify", "action": "drain"})["notice"]
        assert agent.control({"op": "ack", "notice_id": drain["id"], "client": "trainer"})["ok"]
        eventually(
            lambda: _beat(agent).get("acked_by") == {drain["id"]: ["trainer"]},
            timeout=5,
            what="the ack in the heartbeat",
        )
        code = _wait(agent, monkeypatch, "--for", "drain", "--client", "loop", "--timeout", "10s")
        out, _ = capsys.readouterr()
        assert code == 0 and drain["id"] in out, out
        # What `wait` reads to tell a drain raised after it began (`waitrule`): its age.
        ages = _status_ages(agent.control_endpoint, agent.runtime)
        assert ages is not None and drain["id"] in ages, ages
        monkeypatch.setenv("FOREWARN_RUNTIME_DIR", agent.env["FOREWARN_RUNTIME_DIR"])
        assert main(["ack", drain["id"], "--client", "loop"]) == 0
        assert main(["status"]) == 0
        out, _ = capsys.readouterr()
        assert "acked by loop, trainer" in out, out
        code = _wait(agent, monkeypatch, "--for", "drain", "--client", "loop", "--timeout", "2s")
        _, err = capsys.readouterr()
        assert code == 1 and "client loop has saved for it" in err, err


def test_two_shell_loops_the_flag_goes_only_once_both_acked(tmp_path: Path) -> None:
    """Two shell jobs on the node, each the README's loop with a client id of its own: the
    quick job's ack released the flag file's drain (the file removed, as an operator's script
    that reboots once it goes waits for) while the slow job was still saving. `wait --client`
    now holds the notice for its job until that job acks."""
    with AgentProcess(tmp_path) as agent:
        job, env = _job_dir(tmp_path, agent.env)
        # The slow job's save lasts until the test lets it end.
        release = tmp_path / "release-slow"
        slow_save = job / "slow-save.sh"
        slow_save.write_text(
            f'#!/bin/sh\necho saving >> "$SAVES"\n'
            f"while [ ! -e {shlex.quote(str(release))} ]; do sleep 0.05; done\n"
        )
        slow_save.chmod(0o755)
        loops: list[subprocess.Popen[bytes]] = []
        flag = agent.runtime / "checkpoint-now"

        def start(name: str, save: str) -> None:
            script = readme_loop().replace("me=save-loop", f"me={name}", 1)
            script = script.replace("./save-checkpoint.sh", save, 1)
            with (tmp_path / f"{name}.err").open("w") as err:
                loops.append(
                    subprocess.Popen(
                        ["bash", "-e", "-c", script],
                        cwd=job,
                        env={**env, "SAVES": str(tmp_path / f"{name}.saves")},
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                        start_new_session=True,
                    )
                )

        try:
            # The slow job is saving for the drain when the quick one starts (its wait gets
            # the drain by replay): the order the race takes when the quick job wins it.
            flag.write_text("")
            start("slow", "./slow-save.sh")
            eventually(lambda: _count(tmp_path / "slow.saves") == 1, timeout=20, what="slow's save")
            start("quick", "./save-checkpoint.sh")
            eventually(
                lambda: " from quick: step=7" in agent.output(), timeout=20, what="quick's ack"
            )
            assert flag.exists(), "released by the quick job's ack while the slow one saves"
            release.touch()
            eventually(lambda: not flag.exists(), timeout=20, what="the flag handled")
            # Logged after the ack's after-action (the removal): waited for, not read at once.
            eventually(
                lambda: " from slow: step=7" in agent.output(), timeout=10, what="slow's ack logged"
            )
        finally:
            for loop in loops:
                if loop.poll() is None:
                    os.killpg(loop.pid, signal.SIGKILL)
                    loop.wait()


def test_a_loop_killed_between_its_wait_and_its_ack_lets_go_of_its_hold(tmp_path: Path) -> None:
    """Two README loops on the node; the slow one is killed (kill -9, as an OOM kill or a
    node's job scheduler does) while it saves. Its hold kept the flag file's drain from
    counting as flushed until the drain was retired an hour later: the quick loop's ack was not
    enough, and an operator's script waiting for the file to go waited that long. The hold
    names the loop's process (`--pid "$$"`), and the agent lets go of it once that is gone."""
    with AgentProcess(tmp_path) as agent:
        job, env = _job_dir(tmp_path, agent.env)
        slow_save = job / "slow-save.sh"
        slow_save.write_text('#!/bin/sh\necho saving >> "$SAVES"\nexec sleep 60\n')
        slow_save.chmod(0o755)
        flag = agent.runtime / "checkpoint-now"
        loops: dict[str, subprocess.Popen[bytes]] = {}

        def start(name: str, save: str) -> None:
            script = readme_loop().replace("me=save-loop", f"me={name}", 1)
            script = script.replace("./save-checkpoint.sh", save, 1)
            loops[name] = subprocess.Popen(
                ["bash", "-e", "-c", script],
                cwd=job,
                env={**env, "SAVES": str(tmp_path / f"{name}.saves")},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )

        try:
            flag.write_text("")
            start("slow", "./slow-save.sh")
            eventually(lambda: _count(tmp_path / "slow.saves") == 1, timeout=20, what="slow's save")
            start("quick", "./save-checkpoint.sh")
            eventually(
                lambda: " from quick: step=7" in agent.output(), timeout=20, what="quick's ack"
            )
            assert flag.exists(), "released by the quick job's ack while the slow one saves"
            os.killpg(loops["slow"].pid, signal.SIGKILL)
            loops["slow"].wait()
            eventually(lambda: not flag.exists(), timeout=10, what="the killed loop's hold let go")
            assert "hold of client slow on" in agent.output()
        finally:
            for loop in loops.values():
                if loop.poll() is None:
                    os.killpg(loop.pid, signal.SIGKILL)
                    loop.wait()


def test_a_loop_killed_alone_holds_while_its_save_runs_on(tmp_path: Path) -> None:
    """`kill "$LOOP"` ends the loop's shell (no trap: SIGTERM kills a non-interactive bash at
    once) while the save it started runs on in its process group. Let go with the shell,
    the notice counted as flushed at the other loop's ack (the flag removed) while that save
    still wrote; the hold lasts while any process of the loop's group is left."""
    with AgentProcess(tmp_path) as agent:
        job, env = _job_dir(tmp_path, agent.env)
        slow_save = job / "slow-save.sh"
        slow_save.write_text('#!/bin/sh\necho saving >> "$SAVES"\nexec sleep 60\n')
        slow_save.chmod(0o755)
        flag = agent.runtime / "checkpoint-now"
        loops: dict[str, subprocess.Popen[bytes]] = {}

        def start(name: str, save: str) -> None:
            script = readme_loop().replace("me=save-loop", f"me={name}", 1)
            script = script.replace("./save-checkpoint.sh", save, 1)
            loops[name] = subprocess.Popen(
                ["bash", "-e", "-c", script],
                cwd=job,
                env={**env, "SAVES": str(tmp_path / f"{name}.saves")},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )

        try:
            flag.write_text("")
            start("slow", "./slow-save.sh")
            eventually(lambda: _count(tmp_path / "slow.saves") == 1, timeout=20, what="slow's save")
            os.kill(loops["slow"].pid, signal.SIGTERM)  # the shell alone; its save runs on
            loops["slow"].wait()
            start("quick", "./save-checkpoint.sh")
            eventually(
                lambda: " from quick: step=7" in agent.output(), timeout=20, what="quick's ack"
            )
            with Subscriber(agent.events, ("heartbeat",)) as beats:
                for _ in range(3):  # the agent looks at the holds at each heartbeat
                    beats.recv(5.0)
            assert flag.exists(), "released while the killed loop's save still runs"
            os.killpg(loops["slow"].pid, signal.SIGKILL)  # the save ends too
            eventually(lambda: not flag.exists(), timeout=10, what="the hold let go")
        finally:
            for loop in loops.values():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(loop.pid, signal.SIGKILL)
                if loop.poll() is None:
                    loop.wait()


def test_the_readme_loop_pasted_without_a_step_variable_still_acks_its_saves(
    tmp_path: Path,
) -> None:
    """The README's loop acks with `--step "$STEP"`: pasted into a job that sets no STEP (a
    shell job that counts no steps), each ack was refused (`--step: not a whole number: ''`,
    exit 2) and sent nothing. Under `set -e` the loop ended at its first ack, and the
    terminate after it was never saved for; without, the drain stayed held and the loop
    saved for it over and over. A blank `--step` is no step: the ack goes, and says so.

    Pasted into a job script under `set -euo pipefail` (as job scripts often start),
    `"$STEP"` unset ended the script at `STEP: unbound variable` after its first save: the
    ack never went and the terminate was never saved for. The README writes `"${STEP-}"`."""
    with AgentProcess(tmp_path) as agent:
        job, env = _job_dir(tmp_path, agent.env)
        del env["STEP"]
        saves, stderr = tmp_path / "saves", tmp_path / "loop.err"
        flag = agent.runtime / "checkpoint-now"
        flag.write_text("")
        eventually(lambda: agent.control({"op": "status"})["active"], what="the flag's drain")
        with stderr.open("w") as err:
            loop = subprocess.Popen(
                ["bash", "-euo", "pipefail", "-c", readme_loop()],
                cwd=job,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        try:
            eventually(
                lambda: not flag.exists() or loop.poll() is not None,
                timeout=20,
                what="the flag file released",
            )
            assert loop.poll() is None, stderr.read_text()
            assert _count(saves) == 1, stderr.read_text()
            agent.control({"op": "notify", "action": "terminate", "deadline": _in(600)})
            assert loop.wait(20) == 0, stderr.read_text()
        finally:
            if loop.poll() is None:
                os.killpg(loop.pid, signal.SIGKILL)
                loop.wait()
        assert _count(saves) == 2, stderr.read_text()
        assert "--step: empty" in stderr.read_text(), stderr.read_text()


def test_the_readme_loop_acks_a_drain_and_then_its_terminate_with_the_same_command(
    tmp_path: Path,
) -> None:
    """The loop saves for a drain, and the drain is escalated to terminate (same id): its next
    `wait` returns the terminate, and the loop saves and acks it with the command it acked the
    drain with, word for word (the same step and flush). The agent took that ack for a repeat
    of the drain's and dropped it: the terminate, acked by no one, named the loop at its
    deadline."""
    args = ("--exit-margin", "3s", "--set", "notice_grace=60")
    with AgentProcess(tmp_path, args=args) as agent:
        job, env = _job_dir(tmp_path, agent.env)
        saves, stderr = tmp_path / "saves", tmp_path / "loop.err"
        deadline = datetime.now(timezone.utc) + timedelta(seconds=8)
        request = {"op": "notify", "action": "drain", "deadline": format_time(deadline)}
        notice_id = agent.control(request)["notice"]["id"]
        with stderr.open("w") as err:
            loop = subprocess.Popen(
                ["bash", "-e", "-c", readme_loop()],
                cwd=job,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        try:
            assert loop.wait(20) == 0, stderr.read_text()
        finally:
            if loop.poll() is None:
                os.killpg(loop.pid, signal.SIGKILL)
                loop.wait()
        assert _count(saves) == 2, stderr.read_text()
        acked = agent.control({"op": "status"})["acked_by"]
        assert acked == {notice_id: ["save-loop"]}, (acked, agent.output())
        eventually(
            lambda: datetime.now(timezone.utc) > deadline + timedelta(seconds=1),
            10,
            "a second past the deadline",
        )
        assert agent.control({"op": "status"})["unacked_past_deadline"] == {}
        assert "passed without an ack" not in agent.output()
