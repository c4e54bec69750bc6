"""The client library finds an agent set up in its config file alone, and a config file it
cannot use never stops a training job."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from forewarn.clients import CheckpointGuard, Notices
from support import AgentProcess, agent_env, eventually, free_port


def _client_environment(monkeypatch: pytest.MonkeyPatch, **variables: str) -> None:
    for name in list(os.environ):
        if name.startswith("FOREWARN_"):
            monkeypatch.delenv(name)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def test_the_guard_hears_and_acks_an_agent_set_up_in_its_config_file_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """runtime_dir, events and control in the agent's TOML file only: the job's guard looked
    in the default place and never heard the agent. Control on TCP needs the token from the
    runtime directory, so the ack going through says the guard found that directory too."""
    runtime = tmp_path / "from-file"
    runtime.mkdir()
    events, control = (f"tcp://127.0.0.1:{free_port()}" for _ in range(2))
    config = tmp_path / "forewarn.toml"
    config.write_text(f'runtime_dir = "{runtime}"\nevents = "{events}"\ncontrol = "{control}"\n')
    env = agent_env(tmp_path)
    del env["FOREWARN_RUNTIME_DIR"]
    agent = AgentProcess(
        tmp_path,
        args=("--config", str(config)),
        env=env,
        runtime=runtime,
        events=events,
        control=control,
    ).start()
    try:
        _client_environment(monkeypatch, FOREWARN_CONFIG=str(config))
        guard = CheckpointGuard(every_steps=1000, handle_signals=False)
        try:
            assert guard.flag_file == runtime / "checkpoint-now"
            assert guard.notices is not None
            assert eventually(lambda: guard.notices is not None and guard.notices.alive)
            agent.control({"op": "notify", "action": "drain", "id": "local/manual/cfg"})
            assert eventually(lambda: guard.due(1), what="the drain")
            guard.saved(1)
            assert eventually(
                lambda: "local/manual/cfg" in (guard.notices.agent or {}).get("acked", []),
                what="the ack",
            )
        finally:
            guard.close()
    finally:
        agent.stop()


@pytest.mark.parametrize(
    "text",
    [
        *("runtime_dir = [", "events = 5", 'events = "localhost:5555"', b"\xff\xfe = 1", None),
        # A NUL, which TOML can write: no path holds one.
        *('runtime_dir = "/tmp/fw\\u0000x"', 'events = "ipc:///tmp/fw\\u0000x"'),
    ],
    ids=str,
)
def test_a_config_file_the_job_cannot_use_is_one_warning_and_the_defaults(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    text: str | bytes | None,
) -> None:
    config = tmp_path / "forewarn.toml"
    if isinstance(text, str):
        config.write_text(text + "\n")
    elif isinstance(text, bytes):
        config.write_bytes(text)
    else:
        config.mkdir()
    runtime = tmp_path / "run"
    _client_environment(monkeypatch, FOREWARN_CONFIG=str(config), XDG_RUNTIME_DIR=str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="forewarn"):
        first = Notices(start=False)
        second = Notices(start=False)
    assert first.events == second.events
    assert first.events in (
        f"ipc://{runtime.parent / 'forewarn'}/events",
        "ipc:///run/forewarn/events",
    )
    said = [record.getMessage() for record in caplog.records if str(config) in record.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith(f"config file {config}: ")
