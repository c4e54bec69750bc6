"""The state directory of an agent whose `runtime_dir` is set to the place it would use
unset. The state follows an overridden runtime directory into a subdirectory named after it,
so two agents never restore each other's notices; a runtime directory written out as its
own default is no other agent's, and its state is the default one."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from forewarn.agent import config as agent_config
from forewarn.agent.config import load_settings, runtime_state_name
from forewarn.agent.state import saved_seq
from forewarn.protocol import wire
from hypothesis import given, settings
from hypothesis import strategies as st
from other_user import ForkedAgent, other_user, shared_tmp
from support import agent_env, control, eventually, examples


def _answers(endpoint: str) -> bool:
    try:
        return bool(control(endpoint, {"op": "status"}, timeout=0.3).get("ok"))
    except TimeoutError:
        return False


def test_setting_runtime_dir_to_its_default_keeps_the_saved_notices(tmp_path: Path) -> None:
    """A user who wrote down the runtime directory the agent already used (`runtime_dir =
    "/run/forewarn"`, `FOREWARN_RUNTIME_DIR=/run/forewarn` beside a job's unit) restarted it
    with no saved notice: the state moved to `<state>/run-forewarn-<hash>`, and a manual drain
    raised before the restart was gone. Run as an ordinary user, whose default directories
    are the XDG ones under a directory of the test's own."""
    uid, gid = other_user()
    base = shared_tmp(uid, gid)
    try:
        env = agent_env(tmp_path)
        for key in ("FOREWARN_RUNTIME_DIR", "FOREWARN_STATE_DIR"):
            env.pop(key)
        (base / "xdg").mkdir(mode=0o700)
        shutil.chown(base / "xdg", uid, gid)
        env.update(HOME=str(base), XDG_RUNTIME_DIR=str(base / "xdg"))
        env.update(XDG_STATE_HOME=str(base / "state"))
        default_runtime = base / "xdg" / "forewarn"
        endpoint = f"ipc://{default_runtime}/control"

        def agent(name: str, *args: str) -> ForkedAgent:
            forked = ForkedAgent(uid, gid, env, ["--provider", "local", *args], base / name)
            forked.start()
            eventually(lambda: _answers(endpoint), 15, f"the {name} agent answering")
            return forked

        first = agent("unset.log")
        raised = control(endpoint, {"op": "notify", "action": "drain", "note": "kept"})
        assert first.stop() == 0
        again = agent("set.log", "--runtime-dir", str(default_runtime))
        try:
            active = control(endpoint, {"op": "status"})["active"]
        finally:
            again.stop()
        assert [n["id"] for n in active] == [raised["notice"]["id"]], again.output()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(runtime, state): directories of the test's own standing in for /run/forewarn and
    /var/lib/forewarn, and no FOREWARN_ variable or config file naming either."""
    runtime, state = tmp_path / "run" / "forewarn", tmp_path / "lib" / "forewarn"
    runtime.parent.mkdir()
    state.parent.mkdir()
    monkeypatch.setattr(wire, "SYSTEM_RUNTIME_DIR", runtime)
    monkeypatch.setattr(agent_config, "SYSTEM_STATE_DIR", state)
    for name in ("FOREWARN_RUNTIME_DIR", "FOREWARN_STATE_DIR", "FOREWARN_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    return runtime, state


def _saved(directory: Path, mtime: float, seq: int | None = None) -> None:
    """A state file written at `mtime`, naming `seq` (none: a file no agent wrote)."""
    directory.mkdir(parents=True, exist_ok=True)
    saved = {"version": 1} if seq is None else {"version": 1, "seq": seq}
    (directory / "state.json").write_text(json.dumps(saved))
    os.utime(directory / "state.json", (mtime, mtime))


@pytest.mark.parametrize("given", ["variable", "file", "flag", "trailing slash", "/var/run"])
def test_a_runtime_dir_written_as_its_default_has_the_default_state_dir(
    machine: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    runtime, state = machine
    assert load_settings().resolved_state_dir() == state
    if given == "variable":
        monkeypatch.setenv("FOREWARN_RUNTIME_DIR", str(runtime))
        settings = load_settings()
    elif given == "file":
        config = tmp_path / "forewarn.toml"
        config.write_text(f'runtime_dir = "{runtime}"\n')
        settings = load_settings(config)
    elif given == "/var/run":
        # /var/run links to /run on every systemd distribution.
        (tmp_path / "var-run").symlink_to(runtime.parent)
        settings = load_settings(runtime_dir=str(tmp_path / "var-run" / runtime.name))
    else:
        written = f"{runtime}/" if given == "trailing slash" else str(runtime)
        settings = load_settings(runtime_dir=written)
    assert settings.resolved_state_dir() == state
    assert settings.resolved_state_dir(reading=True) == state


def test_another_runtime_dir_still_has_a_state_dir_of_its_own(
    machine: tuple[Path, Path], tmp_path: Path
) -> None:
    state = machine[1]
    other = tmp_path / "elsewhere"
    assert load_settings(runtime_dir=str(other)).resolved_state_dir() == (
        state / runtime_state_name(other)
    )


def test_the_state_an_earlier_version_kept_beside_the_default_is_still_found(
    machine: tuple[Path, Path],
) -> None:
    """An install that set `runtime_dir` to its default under an earlier version keeps its
    state in `<state>/run-forewarn-<hash>`: it is used while it is the newer, set or unset,
    so neither that install nor one that went back to no setting starts without it."""
    runtime, state = machine
    legacy = state / runtime_state_name(runtime)
    _saved(legacy, 2_000_000_000)
    explicit, unset = load_settings(runtime_dir=str(runtime)), load_settings()
    assert explicit.resolved_state_dir() == unset.resolved_state_dir() == legacy
    # Both saved: the one written last is the one the agent last ran with.
    _saved(state, 1_000_000_000)
    assert load_settings(runtime_dir=str(runtime)).resolved_state_dir() == legacy
    _saved(state, 2_100_000_000)
    assert load_settings(runtime_dir=str(runtime)).resolved_state_dir() == state
    assert load_settings().resolved_state_dir() == state


def test_the_state_run_on_last_is_found_after_the_clock_was_stepped_back(
    machine: tuple[Path, Path],
) -> None:
    """The directory was chosen by the newer state file's time: an agent that left the
    earlier version's directory for the default one and saved there after the clock was
    stepped back (NTP correcting a clock that ran ahead) left the default one's file with the
    older time, and the next start took up the state it had left behind, its notices long
    gone, and the ones raised since lost. `seq`, which every version saves and which only
    grows from one start to the next, tells which was run on last."""
    runtime, state = machine
    legacy = state / runtime_state_name(runtime)
    _saved(legacy, 2_000_000_000, seq=2_000_000_000_000)  # its clock an hour ahead
    _saved(state, 1_996_400_000, seq=2_000_000_012_345)  # the agent after it, clock stepped
    assert load_settings().resolved_state_dir() == state
    assert load_settings(runtime_dir=str(runtime)).resolved_state_dir() == state
    # The other way round too; a seq mark above the state file's counts as its seq.
    _saved(state, 2_000_000_000, seq=2_000_000_000_000)
    _saved(legacy, 1_996_400_000, seq=1_999_999_000_000)
    (legacy / "seq").write_text("2000000010000\n")
    assert load_settings().resolved_state_dir() == legacy
    # A file that names no seq (none an agent wrote) is told by its time, as before.
    _saved(state, 2_100_000_000)
    assert load_settings().resolved_state_dir() == state


@settings(max_examples=examples(60), deadline=None)
@given(
    st.one_of(
        st.binary(max_size=200),
        st.builds(
            lambda seq: json.dumps({"version": 1, "seq": seq}).encode(),
            st.one_of(st.integers(), st.floats(), st.booleans(), st.text(max_size=20)),
        ),
    ),
    st.binary(max_size=60),
)
def test_any_saved_state_gives_a_seq_or_none(state_file: bytes, mark: bytes) -> None:
    with tempfile.TemporaryDirectory() as where:
        directory = Path(where)
        (directory / "state.json").write_bytes(state_file)
        (directory / "seq").write_bytes(mark)
        found = saved_seq(directory)
    assert found is None or (type(found) is int and found >= 0)
