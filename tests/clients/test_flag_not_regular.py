"""A flag path that is no regular file (a symbolic link, a directory), taken by the guard
itself (no agent with the local provider runs): refused as the agent refuses it, with one
warning that says why, where the guard took a link for a drain the agent never raises."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from forewarn.clients import CheckpointGuard
from support import eventually

REFUSED = "no drain is raised"


def _job(flag: Path) -> CheckpointGuard:
    return CheckpointGuard(notices=False, handle_signals=False, flag_file=flag, agree=False)


@pytest.mark.parametrize("kind", ["link", "dangling link", "directory"])
def test_a_flag_path_the_agent_refuses_raises_no_save_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    flag = tmp_path / "checkpoint-now"
    target = tmp_path / "request"
    if kind == "directory":
        flag.mkdir()
    else:
        if kind == "link":
            target.write_text("10m\n")
        flag.symlink_to(target)
    caplog.set_level(logging.WARNING, logger="forewarn.clients")
    guard = _job(flag)
    try:
        eventually(lambda: REFUSED in caplog.text, timeout=5, what="the refusal's warning")
        assert not guard.due(1), f"a {kind} at the flag path was taken for a drain"
        assert flag.is_symlink() or flag.is_dir()  # not removed: not the guard's to remove
        # The operator writes the file itself: that one is a request, as to the agent.
        if kind == "directory":
            flag.rmdir()
        else:
            flag.unlink()
        flag.write_text("")
        eventually(lambda: guard.due(2), timeout=5, what="the regular flag's save")
        assert caplog.text.count(REFUSED) == 1, "warned again at every look"
    finally:
        guard.close()
