"""A hold that names its process (`forewarn wait --client ID --pid PID`): the agent lets go
of it once that process is gone, and only when it can tell for sure (the same pid namespace,
the same process and not one that took its pid since); otherwise the hold stays until the
ack or the notice's end, as before."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from forewarn.agent.holders import Holder, pid_namespace, process_start
from forewarn.agent.protocol import HoldRequest
from forewarn.agent.state import AgentState, _held_pids, encode_state, load_state
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from support import AgentProcess, agent_env, eventually, examples, run_forewarn_here

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py); tests/agent/test_agent.py starts them fresh.
pytestmark = pytest.mark.usefixtures("forked_agents")


def _reaped_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def test_a_live_process_is_not_gone_and_an_ended_one_is() -> None:
    me = Holder(os.getpid(), process_start(os.getpid()), pid_namespace())
    assert not me.gone()
    assert Holder(_reaped_pid(), None, pid_namespace()).gone()


def test_a_pid_used_again_by_another_process_is_gone() -> None:
    start = process_start(os.getpid())
    assert start is not None
    assert Holder(os.getpid(), start + 1, pid_namespace()).gone()


def test_another_users_process_is_not_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    # kill(pid, 0) on another user's process fails with EPERM: it is there.
    def denied(pid: int, signum: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "kill", denied)
    assert not Holder(12345, None, pid_namespace()).gone()


def test_a_process_in_another_namespace_is_not_watched() -> None:
    own = pid_namespace()
    assert Holder(1, 0, own).watchable(own)
    assert not Holder(1, 0, "pid:[1]").watchable(own)
    assert not Holder(1, 0, None).watchable(own)
    assert not Holder(1, 0, own).watchable(None)


@given(
    pid=st.one_of(st.none(), st.integers(min_value=-(2**40), max_value=2**40)),
    start=st.one_of(st.none(), st.integers(min_value=-(2**70), max_value=2**70)),
)
def test_a_hold_request_takes_only_a_process_id_and_start_time_that_can_be(
    pid: int | None, start: int | None
) -> None:
    raw = {"op": "hold", "notice_id": "n", "client": "c", "pid": pid, "pid_start": start}
    valid = (pid is None or 1 <= pid <= 2**31 - 1) and (start is None or 0 <= start < 2**63)
    try:
        HoldRequest.model_validate(raw)
    except ValidationError:
        assert not valid
    else:
        assert valid


def test_the_agent_lets_go_of_a_gone_process_hold_only_in_its_own_namespace(
    tmp_path: Path,
) -> None:
    with AgentProcess(tmp_path) as agent, agent.subscriber() as sub:
        flag = agent.runtime / "checkpoint-now"
        flag.write_text("")
        drain = sub.notice(timeout=5)
        dead = _reaped_pid()

        def hold(client: str, namespace: str | None) -> dict[str, object]:
            request = {"op": "hold", "notice_id": drain["id"], "client": client, "pid": dead}
            if namespace is not None:
                request["pid_namespace"] = namespace
            return agent.control(request)

        # Another namespace's pid says nothing here: that hold stays.
        assert hold("elsewhere", "pid:[1]") == {"ok": True, "held": True, "watched": False}
        assert hold("here", pid_namespace()) == {"ok": True, "held": True, "watched": True}
        eventually(
            lambda: f"hold of client here on {drain['id']} let go" in agent.output(),
            timeout=5,
            what="the hold let go",
        )
        assert agent.control({"op": "ack", "notice_id": drain["id"], "client": "job"})["ok"]
        assert flag.exists(), "the hold of a process the agent cannot see was let go"
        assert f"hold of client elsewhere on {drain['id']} let go" not in agent.output()
        assert agent.control({"op": "ack", "notice_id": drain["id"], "client": "elsewhere"})["ok"]
        eventually(lambda: not flag.exists(), timeout=5, what="the flag handled")


def test_wait_pid_without_client_is_refused() -> None:
    done = run_forewarn_here("wait", "--pid", "1", "--timeout", "1s")
    assert done.returncode == 2 and "give --client" in done.stderr, done.stderr


def test_a_replacement_loops_hold_speaks_for_its_client_from_then_on(tmp_path: Path) -> None:
    """A loop killed while it saved and started again at once under the same client id: its
    new `wait` found the notice still held for that id (the agent had not looked at the dead
    process yet) and held nothing, and the dead process's hold was then let go: the notice
    counted as flushed at another client's ack while the new loop still saved."""
    with AgentProcess(tmp_path) as agent, agent.subscriber(("notice", "heartbeat")) as sub:
        flag = agent.runtime / "checkpoint-now"
        flag.write_text("")
        drain = sub.notice(timeout=5)
        own = pid_namespace()
        base = {"op": "hold", "notice_id": drain["id"], "client": "loop", "pid_namespace": own}
        assert agent.control({**base, "pid": _reaped_pid()})["held"] is True
        again = agent.control({**base, "pid": os.getpid()})
        assert again["ok"] and again["watched"] is True
        beats = 0
        while beats < 3:  # the agent looks at the holds' processes at each heartbeat
            topic, _ = sub.recv(5.0)
            beats += topic == "heartbeat"
        assert agent.control({"op": "ack", "notice_id": drain["id"], "client": "job"})["ok"]
        assert agent.control({"op": "status"})["ok"]
        assert flag.exists(), "the notice counted as flushed while the new loop still saves"


def test_a_restarted_agent_still_lets_go_of_a_gone_process_hold(tmp_path: Path) -> None:
    """The agent restarted (an upgrade) while a loop saved, and the loop was killed after:
    the restarted agent still held the notice for it, until it was retired an hour later."""
    loop = subprocess.Popen(["sleep", "60"])
    try:
        flag_id = ""
        with AgentProcess(tmp_path) as agent, agent.subscriber() as sub:
            flag = agent.runtime / "checkpoint-now"
            flag.write_text("")
            flag_id = sub.notice(timeout=5)["id"]
            request = {
                "op": "hold",
                "notice_id": flag_id,
                "client": "loop",
                "pid": loop.pid,
                "pid_start": process_start(loop.pid),
                "pid_namespace": pid_namespace(),
            }
            assert agent.control(request)["watched"] is True
        with AgentProcess(tmp_path) as agent:
            loop.kill()
            loop.wait()
            eventually(
                lambda: f"hold of client loop on {flag_id} let go" in agent.output(),
                timeout=5,
                what="the hold let go after the restart",
            )
            assert agent.control({"op": "ack", "notice_id": flag_id, "client": "job"})["ok"]
            eventually(lambda: not flag.exists(), timeout=5, what="the flag handled")
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.wait()


_VALUE = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)


@settings(max_examples=examples(60))
@given(
    raw=st.dictionaries(
        st.text(max_size=6),
        st.dictionaries(
            st.text(max_size=6),
            st.fixed_dictionaries(
                {"pid": _VALUE, "start": _VALUE, "namespace": _VALUE, "group": _VALUE}
            )
            | _VALUE,
            max_size=3,
        )
        | _VALUE,
        max_size=3,
    )
)
def test_a_state_files_hold_processes_are_taken_only_whole(raw: dict[str, object]) -> None:
    """A state file's `held_pids` as anything may have left it (a hand edit, a newer
    version): never an error, and a process is taken only with a pid that can be one."""
    held = _held_pids(raw)
    for holders in held.values():
        for holder in holders.values():
            assert type(holder.pid) is int and 1 <= holder.pid <= 2**31 - 1
            assert holder.start is None or (type(holder.start) is int and holder.start >= 0)
            assert isinstance(holder.namespace, str)
            assert holder.group is None or (type(holder.group) is int and holder.group >= 1)


def test_a_state_files_hold_processes_read_back_as_written(tmp_path: Path) -> None:
    holder = Holder(4242, 17, "pid:[4026531836]", 4240)
    written = encode_state(AgentState(held_pids={"local/flag/1": {"loop": holder}}))
    path = tmp_path / "state.json"
    path.write_bytes(written)
    assert load_state(path).held_pids == {"local/flag/1": {"loop": holder}}


def test_wait_pid_of_no_process_is_refused() -> None:
    """A pid that names no process (a typo, `$!` of a job that ended) made a hold the agent
    let go of at its next heartbeat: the notice released at another client's ack while this
    loop saved. Refused before the wait begins."""
    dead = _reaped_pid()
    done = run_forewarn_here("wait", "--client", "loop", "--pid", str(dead), "--timeout", "1s")
    assert done.returncode == 2 and f"no process {dead}" in done.stderr, done.stderr


def test_wait_holds_without_its_process_on_an_agent_older_than_pid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent older than `--pid` refuses a hold with fields it does not know: without
    asking again, the notice went unheld and the first loop's ack released it while another
    still saved. Asked again without them, it is held; wait says it is not watched."""
    import json
    import threading

    import zmq
    from forewarn.agent.cli import _hold

    endpoint = f"ipc://{tmp_path}/control"
    sock = zmq.Context.instance().socket(zmq.REP)
    sock.bind(endpoint)
    asked: list[dict[str, object]] = []

    def older_agent() -> None:
        for _ in range(2):
            if not sock.poll(5000):
                return  # not asked again
            request = json.loads(sock.recv())
            asked.append(request)
            if "pid" in request:
                reply = {"ok": False, "error": "pid: Extra inputs are not permitted"}
            else:
                reply = {"ok": True, "held": True}
            sock.send(json.dumps(reply).encode())

    server = threading.Thread(target=older_agent, daemon=True)
    server.start()
    try:
        _hold(endpoint, tmp_path, "local/flag/1", "loop", os.getpid())
    finally:
        server.join(timeout=10)
        sock.close()
    assert [sorted(r) for r in asked] == [
        ["client", "notice_id", "op", "pgid", "pid", "pid_namespace", "pid_start"],
        ["client", "notice_id", "op"],
    ]
    err = capsys.readouterr().err
    assert "cannot watch process" in err and "did not hold" not in err, err


def test_a_loop_started_beside_its_agent_is_let_go_when_killed(tmp_path: Path) -> None:
    """One script starts `forewarn agent &` and then its loop (a container's entrypoint, a
    batch job's script): both run in the script's process group. Killed before its ack, the
    loop's hold was never let go (`status` said `waiting for loop (pid N)` until the notice
    was retired), as the agent itself was a process of the loop's group."""
    env = agent_env(tmp_path)
    agent_log = tmp_path / "agent.log"
    held = tmp_path / "wait.out"
    cli = f"{sys.executable} -m forewarn.agent.cli"
    script = (
        f"{cli} agent --provider local > {agent_log} 2>&1 &\n"
        f"until {cli} status > /dev/null 2>&1; do sleep 0.1; done\n"
        f"{cli} wait --for drain --client loop --pid $$ > {held}\n"
        "exec sleep 600\n"  # the loop's save, in the loop's process
    )
    loop = subprocess.Popen(["sh", "-c", script], env=env, start_new_session=True)
    try:
        eventually(lambda: "serving events" in _text(agent_log), what="the agent started")
        flag = Path(env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        flag.write_text("")
        eventually(lambda: _text(held), what="the loop's wait returned the drain")
        loop.kill()  # before its ack; the agent is left in its group
        loop.wait()
        eventually(lambda: "let go" in _text(agent_log), timeout=10, what="the hold let go")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(loop.pid, signal.SIGTERM)  # the agent: stops, its sockets removed
        if loop.poll() is None:
            loop.kill()
            loop.wait()
    eventually(lambda: "stopped" in _text(agent_log), what="the agent stopped")


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""
