"""`FOREWARN_*` variables are read in any case, by the agent and its clients alike: the agent
took `forewarn_runtime_dir` (pydantic-settings reads names in any case) while `forewarn
status` and `CheckpointGuard` looked for the agent in the default place, and the agent
ignored `forewarn_config`, while it read `forewarn_exit_margin`."""

from __future__ import annotations

from pathlib import Path

import pytest
from forewarn.protocol.wire import default_endpoints, runtime_dir
from hypothesis import given, settings
from hypothesis import strategies as st
from support import AgentProcess, agent_env, examples, run_forewarn


def _lowered(env: dict[str, str], *names: str) -> dict[str, str]:
    for name in names:
        env[name.lower()] = env.pop(name)
    return env


def test_a_client_finds_an_agent_whose_runtime_dir_variable_is_in_lower_case(
    tmp_path: Path,
) -> None:
    env = _lowered(agent_env(tmp_path), "FOREWARN_RUNTIME_DIR")
    runtime = Path(env["forewarn_runtime_dir"])
    with AgentProcess(tmp_path, env=env, runtime=runtime):
        status = run_forewarn("status", env=env)
    assert status.returncode == 0, status.stderr
    assert f"ipc://{runtime}/control" in status.stdout


def test_the_agent_reads_its_config_file_named_in_lower_case(tmp_path: Path) -> None:
    events = f"ipc://{tmp_path}/run/from-the-file"
    config = tmp_path / "forewarn.toml"
    config.write_text(f'events = "{events}"\n')
    env = agent_env(tmp_path, forewarn_config=str(config))
    with AgentProcess(tmp_path, env=env, events=events) as agent:
        reply = agent.control({"op": "status"})
        # The clients read the same file, named the same way.
        status = run_forewarn("status", "--json", env=env)
    assert reply["agent"]["events"] == events
    assert status.returncode == 0, status.stderr


@pytest.mark.parametrize("variable", ["FOREWARN_EXIT_MARGIN", "FOREWARN_CONFIG"])
def test_one_variable_in_two_spellings_is_refused(variable: str, tmp_path: Path) -> None:
    # Which of the two the agent took depended on the order of the environment.
    config = tmp_path / "forewarn.toml"
    config.write_text("")
    value = str(config) if variable == "FOREWARN_CONFIG" else "10s"
    other = str(tmp_path / "other.toml") if variable == "FOREWARN_CONFIG" else "20s"
    env = agent_env(tmp_path, **{variable: value, variable.title(): other})
    result = run_forewarn("agent", "--provider", "local", env=env)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and f"{variable} and {variable.title()}" in lines[0], lines


NAMES = st.sampled_from(["FOREWARN_RUNTIME_DIR", "FOREWARN_EVENTS", "FOREWARN_CONTROL"])


@settings(max_examples=examples(100), deadline=None)
@given(name=NAMES, spelling=st.lists(st.booleans(), min_size=20, max_size=20))
def test_any_spelling_of_a_client_variable_is_read(name: str, spelling: list[bool]) -> None:
    written = "".join(
        character.lower() if lower else character
        for character, lower in zip(name, spelling, strict=False)
    )
    value = {
        "FOREWARN_RUNTIME_DIR": "/tmp/forewarn-case-test",
        "FOREWARN_EVENTS": "ipc:///tmp/forewarn-case-test/e",
        "FOREWARN_CONTROL": "ipc:///tmp/forewarn-case-test/c",
    }[name]
    with pytest.MonkeyPatch.context() as patch:
        for other in ("FOREWARN_RUNTIME_DIR", "FOREWARN_EVENTS", "FOREWARN_CONTROL"):
            patch.delenv(other, raising=False)
        patch.setenv("FOREWARN_CONFIG", "/nonexistent/forewarn.toml")
        patch.setenv(written, value)
        if name == "FOREWARN_RUNTIME_DIR":
            assert runtime_dir() == Path(value)
        else:
            events, control = default_endpoints(Path("/tmp/forewarn-case-test"))
            assert value in (events, control)


def test_the_test_agent_leaves_a_variable_in_lower_case_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """forewarn.testing's agent runs on its own directories, whatever the caller's FOREWARN_
    variables: one in lower case reached it, and beside the one it sets, was refused."""
    from forewarn.testing import start_agent

    monkeypatch.setenv("forewarn_runtime_dir", "/nonexistent/forewarn-case")
    monkeypatch.setenv("forewarn_exit_margin", "not a duration")
    with start_agent() as agent:
        assert agent.status()["agent"]["providers"] == ["local"]
