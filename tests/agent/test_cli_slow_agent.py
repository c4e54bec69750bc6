"""`notify` and `status` against an agent that answers late, and against none at all: a zmq
REQ cannot tell the two apart, so the command looks at the endpoint before it asks."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from forewarn.agent.cli import CONTROL_TIMEOUT, build_parser, main
from forewarn.protocol.wire import EndpointError, check_endpoint, request, unreachable
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples


class LateAgent:
    """A REP socket that takes requests and answers each only once `answer` is set."""

    def __init__(self, endpoint: str) -> None:
        self.sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.REP)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)
        self.requests: list[dict[str, Any]] = []
        self.answer = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            if not self.sock.poll(20):
                continue
            request = json.loads(self.sock.recv())
            self.requests.append(request)
            while not (self.answer.wait(0.02) or self.stop.is_set()):
                pass
            notice = {
                "id": request.get("id"),
                "action": "drain",
                "reason": "manual",
                "provider": "local",
            }
            self.sock.send(json.dumps({"ok": True, "notice": notice}).encode())

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as leave:
        return int(leave.code or 0)


@pytest.fixture
def late(tmp_path: Path) -> Iterator[tuple[LateAgent, list[str]]]:
    agent = LateAgent(f"ipc://{tmp_path}/control")
    flags = ["--runtime-dir", str(tmp_path)]
    try:
        yield agent, flags
    finally:
        agent.close()


def test_a_notify_the_agent_answers_late_names_the_notice_to_retry_with(
    late: tuple[LateAgent, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """The agent answers a notify once its state is fsynced; on a busy disk the command said
    'no agent answers' while the notice was out, and a retry without --id raised a second."""
    agent, flags = late
    code = run(["notify", "drain", "--timeout", "0.3", *flags])
    err = capsys.readouterr().err
    assert code == 1
    [sent] = agent.requests
    notice_id = sent["id"]
    assert notice_id.startswith("local/manual/")
    assert "has not answered within 0.3s" in err and "no agent" not in err
    assert f"the notice {notice_id} may have been raised" in err
    assert f"retry with --id {notice_id}" in err and "forewarn status" in err


def test_a_notify_without_id_sends_a_new_id_each_time(
    late: tuple[LateAgent, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    agent, flags = late
    agent.answer.set()
    assert run(["notify", "drain", *flags]) == 0
    assert run(["notify", "drain", "--id", "local/mine", *flags]) == 0
    assert run(["notify", "drain", *flags]) == 0
    ids = [request["id"] for request in agent.requests]
    assert ids[1] == "local/mine" and ids[0] != ids[2]
    out = capsys.readouterr().out
    assert ids[0] in out and ids[2] in out


def test_a_status_the_agent_answers_late_says_it_is_slow(
    late: tuple[LateAgent, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    _, flags = late
    assert run(["status", "--timeout", "0.3", *flags]) == 1
    err = capsys.readouterr().err
    assert "has not answered within 0.3s" in err and "no agent" not in err


@pytest.mark.parametrize("command", [["status"], ["notify", "drain"], ["notify", "clear"]])
@pytest.mark.parametrize("socket_file", ["absent", "stale"])
def test_with_no_agent_the_command_says_so_at_once(
    tmp_path: Path, command: list[str], socket_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if socket_file == "stale":  # an agent killed -9 leaves its socket file behind
        import socket

        with socket.socket(socket.AF_UNIX) as dead:
            dead.bind(str(tmp_path / "control"))
    start = time.monotonic()
    code = run([*command, "--runtime-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1
    assert time.monotonic() - start < CONTROL_TIMEOUT / 2
    assert f"no agent runs on ipc://{tmp_path}/control" in err
    why = "no socket file" if socket_file == "absent" else "Connection refused"
    assert why in err


def test_the_control_timeout_fits_a_busy_node() -> None:
    for command in (["status"], ["notify", "drain"]):
        args = build_parser(command[0]).parse_args(command)
        assert args.timeout == CONTROL_TIMEOUT >= 30


def test_the_help_gives_the_exit_code_of_no_agent_that_status_exits_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`forewarn --help` said '3 no agent answers' while notify and status exit 1 for it."""
    code = run(["status", "--runtime-dir", str(tmp_path)])
    assert code == 1
    epilog = build_parser().epilog or ""
    said = re.search(r"(\d+) failed \(notify, status and ack: also no agent", epilog)
    assert said is not None and int(said.group(1)) == code, epilog
    assert "3 no agent heard (wait, watch;" in epilog


@settings(max_examples=examples(60), deadline=None)
@given(
    endpoint=st.one_of(
        st.builds(lambda name: f"ipc:///tmp/forewarn-probe-{name}", st.text(max_size=60)),
        st.builds(lambda name: f"ipc://@{name}", st.text(max_size=100)),
        st.builds(
            lambda host, port: f"tcp://{host}:{port}",
            st.sampled_from(["127.0.0.1", "localhost", "[::1]"]),
            st.integers(1, 65535),
        ),
        st.text(max_size=40),
    )
)
def test_the_probe_of_any_accepted_endpoint_answers_without_raising(endpoint: str) -> None:
    try:
        check_endpoint(endpoint)
    except (EndpointError, UnicodeError):
        return
    why = unreachable(endpoint, timeout=0.2)
    assert why is None or (isinstance(why, str) and why)


def test_a_request_the_agent_answers_late_does_not_say_there_is_no_agent(
    late: tuple[LateAgent, list[str]],
) -> None:
    """The client's ack warning read 'no agent answered' while the agent was there and took
    the ack, only slowly (it answers once its state is on disk)."""
    agent, _ = late
    endpoint = f"ipc://{agent.sock.getsockopt_string(zmq.LAST_ENDPOINT)[len('ipc://') :]}"
    with pytest.raises(TimeoutError) as caught:
        request(endpoint, {"op": "ack", "client": "c"}, 0.2)
    assert agent.requests == [{"op": "ack", "client": "c"}]
    assert "no agent answered" not in str(caught.value)
    assert "may still carry the request out" in str(caught.value)


@pytest.mark.parametrize("locked", ["directory", "socket"])
def test_a_user_who_may_not_reach_the_agent_is_told_so_not_that_none_runs(
    locked: str, tmp_path: Path
) -> None:
    """The agent's 0750 runtime directory (or a 0600 socket) hid its socket from a user not
    in its group: the command said 'no socket file', as if no agent ran."""
    import os
    import stat

    from other_user import call_as, other_user, shared_tmp

    uid, gid = other_user()
    base = shared_tmp(0, 0)
    os.chmod(base, 0o755)
    try:
        agent = LateAgent(f"ipc://{base}/control")
        try:
            if locked == "directory":
                os.chmod(base, 0o700)
            else:
                os.chmod(base / "control", stat.S_IRUSR | stat.S_IWUSR)

            def ask() -> list[object]:
                import contextlib
                import io

                err = io.StringIO()
                with contextlib.redirect_stderr(err):
                    code = run(["status", "--runtime-dir", str(base), "--timeout", "0.5"])
                return [code, err.getvalue()]

            code, err = call_as(uid, gid, ask)
        finally:
            agent.close()
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)
    assert code == 1
    assert f"cannot reach the agent on ipc://{base}/control (permission denied" in str(err)
    assert "no agent runs" not in str(err)
