"""A state directory under a user's disk quota (a cluster's home or project directory) that
the job's checkpoints used up: the write fails with EDQUOT, not ENOSPC. The quota is the
agent's user's, so the reserve held there is freed for the state as on a full disk. tmpfs
quotas are not in every kernel and root passes them by: the quota is played by the write."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from forewarn.agent import statewriter
from forewarn.agent.reserve import SpaceReserve
from forewarn.agent.statewriter import StateWriter


def test_a_state_write_over_quota_is_saved_from_the_reserve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reserve = SpaceReserve(tmp_path / "state.reserve")
    assert reserve.take() is None
    real_write = statewriter.write_atomically

    def over_quota_while_reserved(path: Path, data: bytes, *, mode: int) -> None:
        held = reserve.path.exists() and reserve.path.stat().st_blocks > 0
        if held:
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
        real_write(path, data, mode=mode)

    monkeypatch.setattr(statewriter, "write_atomically", over_quota_while_reserved)
    results: list[OSError | None] = []
    writer = StateWriter(tmp_path / "state.json", results.append, reserve)
    try:
        writer.write_now(b'{"version": 1}\n')
    finally:
        writer.close()
    assert results == [None]
    assert (tmp_path / "state.json").read_bytes() == b'{"version": 1}\n'
