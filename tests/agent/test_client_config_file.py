"""The clients find an agent whose runtime_dir, events or control is set in its config file
alone: the CLI's notify, status, watch and wait, and the client library."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from forewarn.agent.config import ConfigError, load_settings
from forewarn.protocol.wire import ConfigFileError, read_client_config
from hypothesis import given, settings
from hypothesis import strategies as st
from support import AgentProcess, agent_env, examples, forewarn_cmd, free_port, run_forewarn

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py); tests/agent/test_agent.py starts them fresh.
pytestmark = pytest.mark.usefixtures("forked_agents")


def _file_agent(tmp_path: Path, config: Path, runtime: Path, **endpoints: str) -> AgentProcess:
    """An agent whose runtime directory (and maybe endpoints) its config file alone sets."""
    env = agent_env(tmp_path)
    del env["FOREWARN_RUNTIME_DIR"]
    return AgentProcess(
        tmp_path, args=("--config", str(config)), env=env, runtime=runtime, **endpoints
    )


def _client_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A client's environment: nothing of the agent's but what is named."""
    env = agent_env(tmp_path)
    for key in ("FOREWARN_RUNTIME_DIR", "FOREWARN_STATE_DIR"):
        env.pop(key)
    env.update(extra)
    return env


@pytest.mark.parametrize("tcp", [False, True], ids=["ipc", "tcp"])
def test_the_commands_find_an_agent_set_up_in_its_config_file_alone(
    tmp_path: Path, tcp: bool
) -> None:
    """`runtime_dir` (and `events`, `control`) set in the agent's TOML file only: `forewarn
    status` and `notify` looked in the default place and said no agent runs."""
    runtime = tmp_path / "from-file"
    runtime.mkdir()
    config = tmp_path / "forewarn.toml"
    text = f'runtime_dir = "{runtime}"\n'
    endpoints = {}
    if tcp:
        endpoints = {
            "events": f"tcp://127.0.0.1:{free_port()}",
            "control": f"tcp://127.0.0.1:{free_port()}",
        }
        text += "".join(f'{key} = "{value}"\n' for key, value in endpoints.items())
    config.write_text(text)
    with _file_agent(tmp_path, config, runtime, **endpoints):
        by_env = _client_env(tmp_path, FOREWARN_CONFIG=str(config))
        status = run_forewarn("status", "--json", env=by_env)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["ok"] is True
        notify = run_forewarn(
            "notify", "drain", "--id", "local/manual/cfg", "--config", str(config),
            env=_client_env(tmp_path),
        )  # fmt: skip
        assert notify.returncode == 0, notify.stderr
        # A late joiner is sent the active drain again: no race with the notify.
        for command in (("wait", "--for", "drain"), ("watch", "--count", "1")):
            done = run_forewarn(*command, "--json", "--timeout", "20s", env=by_env)
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["id"] == "local/manual/cfg"


def test_the_environment_wins_over_the_config_file_for_the_commands(tmp_path: Path) -> None:
    config = tmp_path / "forewarn.toml"
    config.write_text(f'runtime_dir = "{tmp_path / "elsewhere"}"\n')
    env = agent_env(tmp_path, FOREWARN_CONFIG=str(config))
    with AgentProcess(tmp_path, env=env):
        status = run_forewarn("status", "--json", env=env)
        assert status.returncode == 0, status.stderr


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("runtime_dir = [", "not valid TOML"),
        ("runtime_dir = 5", "config key runtime_dir: expected a string"),
        ('control = "a"\nCONTROL = "b"', "set twice"),
        # tomllib's RecursionError: a traceback, not this line.
        ("runtime_dir = " + "[" * 600 + "]" * 600, "nested too deep"),
    ],
)
def test_a_config_file_the_commands_cannot_use_is_an_error_naming_it(
    tmp_path: Path,
    text: str,
    says: str,
    run_forewarn_forked: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(text + "\n")
    # The first case as a fresh interpreter, the others forked from a process that loaded the
    # command line once (~0.02 CPU-s each instead of ~0.2; tests/conftest.py): the same
    # command, environment, exit code and stderr.
    run = run_forewarn if text == "runtime_dir = [" else run_forewarn_forked
    done = run("status", "--config", str(config), env=_client_env(tmp_path))
    assert done.returncode == 2
    assert f"config file {config}" in done.stderr and says in done.stderr


_VALUES = (
    st.sampled_from(
        [
            "",
            " ",
            "~",
            "~/run",
            "run",
            "../r",
            "/r",
            "ipc:///x/e",
            "ipc://e",
            "ipc://@e",
            "tcp://1:5",
        ]
    )
    | st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)
    | st.integers()
    | st.booleans()
    | st.lists(st.text(max_size=3), max_size=2)
)


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return json.dumps(value)  # a TOML basic string or integer


@settings(max_examples=examples(150), deadline=None)
@given(
    document=st.dictionaries(
        st.sampled_from(["runtime_dir", "events", "control", "Runtime_Dir", "EVENTS"]),
        _VALUES,
        max_size=3,
    )
)
def test_the_clients_read_the_three_keys_as_the_agent_does(
    tmp_path_factory: pytest.TempPathFactory, document: dict[str, object]
) -> None:
    """Whatever the file holds, the clients' reader either agrees with the agent's settings
    on runtime_dir, events and control, or names the file as the agent refuses it."""
    config = tmp_path_factory.mktemp("cfg") / "forewarn.toml"
    config.write_text("".join(f"{key} = {_toml(value)}\n" for key, value in document.items()))
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith("FOREWARN_"):
                patch.delenv(name)
        try:
            agent = load_settings(config, providers=["local"])
        except ConfigError:
            agent = None
        try:
            client = read_client_config(config)
        except ConfigFileError as error:
            assert str(error).startswith(f"config file {config}: ")
            assert agent is None
            return
    assert agent is not None, "the agent refuses what the clients read"
    assert client.runtime_dir == agent.runtime_dir
    assert client.events == (agent.events or None)
    assert client.control == (agent.control or None)


def test_a_relative_path_in_the_config_file_is_relative_to_the_files_directory(
    tmp_path: Path,
) -> None:
    """`runtime_dir = "run"` was relative to each reader's working directory: / for the agent
    under systemd, anywhere for a job, so the two never met. Both now read it relative to
    the config file's directory, the one place they share."""
    etc = tmp_path / "etc"
    agent_cwd, job_cwd = tmp_path / "agent-cwd", tmp_path / "job-cwd"
    for directory in (etc, agent_cwd, job_cwd):
        directory.mkdir()
    config = etc / "forewarn.toml"
    config.write_text('runtime_dir = "run"\nstate_dir = "./state"\n')
    env = agent_env(tmp_path)
    del env["FOREWARN_RUNTIME_DIR"], env["FOREWARN_STATE_DIR"]
    agent = AgentProcess(
        tmp_path, args=("--config", str(config)), env=env, runtime=etc / "run", cwd=agent_cwd
    )
    agent.start(timeout=15)
    try:
        assert (etc / "state").is_dir() and not (agent_cwd / "state").exists()
        done = subprocess.run(
            forewarn_cmd("status", "--json"),
            env=_client_env(tmp_path, FOREWARN_CONFIG=str(config)),
            cwd=job_cwd,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["ok"] is True
    finally:
        agent.stop()
