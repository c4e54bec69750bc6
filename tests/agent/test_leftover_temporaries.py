"""The temporary files of state writes cut short by a kill (SIGKILL or a power loss between
the write and the rename) are removed when the next agent takes the state directory: they
were left there for good, one more at every such kill."""

from __future__ import annotations

import os
from pathlib import Path

from forewarn.providers.persist import is_leftover, remove_leftovers
from hypothesis import given
from hypothesis import strategies as st
from support import AgentProcess, agent_env

LEFTOVERS = (".state.json.k3j_9x0a.tmp", ".seq.abcdefgh.tmp", ".gcp-active.json.0a1b2c3d.tmp")
KEPT = ("state.json.tmp", ".state.json.tmp", "notes.abcdefgh.tmp", ".x.abcdefgh.tmp.bak")


def test_the_agent_removes_the_leftovers_of_killed_writes(tmp_path: Path) -> None:
    env = agent_env(tmp_path)
    state = Path(env["FOREWARN_STATE_DIR"])
    state.mkdir(parents=True, exist_ok=True)
    for name in (*LEFTOVERS, *KEPT):
        (state / name).write_text("{")
    with AgentProcess(tmp_path, env=env):
        names = set(os.listdir(state))
    assert names.isdisjoint(LEFTOVERS), names
    assert set(KEPT) <= names, names


def test_a_link_or_directory_of_that_name_is_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / ".state.json.aaaaaaaa.tmp").symlink_to(target)
    (tmp_path / ".seq.bbbbbbbb.tmp").mkdir()
    assert remove_leftovers(tmp_path) == []
    assert target.read_text() == "keep" and (tmp_path / ".seq.bbbbbbbb.tmp").is_dir()


RANDOM = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=8, max_size=8)


@given(st.text(min_size=1, max_size=30), RANDOM)
def test_every_name_mkstemp_makes_for_a_write_matches(name: str, random: str) -> None:
    assert is_leftover(f".{name}.{random}.tmp")


@given(st.text(max_size=40))
def test_a_name_without_the_dot_in_front_or_the_suffix_never_matches(name: str) -> None:
    if not (name.startswith(".") and name.endswith(".tmp")):
        assert not is_leftover(name)


def test_the_agent_removes_the_leftovers_of_killed_writes_in_its_runtime_directory(
    tmp_path: Path,
) -> None:
    # The runtime directory has its writes too (the `seq` copy, GCP's pending notices): a
    # kill between the write and the rename left a temporary file on the tmpfs for good.
    env = agent_env(tmp_path)
    runtime = Path(env["FOREWARN_RUNTIME_DIR"])
    runtime.mkdir(parents=True, exist_ok=True)
    leftovers = (".seq.abcdefgh.tmp", ".gcp-notices.pending.json.0a1b2c3d.tmp")
    for name in (*leftovers, *KEPT):
        (runtime / name).write_text("{")
    with AgentProcess(tmp_path, env=env):
        names = set(os.listdir(runtime))
    assert names.isdisjoint(leftovers), names
    assert set(KEPT) <= names, names
