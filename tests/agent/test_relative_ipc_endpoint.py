"""A relative `ipc://` endpoint given to the agent by a flag, a FOREWARN_* variable or `--set`
(`ipc://events`, or `ipc://run/forewarn/events` with the third slash missing) was bound in
the agent's working directory: `/` under systemd, while the training job, in its own working
directory, looked elsewhere and heard no agent. The agent refuses it before any socket opens,
naming the key and the absolute path meant; in the config file it is relative to the file's
directory, as every path there is."""

from __future__ import annotations

import os
import string
import subprocess
from pathlib import Path

import pytest
from forewarn.agent.config import ConfigError, load_settings
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import agent_env, examples, forewarn_cmd

_NAMES = st.text(alphabet=string.ascii_letters + string.digits + "-_./", min_size=1, max_size=20)


@settings(max_examples=examples(100), deadline=None)
@given(path=_NAMES.filter(lambda text: not text.startswith(("/", "@", "~"))))
@example(path="run/forewarn/events")
@example(path="./events")
def test_a_relative_ipc_path_is_refused_naming_the_key(path: str) -> None:
    for key in ("events", "control"):
        with pytest.raises(ConfigError, match=f"config key {key}: .*relative") as caught:
            load_settings(**{key: f"ipc://{path}"})
        absolute = os.path.normpath(os.path.join(os.getcwd(), path))
        assert f"ipc://{absolute}" in str(caught.value)


def test_an_absolute_abstract_or_home_ipc_path_is_taken() -> None:
    assert load_settings(events="ipc:///run/fw/events").events == "ipc:///run/fw/events"
    assert load_settings(events="ipc://@fw-events").events == "ipc://@fw-events"
    home = os.path.expanduser("~")
    assert load_settings(control="ipc://~/fw/control").control == f"ipc://{home}/fw/control"


def test_the_config_file_reads_a_relative_ipc_path_from_its_directory(tmp_path: Path) -> None:
    config = tmp_path / "forewarn.toml"
    config.write_text('events = "ipc://run/events"\n')
    assert load_settings(config).events == f"ipc://{tmp_path}/run/events"


@pytest.mark.parametrize("how", ["flag", "variable", "set"])
def test_the_agent_exits_2_before_binding(tmp_path: Path, how: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env = agent_env(tmp_path)
    argv = ["agent", "--provider", "local"]
    if how == "flag":
        argv += ["--events", "ipc://ev"]
    elif how == "variable":
        env["FOREWARN_EVENTS"] = "ipc://ev"
    else:
        argv += ["--set", "events=ipc://ev"]
    done = subprocess.run(
        forewarn_cmd(*argv), env=env, cwd=work, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "config key events: " in done.stderr and f"ipc://{work}/ev" in done.stderr
    if how == "flag":
        assert done.stderr.startswith("forewarn: --events: ")
    assert list(work.iterdir()) == []
