"""forewarn.testing itself: what it imports, its public names, and how it fails."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import forewarn.testing
import forewarn.testing.dovecot
import forewarn.testing.waiting
import pytest
from forewarn.testing import (
    AgentDied,
    DovecotNotInstalled,
    RunningAgent,
    eventually,
    start_agent,
)


def test_importing_it_needs_only_the_standard_library_and_pyzmq() -> None:
    code = (
        "import sys; sys.modules['pytest'] = None; import forewarn.testing; "
        "print(sorted(m for m in ('httpx', 'pydantic', 'pytest', 'forewarn.agent') "
        "if sys.modules.get(m)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_exported_members() -> None:
    exported = {name for name in dir(forewarn.testing) if not name.startswith("_")}
    modules = {"agent", "dovecot", "events", "plugin", "providers", "simcontrol", "waiting"}
    assert exported - modules == set(forewarn.testing.__all__)


def test_an_unknown_provider_is_named() -> None:
    with pytest.raises(ValueError, match="provider must be one of local, aws, gcp"):
        RunningAgent("ibm")


def test_a_local_agent_has_no_cloud_notices_and_restores_the_environment() -> None:
    import os

    before = {key: os.environ.get(key) for key in ("FOREWARN_RUNTIME_DIR", "FOREWARN_EVENTS")}
    with start_agent() as agent:
        assert os.environ["FOREWARN_RUNTIME_DIR"] == str(agent.runtime_dir)
        with pytest.raises(AttributeError, match="start one with provider='aws'"):
            agent.aws.spot_interruption()
        notice = agent.notify("drain", deadline="10m")
        agent.move_deadline(notice, "1h")
        moved = agent.wait_for_event(id=notice, timeout=10)
        assert moved["action"] == "drain"
        assert agent.clear(notice) == [notice]
        assert agent.wait_for_event(id=notice, action="clear")["id"] == notice
    assert {key: os.environ.get(key) for key in before} == before
    assert not agent.root.exists() and not agent.alive


def test_an_agent_that_cannot_start_says_why_with_its_log() -> None:
    with pytest.raises(AgentDied, match=r"exited with code 2(.|\n)*exit.margin"):
        RunningAgent(exit_margin="soon").start()


def test_a_deep_temporary_directory_still_gives_a_working_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under pytest-xdist TMPDIR can be so deep that a socket path passes 107 bytes: the
    agent could not bind and the start hung for ever in teardown. It now falls back to /tmp."""
    import tempfile

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    with start_agent() as agent:
        assert len(str(agent.runtime_dir / "control")) <= 107
        assert agent.notify("drain").startswith("local/")
    assert not agent.root.exists()


def test_a_directory_too_deep_for_the_sockets_is_named_before_anything_starts(
    tmp_path: Path,
) -> None:
    """`directory=` too deep for a socket path started the agent, which exited 2, and the
    event recorder's thread died with a traceback of its own beside the error."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    with pytest.raises(ValueError, match=r"directory: .*run/control is \d+ bytes.*107"):
        RunningAgent(directory=deep)
    assert not deep.exists()


def test_a_simulator_that_cannot_start_is_an_agent_died_whenever_it_exits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A simulator that could not listen raised AgentDied when it exited before the agent's
    first heartbeat, but a bare RuntimeError when it exited after it: a test catching
    AgentDied missed it. Here it is slow to start and then exits before it listens (a
    sitecustomize; its second is the scenario): AgentDied, and nothing is left. (The agent
    now starts once the simulator listens, on the port it bound.)"""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, sys, time\nif 'simulate' in sys.orig_argv:\n"
        "    time.sleep(1)\n    print('cannot listen', file=sys.stderr)\n    os._exit(3)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(site))
    agent = RunningAgent("aws")
    with pytest.raises(AgentDied, match=r"(?s)exited with 3.*cannot listen"):
        agent.start()
    assert not agent.alive and not agent.root.exists()


def test_a_port_taken_between_a_pick_and_the_simulators_bind_does_not_stop_the_agent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """found: the simulator was started on free_port()'s number, a port closed again before it
    was handed out; another test's server binding it in between (here: every pick is a port
    another server listens on) made the simulator exit `cannot listen` (or, had that server
    been a simulator, pointed the agent at it). The simulator binds port 0 and the agent is
    given the address it bound."""
    import socket

    import forewarn.testing.agent

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(forewarn.testing.agent, "free_port", lambda: port, raising=False)
        monkeypatch.setattr(forewarn.testing.waiting, "free_port", lambda host="": port)
        with RunningAgent("aws") as agent:
            assert agent.simulator is not None
            assert agent.simulator.url != f"http://127.0.0.1:{port}"
            assert agent.simulator.control.requests()


def test_a_digitalocean_agent_without_dovecot_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(forewarn.testing.dovecot, "dovecot_binary", lambda: None)
    agent = RunningAgent("digitalocean")
    with pytest.raises(DovecotNotInstalled, match=r"dovecot is not installed.*dovecot-imapd"):
        agent.start()
    # Nothing was started, and nothing is left.
    assert agent.proc is None and agent.simulator is None and not agent.root.exists()


def test_the_agent_ignores_the_nodes_config_file(tmp_path: Path) -> None:
    """On a node whose /etc/forewarn/forewarn.toml is the documented example, with the real
    agent holding its metrics port, the test's agent read that file, could not listen and
    exited 2. The default config path is pointed at such a file here through a
    sitecustomize in the agent's environment."""
    import os
    import socket

    node_config = tmp_path / "etc" / "forewarn.toml"
    node_config.parent.mkdir()
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "from pathlib import Path\nimport forewarn.agent.config as config\n"
        f"config.DEFAULT_CONFIG_FILE = Path({str(node_config)!r})\n"
    )
    path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    with socket.socket() as taken:  # the node's own agent, serving its metrics
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        node_config.write_text(
            'providers = ["local", "aws"]\n'
            f'metrics_address = "127.0.0.1:{taken.getsockname()[1]}"\n'
        )
        with start_agent(env={"PYTHONPATH": path}) as agent:
            assert agent.status()["agent"]["providers"] == ["local"]
    # A config file the test names itself is still the one read.
    own = tmp_path / "own.toml"
    own.write_text('exit_margin = "soon"\n')
    with pytest.raises(AgentDied, match=r"exited with code 2(.|\n)*exit_margin"):
        RunningAgent(args=("--config", str(own))).start()


def test_the_agent_and_simulator_end_with_a_test_process_killed_outright() -> None:
    """They run in sessions of their own: a pytest ended by SIGKILL, or by a CI timeout's
    SIGTERM to its process group, left them (and a simulator's port) running for ever."""
    import signal

    from support import eventually, processes_mentioning

    code = (
        "import sys; from forewarn.testing import RunningAgent\n"
        "agent = RunningAgent('aws').start()\n"
        "print(agent.root, agent.pid, agent.simulator.proc.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    test = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert test.stdout is not None
    root, *pids = test.stdout.readline().split()
    try:
        test.kill()
        test.wait()
        eventually(lambda: not processes_mentioning(root), 20, "the agent and simulator to end")
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        test.stdin.close()  # type: ignore[union-attr]
        shutil.rmtree(root, ignore_errors=True)


def test_agents_stopped_in_any_order_leave_the_environment_as_it_was() -> None:
    """Stopped first to last (a test asking for `forewarn_agents` before `forewarn_agent`
    tears them down so), the last one restored the first one's endpoints: every later test
    of the session found FOREWARN_RUNTIME_DIR naming a directory already removed."""
    keys = ("FOREWARN_RUNTIME_DIR", "FOREWARN_EVENTS", "FOREWARN_CONTROL")
    before = {key: os.environ.get(key) for key in keys}
    first, second, third = (RunningAgent().start() for _ in range(3))
    try:
        second.stop()  # the middle one: the newest still holds the environment
        assert os.environ["FOREWARN_RUNTIME_DIR"] == str(third.runtime_dir)
        third.stop()  # back to the newest still running
        assert os.environ["FOREWARN_RUNTIME_DIR"] == str(first.runtime_dir)
    finally:
        for agent in (first, second, third):
            agent.stop()
    assert {key: os.environ.get(key) for key in keys} == before


def test_what_the_agent_saw_stays_readable_after_it_stopped() -> None:
    """After `with start_agent() as agent:` the acks read from its removed directory were []
    (a user's `assert agent.acks` failed with nothing to say why), `agent.events` raised and
    the log was empty, also in the report of a fixture whose agent never started."""
    from forewarn.clients import CheckpointGuard

    with start_agent() as agent:
        guard = CheckpointGuard(handle_signals=False)
        notice = agent.notify("drain")
        step = eventually(lambda: guard.due(1) and 1, 10, "the drain to reach the guard")
        guard.saved(step, 0.01)
        agent.wait_for_ack(notice)
        guard.close()
    assert [ack["notice_id"] for ack in agent.acks] == [notice]
    assert [event["id"] for event in agent.events] == [notice]
    assert agent.wait_for_event(id=notice)["action"] == "drain"
    assert agent.wait_for_ack(notice)["step"] == 1
    assert notice in agent.log()
    with pytest.raises(AgentDied, match="the agent was stopped"):
        agent.notify("drain")

    failed = RunningAgent(exit_margin="soon")
    with pytest.raises(AgentDied):
        failed.start()
    assert "exit-margin" in failed.log_tail()


def test_a_dovecot_started_on_a_thread_that_has_ended_keeps_serving() -> None:
    """Dovecot's parent-death signal is tied to the thread that started it: a DigitalOcean
    agent started on a thread (a pool, `asyncio.to_thread`) lost its mail server as soon as
    that thread ended, and `reclaim()` failed with ECONNRESET."""
    import threading
    import time

    if forewarn.testing.dovecot_binary() is None:
        pytest.skip("dovecot is not installed (apt-get install dovecot-imapd)")
    started: list[forewarn.testing.Dovecot] = []
    starter = threading.Thread(target=lambda: started.append(forewarn.testing.Dovecot().start()))
    starter.start()
    starter.join()
    server = started[0]
    try:
        user = server.add_user()
        # Not a wait: the server must keep answering for a while after that thread is gone.
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            server.append(user, b"Subject: still there\r\n\r\nhello\r\n")
        assert server.proc is not None and server.proc.poll() is None
    finally:
        server.stop()


def test_the_plugin_loads_under_pytest_7_with_pluggy_1_0() -> None:
    """pytest 7 runs with pluggy 1.0, whose `hookimpl` knows `hookwrapper=` but not
    `wrapper=`: the plugin, loaded by every pytest run where forewarn is installed, raised
    TypeError on import and no pytest at all could start there. pluggy 1.0's signature is
    put in place of today's here."""
    code = (
        "import pytest\n"
        "real = pytest.hookimpl\n"
        "def pluggy_1_0(function=None, hookwrapper=False, optionalhook=False, tryfirst=False,\n"
        "               trylast=False, specname=None):\n"
        "    return real(function, hookwrapper=hookwrapper, optionalhook=optionalhook,\n"
        "                tryfirst=tryfirst, trylast=trylast, specname=specname)\n"
        "pytest.hookimpl = pluggy_1_0\n"
        "import forewarn.testing.plugin\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_failed_test_reports_each_agent_with_its_log(tmp_path: Path) -> None:
    (tmp_path / "test_fails.py").write_text(
        "import os, signal\n"
        "def test_fails(forewarn_agent):\n"
        "    forewarn_agent.notify('drain', id='local/the-notice')\n"
        "    os.kill(forewarn_agent.pid, signal.SIGKILL)\n"
        "    forewarn_agent.proc.wait()\n"
        "    assert False\n"
    )
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
            "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path),
        ],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "forewarn agent (local, pid " in done.stdout
    assert "DIED with exit code -9" in done.stdout
    assert "notice drain local/the-notice" in done.stdout.split("DIED with exit code -9")[1]


def test_a_moved_deadline_keeps_the_notice_as_it_was_raised() -> None:
    """move_deadline re-raised the notice with the action the status showed, so a drain the
    agent had escalated (its deadline within the exit margin) stayed a terminate when moved
    out again, and its note was dropped."""
    with start_agent() as agent:
        notice = agent.notify("drain", "1h", note="planned")
        agent.move_deadline(notice, "30s")  # within the exit margin: sent as a terminate
        assert agent.wait_for_event(id=notice, action="terminate")["detail"] == {"note": "planned"}
        agent.move_deadline(notice, "1h")  # out of it again: the drain it was raised as
        [active] = agent.status()["active"]
        assert (active["action"], active["detail"]) == ("drain", {"note": "planned"})


def test_sim_control_raises_a_notice_for_later_without_a_key_error() -> None:
    # The control API answers a notice with "after" 202 and its `scheduled-N` id (no id
    # before d5e3ff1): `raise_notice(kind, after=S)`, documented for any notice kind, raised
    # KeyError 'id' from inside SimControl, though the notice was scheduled.
    from forewarn.providers.aws.simulate import ImdsSimulator
    from forewarn.providers.simulator import SimServer
    from forewarn.testing import SimControl, eventually

    with SimServer(ImdsSimulator()) as server:
        control = SimControl(server.url)
        assert control.raise_notice("rebalance", after=0.1) == "scheduled-1"
        eventually(lambda: control.state()["rebalance"], timeout=10, what="the rebalance")
        assert control.raise_notice("spot") == "spot"


def test_a_replay_to_a_subscriber_that_joined_late_is_not_a_second_event() -> None:
    """`agent.events` listed a notice twice when any subscriber (a guard created just before
    `notify`, a second rank) joined after it: the agent sends the active notices again, with
    new `seq` and `sent_at`, to every subscriber, and the recorder kept the copy as news. A
    user's `assert [e["id"] for e in agent.events] == [notice]` failed under load."""
    import json

    import zmq

    with start_agent() as agent:
        first = agent.notify("drain", deadline="10m")
        agent.wait_for_event(id=first)
        context = zmq.Context()
        late = context.socket(zmq.SUB)
        late.setsockopt(zmq.LINGER, 0)
        late.setsockopt(zmq.SUBSCRIBE, b"notice")
        late.connect(agent.events_endpoint)
        try:
            assert late.poll(10_000), "no replay reached the late subscriber"
            replayed = json.loads(late.recv_multipart()[1])
            assert replayed["id"] == first
        finally:
            late.close()
            context.term()
        # Published after the replay: once the recorder has it, it has read the replay too.
        second = agent.notify("terminate", deadline="10m")
        agent.wait_for_event(id=second)
        assert [event["id"] for event in agent.events] == [first, second]


def test_a_deadline_given_as_a_duration_is_counted_on_the_agents_boot_clock() -> None:
    """`notify(deadline="15m")` sent the time it came to, which a step of the wall clock
    (NTP's first sync) left where it was while the machine's end moved with real time: sent
    as `forewarn notify --deadline 15m` sends it (`deadline_in`), the agent keeps it on the
    boot clock (its state's `deadline_clock`). A time stays a time."""
    import json
    from datetime import timedelta

    from forewarn.protocol.timefmt import format_time, utcnow

    with start_agent() as agent:
        in_a_while = agent.notify("drain", deadline="15m")
        at_a_time = agent.notify("drain", deadline=format_time(utcnow() + timedelta(hours=1)))
        saved = json.loads((agent.state_dir / "state.json").read_text())
        assert list(saved["deadline_clock"]) == [in_a_while]
        assert {n["id"] for n in agent.status()["active"]} == {in_a_while, at_a_time}
