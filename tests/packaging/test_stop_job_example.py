"""`packaging/examples/stop-job-on-terminate.service`: its ExecStart line, run as written, stops
the job on a terminate and fails visibly (non-zero, naming the socket) without an agent."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from support import AgentProcess, agent_env

UNIT = (
    Path(__file__).resolve().parents[2] / "packaging" / "examples" / "stop-job-on-terminate.service"
)


def exec_start() -> list[str]:
    lines = [line for line in UNIT.read_text().splitlines() if line.startswith("ExecStart=")]
    assert len(lines) == 1, lines
    return shlex.split(lines[0].removeprefix("ExecStart="))


def stand_ins(tmp_path: Path) -> tuple[str, Path]:
    """A PATH on which `forewarn` is this checkout's CLI and `systemctl` records its arguments
    (the unit looks both up on its PATH)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "systemctl-calls"
    (bin_dir / "forewarn").write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m forewarn.agent.cli "$@"\n'
    )
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "$@" >> {shlex.quote(str(calls))}\n')
    for program in bin_dir.iterdir():
        program.chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin", calls


def test_exec_start_stops_the_job_on_a_terminate(tmp_path: Path) -> None:
    path, calls = stand_ins(tmp_path)
    env = agent_env(tmp_path, PATH=path)
    with AgentProcess(tmp_path, env=env) as agent:
        unit = subprocess.Popen(exec_start(), env=env, stderr=subprocess.PIPE, text=True)
        try:
            with agent.subscriber(("heartbeat",)) as sub:
                sub.recv(10)  # the agent is publishing; the unit's wait is subscribing
            # The scenario: a quiet agent for 0.5 s, in which the unit must not stop the job;
            # that nothing happens cannot be waited for, so the window is fixed.
            time.sleep(0.5)
            assert unit.poll() is None, "it waits while the agent is quiet"
            agent.control({"op": "notify", "action": "terminate"})
            assert unit.wait(15) == 0, unit.stderr.read() if unit.stderr else ""
        finally:
            if unit.poll() is None:
                unit.kill()
                unit.wait()
    assert calls.read_text().split() == ["stop", "--no-block", "batch-job.service"]


def unit_environment(files: dict[str, Path]) -> dict[str, str]:
    """The variables systemd gives ExecStart: Environment= lines, then each EnvironmentFile=
    (its values override those; a leading "-" lets it be missing), the file read from
    `files` where it names one of its paths."""
    values: dict[str, str] = {}
    lines = [line.strip() for line in UNIT.read_text().splitlines()]
    for line in lines:
        if line.startswith("Environment="):
            for item in shlex.split(line.removeprefix("Environment=")):
                key, _, value = item.partition("=")
                values[key] = value
    for line in lines:
        if line.startswith("EnvironmentFile="):
            name = line.removeprefix("EnvironmentFile=")
            optional = name.startswith("-")
            path = files.get(name.removeprefix("-"))
            if path is None or not path.exists():
                assert optional, f"{name}: systemd would refuse to start the unit without it"
                continue
            for entry in path.read_text().splitlines():
                if entry.strip() and not entry.lstrip().startswith("#"):
                    key, _, value = entry.partition("=")
                    values[key.strip()] = value.strip()
    return values


def test_exec_start_finds_an_agent_moved_by_the_agents_env_file(tmp_path: Path) -> None:
    """The agent's unit reads /etc/forewarn/forewarn.env, where docs/operations.md puts its
    settings: a FOREWARN_RUNTIME_DIR set there moves the agent's sockets. This unit did not
    read it and waited on /run/forewarn, where no agent was: `forewarn wait` exited 3 every
    5 s and the job was never stopped."""
    path, calls = stand_ins(tmp_path)
    env = agent_env(tmp_path, PATH=path)
    env_file = tmp_path / "forewarn.env"
    env_file.write_text(f"FOREWARN_RUNTIME_DIR={env['FOREWARN_RUNTIME_DIR']}\n")
    unit_env = {
        **{k: v for k, v in env.items() if k != "FOREWARN_RUNTIME_DIR"},
        **unit_environment({"/etc/forewarn/forewarn.env": env_file}),
        "PATH": path,  # the unit's PATH names /opt/forewarn/venv/bin, absent here
    }
    with AgentProcess(tmp_path, env=env) as agent:
        unit = subprocess.Popen(exec_start(), env=unit_env, stderr=subprocess.PIPE, text=True)
        try:
            with agent.subscriber(("heartbeat",)) as sub:
                sub.recv(10)
            agent.control({"op": "notify", "action": "terminate"})
            assert unit.wait(15) == 0, unit.stderr.read() if unit.stderr else ""
        finally:
            if unit.poll() is None:
                unit.kill()
                unit.wait()
    assert calls.read_text().split() == ["stop", "--no-block", "batch-job.service"]


def test_exec_start_fails_visibly_without_an_agent(tmp_path: Path) -> None:
    path, calls = stand_ins(tmp_path)
    env = agent_env(tmp_path, PATH=path)
    started = time.monotonic()
    done = subprocess.run(exec_start(), env=env, capture_output=True, text=True, timeout=30)
    took = time.monotonic() - started
    assert done.returncode == 3, done.stderr
    assert took < 15, f"it took {took:.1f}s to give up"
    socket = f"ipc://{env['FOREWARN_RUNTIME_DIR']}/events"
    assert socket in done.stderr and "no agent" in done.stderr, done.stderr
    assert not calls.exists(), "no agent is not a terminate: the job must not be stopped"


def test_the_example_units_pass_systemd_analyze_verify(
    tmp_path: Path, tool: Callable[[str], str]
) -> None:
    analyze = tool("systemd-analyze")
    copy = tmp_path / UNIT.name
    copy.write_text(UNIT.read_text())
    job = tmp_path / "batch-job.service"
    job.write_text("[Service]\nExecStart=/bin/true\n")
    result = subprocess.run(
        [analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    ours = [line for line in (result.stdout + result.stderr).splitlines() if UNIT.name in line]
    assert ours == [], "\n".join(ours)


def test_the_training_example_signals_the_main_process_and_bounds_torchrun() -> None:
    """KillMode=mixed: SIGTERM to the main process only (not each DataLoader worker), SIGKILL
    to all at TimeoutStopSec; torchrun's own SIGKILL escalation kept inside that window."""
    training = UNIT.parents[1] / "systemd" / "example-training.service"
    values: dict[str, list[str]] = {}
    for line in training.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            values.setdefault(key.strip(), []).append(value.strip())
    assert values["KillMode"] == ["mixed"]
    stop = int(values["TimeoutStopSec"][0].removesuffix("s"))
    environment = dict(item.split("=", 1) for item in values["Environment"])
    torchrun = int(environment["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"])
    assert 30 < torchrun < stop


def test_the_sidecar_job_keeps_torchruns_escalation_inside_the_grace_period() -> None:
    job = UNIT.parents[1] / "kubernetes" / "overlays" / "sidecar-job" / "sidecar-job.yaml"
    text = job.read_text()
    grace = int(re.search(r"terminationGracePeriodSeconds: (\d+)", text).group(1))  # type: ignore[union-attr]
    torchrun = re.search(r"name: TORCH_ELASTIC_SHUTDOWN_TIMEOUT\s+value: \"(\d+)\"", text)
    assert torchrun is not None
    assert 30 < int(torchrun.group(1)) < grace
