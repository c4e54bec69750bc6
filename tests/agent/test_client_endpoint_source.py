"""A client command (`status`, `notify`, `watch`, `wait`, `ack`) refusing an endpoint names
where it came from. found: with `events = "tcp://1.2.3.4:5"` in the agent's config file and
no flag, `forewarn status --config F` said `status: --events 'tcp://1.2.3.4:5': ...`, a flag
nobody gave; the same for a `FOREWARN_EVENTS` variable. The flag, the variable or the config
file and its key is named, as the agent names a key's source."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import agent_env, run_forewarn


@pytest.mark.parametrize("key", ["events", "control"])
def test_an_endpoint_from_the_config_file_is_named_by_the_file_and_key(
    tmp_path: Path, key: str
) -> None:
    config = tmp_path / "forewarn.toml"
    config.write_text(f'{key} = "tcp://1.2.3.4:5"\n')
    done = run_forewarn("status", "--config", str(config), env=agent_env(tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(
        f"forewarn: status: config file {config}: {key} 'tcp://1.2.3.4:5': 1.2.3.4 is not"
    ), done.stderr


def test_an_endpoint_from_the_environment_is_named_by_the_variable(tmp_path: Path) -> None:
    env = agent_env(tmp_path, FOREWARN_CONTROL="ipc:///run/fw/")
    done = run_forewarn("notify", "drain", env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(
        "forewarn: notify: environment FOREWARN_CONTROL: control 'ipc:///run/fw/': the path"
    ), done.stderr


def test_a_flag_is_named_as_the_flag(tmp_path: Path) -> None:
    env = agent_env(tmp_path, FOREWARN_EVENTS="tcp://1.2.3.4:5")
    done = run_forewarn("status", "--events", "tcp://1.2.3.5:5", env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("forewarn: status: --events 'tcp://1.2.3.5:5': "), done.stderr
